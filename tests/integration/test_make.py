"""The Makefile's two user commands, driven with a stand-in for the Python the tests run on.

`make test` must run every suite even when one fails (the layer check, the unit tests, the
integration, fault, GPU and thread-drive suites), and still exit non-zero; `make run` and `make test`
must build in a second make process, after the install step (tests/integration/test_readme.py
runs what `make run` serves; .ci/fresh-machine.sh runs `make run` after removing a package the
build needs).
"""
import os
import re
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BUILD, ROOT  # noqa: E402


def fake_python(tmp_path, rc):
    """A `python` for the tests (TEST_PYTHON) that records its arguments, one call a line, and
    exits with rc."""
    log = tmp_path / "calls"
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\necho \"$*\" >>{log}\nexit {rc}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe), log


def make(*args, timeout=120):
    # -o all -o models -o deps: the build and the install are not what is tested here (the
    # tree is built); UNIT_TESTS= runs no unit test binary
    # (and the openai npm client's install, which test-integration needs too)
    return subprocess.run(["make", "--no-print-directory", "-o", "all", "-o", "models", "-o",
                           "deps", "-o", "tests/openai/node_modules/.package-lock.json",
                           f"BUILD={os.path.relpath(BUILD, ROOT)}", "UNIT_TESTS=", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_make_test_runs_every_suite_and_fails(tmp_path):
    py, log = fake_python(tmp_path, 1)
    p = make("test", f"TEST_PYTHON={py}")
    assert p.returncode != 0, p.stdout + p.stderr
    calls = log.read_text().splitlines()
    # the layer check fails first; every pytest suite still runs
    assert calls[0].startswith("scripts/check_layers.py"), calls
    suites = [c for c in calls if c.startswith("-m pytest")]
    assert [s.split()[-1] for s in suites[:3]] == ["tests/integration", "tests/fault",
                                                   "tests/gpu"], suites
    assert len(suites) == 4 and "test_grpc.py" in suites[3], suites


def test_make_test_passes_when_every_suite_passes(tmp_path):
    py, log = fake_python(tmp_path, 0)
    p = make("test", f"TEST_PYTHON={py}")
    assert p.returncode == 0, p.stdout + p.stderr
    assert len([c for c in log.read_text().splitlines() if c.startswith("-m pytest")]) == 4


def test_run_and_test_build_in_a_second_make():
    """The install step and the build are two make processes: make caches what it saw of
    /usr/include when it started, so a make that installs libprotobuf-dev cannot also build
    the code generated from its files. -n prints the sub-make's command line without running
    the packages' install."""
    text = open(os.path.join(ROOT, "Makefile")).read()
    for target, inner in (("run", "serve"), ("test", "test-all")):
        m = re.search(rf"^{target}:(.*)\n((?:\t.*\n)+)", text, re.M)
        assert m, target
        assert m.group(1).split() == ["deps"], (target, m.group(1))
        assert re.search(rf"\$\(MAKE\) .*\b{inner}$", m.group(2), re.M), m.group(2)
