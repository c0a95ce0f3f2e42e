"""What code that embeds a Python interpreter compiles and links with, from that Python's sysconfig.

Run by the Makefile with the interpreter the Python plugin is built for (make PYTHON=PATH): a
venv's or a conda env's python works, since sysconfig answers for the installation underneath.
Nothing here names a Python version: headers, libpython's file and the interpreter's path all
come from the interpreter itself.

    PYTHON scripts/python_embed.py cflags      -I flags for Python.h
    PYTHON scripts/python_embed.py ldflags     libpython (the shared library, by its path), an
                                               rpath to its directory, and what it needs
    PYTHON scripts/python_embed.py executable  sys.executable: the embedded interpreter's
                                               program name, so that a venv's site-packages
                                               are found as that python finds them
    PYTHON scripts/python_embed.py info        key=value lines the frontend reads to check
                                               config.properties' `python` (frontend/core/pyinfo.c)

Exits 1 with a message when the interpreter has no shared libpython (a static build cannot be
embedded in a plugin the worker dlopens).
"""

import os
import sys
import sysconfig


def shared_libpython():
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    names = [sysconfig.get_config_var(k) for k in ("INSTSONAME", "LDLIBRARY")]
    ldversion = sysconfig.get_config_var("LDVERSION") or sysconfig.get_config_var("VERSION")
    names.append(f"libpython{ldversion}.so")
    for name in names:
        if not name or ".so" not in name:
            continue
        path = os.path.join(libdir, name)
        if os.path.exists(path):
            return path
    sys.exit(
        f"{sys.executable}: no shared libpython in {libdir or '(no LIBDIR)'} "
        f"(Py_ENABLE_SHARED={sysconfig.get_config_var('Py_ENABLE_SHARED')}): build Python with "
        "--enable-shared, or name another interpreter with make PYTHON=PATH"
    )


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "cflags":
        dirs = []
        for d in (sysconfig.get_path("include"), sysconfig.get_path("platinclude"),
                  sysconfig.get_config_var("INCLUDEPY")):
            if d and d not in dirs:
                dirs.append(d)
        print(" ".join("-I" + d for d in dirs))
    elif what == "ldflags":
        lib = shared_libpython()
        extra = " ".join(
            v for v in (sysconfig.get_config_var("LIBS"), sysconfig.get_config_var("SYSLIBS")) if v
        )
        print(f"{lib} -Wl,-rpath,{os.path.dirname(lib)} {extra}".strip())
    elif what == "executable":
        print(sys.executable)
    elif what == "info":
        shared_libpython()
        base = getattr(sys, "_base_executable", None) or sys.executable
        print(f"executable={sys.executable}")
        print(f"base_executable={base}")
        print(f"version={sys.version_info[0]}.{sys.version_info[1]}")
        print(f"prefix={sys.prefix}")
        print(f"base_prefix={sys.base_prefix}")
    else:
        sys.exit("usage: python_embed.py cflags|ldflags|executable|info")


if __name__ == "__main__":
    main()
