"""mlserver.utils: get_model_uri and the helpers runtimes call."""
import os

from .errors import InvalidModelURI


async def get_model_uri(settings, wellknown_filenames=()):
    """The model's artefact: parameters.uri taken relative to the folder of its
    model-settings.json (or that folder when no uri is set); a folder holding one of
    wellknown_filenames gives that file. InvalidModelURI when nothing is there."""
    base = getattr(settings, "_source", None)
    folder = os.path.dirname(base) if base else os.getcwd()
    uri = settings.parameters.uri if settings.parameters is not None else None
    path = folder if not uri else uri if os.path.isabs(uri) else os.path.join(folder, uri)
    path = os.path.normpath(path)
    if os.path.isdir(path):
        for name in wellknown_filenames:
            candidate = os.path.join(path, name)
            if os.path.isfile(candidate):
                return candidate
    if os.path.exists(path):
        return path
    raise InvalidModelURI(settings.name, path)


def get_wrapped_method(f):
    while hasattr(f, "__wrapped__"):
        f = f.__wrapped__
    return f
