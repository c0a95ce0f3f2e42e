"""The fault suite uses the integration tests' fixtures (real binaries on free ports)."""
import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "integration_conftest",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration", "conftest.py"))
_m = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_m)

start_server = _m.start_server
server_factory = _m.server_factory
pytest_configure = _m.pytest_configure
PYSTUBS = _m.PYSTUBS
python_model = _m.python_model
