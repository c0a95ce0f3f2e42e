"""ModelSettings and ModelParameters (mlserver.settings): what model-settings.json holds.

torchserve-c reads model-settings.json itself (tsc_runtimes/mlserver_app.py builds these from
it); runtimes read them as `self.settings` / `self._settings`. Settings (the server's
settings.json) exists for runtimes that construct or inspect it; torchserve-c's own server
settings come from config.properties.
"""
from .types.base import BaseModel, Field, any_value, dictionary, integer, list_of, model_of, string
from .types.dataplane import MetadataTensor


class ModelParameters(BaseModel):
    _fields = {
        "uri": Field(string, None),
        "version": Field(string, None),
        "environment_path": Field(string, None),
        "environment_tarball": Field(string, None),
        "inference_pool_gid": Field(string, None),
        "autogenerate_inference_pool_gid": Field(any_value, False),
        "format": Field(string, None),
        "content_type": Field(string, None),
        "extra": Field(dictionary, dict),
    }
    _extra = True


class ModelSettings(BaseModel):
    _fields = {
        "name": Field(string, ""),
        "implementation": Field(any_value),
        "platform": Field(string, ""),
        "versions": Field(list_of(string), list),
        "inputs": Field(list_of(model_of(MetadataTensor)), list),
        "outputs": Field(list_of(model_of(MetadataTensor)), list),
        "parameters": Field(model_of(ModelParameters), None),
        "parallel_workers": Field(integer, None),
        "warm_workers": Field(any_value, False),
        "max_batch_size": Field(integer, 0),
        "max_batch_time": Field(any_value, 0.0),
        "cache_enabled": Field(any_value, False),
    }
    _extra = True

    @property
    def version(self):
        return self.parameters.version if self.parameters is not None else None

    @property
    def implementation_(self):
        impl = self.implementation
        if isinstance(impl, str):
            return impl
        return f"{impl.__module__}.{impl.__name__}"


class Settings(BaseModel):
    _fields = {
        "debug": Field(any_value, False),
        "parallel_workers": Field(integer, 1),
        "model_repository_root": Field(string, "."),
        "load_models_at_startup": Field(any_value, True),
        "server_name": Field(string, "torchserve-c"),
        "server_version": Field(string, ""),
        "host": Field(string, "0.0.0.0"),
        "http_port": Field(integer, 8080),
        "grpc_port": Field(integer, 8081),
        "gzip_enabled": Field(any_value, False),
    }
    _extra = True
