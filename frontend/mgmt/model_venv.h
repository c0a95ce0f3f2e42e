/*
 * model_venv: install_py_dep_per_model=true, TorchServe's per-model Python dependencies. A model
 * whose archive names a requirements file gets a virtual environment of its own, made with the
 * Python workers run (`python -m venv --system-site-packages --without-pip`, that python being
 * config.properties' `python` or the one the plugin was built for, Debian's python3 by default:
 * the system's packages, torch included, stay visible, and Debian's pip, python3-pip, installs
 * into it), and
 * `python3 -m pip install -r <requirements>` runs in it, from the model's directory, with the
 * server's environment: pip's own configuration (pip.conf, PIP_INDEX_URL, PIP_FIND_LINKS,
 * PIP_NO_INDEX, proxies) decides where packages come from. The model's Python workers then run
 * as that environment's python (worker_exec.h WORKER_ENV_VENV, backend/python/py_handler.c).
 *
 * Blocking (a pip install can take minutes): called on the registration thread only. Touches
 * nothing shared. The caller owns venv_dir and removes it with the model.
 */
#ifndef TS_MODEL_VENV_H
#define TS_MODEL_VENV_H

#include <stddef.h>

/* Makes the environment at venv_dir (which must not exist) with python and installs
 * model_dir/requirements into it. 0, or TS_E_BAD_CONFIG with err: what failed and the end of pip's
 * (or venv's) own output, e.g. "requirements.txt: pip install failed (exit 1): ERROR: Could not
 * find a version that satisfies the requirement nope==1.0". */
int model_venv_install(const char *python, const char *venv_dir, const char *model_dir,
                       const char *requirements, char *err, size_t errlen);

#endif
