"""ts.torch_handler.base_handler.BaseHandler: TorchServe's default handler contract.

initialize() loads the model named by the manifest onto the worker's device (cuda:{gpu_id} when
the frontend assigned a GPU and torch has CUDA, else the CPU, as TorchServe's does): a TorchScript
serializedFile, or eager mode (modelFile, a model.py with exactly one class, plus the
serializedFile as its state_dict), and the optional index_to_name.json label mapping, then
optimizes the model for inference as model-config.yaml's handler.optimize says
(ts.utils.optimize: scripted, frozen and torch.jit.optimize_for_inference by default). handle()
runs preprocess -> inference -> postprocess, or answers describe (describe_handle) and explain
(explain_handle) requests. Subclasses override any of these.
"""

import importlib
import logging
import os

import torch

from ts.utils import optimize
from ts.utils.util import load_label_mapping, single_class

logger = logging.getLogger(__name__)

# What `with torch.inference_mode():` enters, without the decorator object it builds on every
# use (a few Python calls per request); torch.inference_mode itself where torch lacks it.
_InferenceMode = getattr(torch._C, "_InferenceMode", None)


class BaseHandler:
    def __init__(self):
        self.model = None
        self.mapping = None
        self.device = None
        self.initialized = False
        self.context = None
        self.model_pt_path = None
        self.manifest = None
        self.map_location = None
        self.explain = False
        self.target = 0
        self.model_yaml_config = {}

    def initialize(self, context):
        self.context = context
        properties = context.system_properties
        self.model_yaml_config = context.model_yaml_config
        # as TorchServe's: the GPU the frontend assigned, when torch can use one
        if torch.cuda.is_available() and properties.get("gpu_id") is not None:
            self.map_location = "cuda"
            self.device = torch.device(self.map_location + ":" + str(properties.get("gpu_id")))
        else:
            self.map_location = "cpu"
            self.device = torch.device(self.map_location)
        self.manifest = context.manifest
        optimize_level, optimize_named = optimize.read_level(self.model_yaml_config)

        model_dir = properties.get("model_dir")
        model_info = (self.manifest or {}).get("model", {})
        serialized_file = model_info.get("serializedFile")
        self.model_pt_path = None
        if serialized_file:
            self.model_pt_path = os.path.join(model_dir, serialized_file)
            if not os.path.isfile(self.model_pt_path):
                raise RuntimeError(f"Missing the model file {serialized_file} in the archive")
        model_file = model_info.get("modelFile", "")

        if model_file:
            logger.debug("Loading eager model from %s", model_file)
            self.model = self._load_pickled_model(model_dir, model_file, self.model_pt_path)
            self.model.to(self.device)
        elif self.model_pt_path:
            logger.debug("Loading torchscript model from %s", self.model_pt_path)
            self.model = self._load_torchscript_model(self.model_pt_path)
        else:
            raise RuntimeError(
                "The archive names no model: MANIFEST.json has neither serializedFile nor modelFile"
            )
        self.model.eval()
        logger.debug("Model file %s loaded successfully", self.model_pt_path)
        self.model = optimize.optimize(
            self.model,
            optimize_level,
            self.example_input(),
            name=model_file or serialized_file,
            explicit=optimize_named,
        )

        self.mapping = load_label_mapping(os.path.join(model_dir, "index_to_name.json"))
        self.initialized = True

    def example_input(self):
        """An input the model takes, for the optimized forward's check at load (None: not
        checked): a random batch of one of handler.input_shape when model-config.yaml gives
        it. Subclasses that know their input override it."""
        handler = (self.model_yaml_config or {}).get("handler") or {}
        shape = handler.get("input_shape") if isinstance(handler, dict) else None
        if isinstance(shape, int):
            shape = [shape]
        if not isinstance(shape, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape
        ):
            return None
        g = torch.Generator().manual_seed(0)
        return torch.rand([1] + shape, generator=g).to(self.device)

    def _load_torchscript_model(self, model_pt_path):
        return torch.jit.load(model_pt_path, map_location=self.device)

    def _load_pickled_model(self, model_dir, model_file, model_pt_path):
        model_def_path = os.path.join(model_dir, model_file)
        if not os.path.isfile(model_def_path):
            raise RuntimeError(f"Missing the model definition file {model_file}")
        module = importlib.import_module(os.path.splitext(os.path.basename(model_file))[0])
        model = single_class(module, f"{model_file} (the model definition)")()
        if model_pt_path:
            state_dict = torch.load(model_pt_path, map_location=self.device)
            model.load_state_dict(state_dict)
        return model

    def preprocess(self, data):
        """The request bodies as one tensor (requests must hold numeric lists of one shape)."""
        return torch.as_tensor(data, device=self.device)

    def inference(self, data, *args, **kwargs):
        if _InferenceMode is None:
            with torch.inference_mode():
                marshalled_data = data.to(self.device)
                return self.model(marshalled_data, *args, **kwargs)
        guard = _InferenceMode(True)
        try:
            marshalled_data = data.to(self.device)
            return self.model(marshalled_data, *args, **kwargs)
        finally:
            del guard

    def postprocess(self, data):
        return data.tolist()

    def handle(self, data, context):
        # TorchServe's BaseHandler records HandlerTime here; the worker measures it for every
        # step of every handler (backend/worker.c), so it is not recorded twice
        self.context = context
        if self._is_describe():
            output = [self.describe_handle()]
        else:
            data_preprocess = self.preprocess(data)
            if not self._is_explain():
                output = self.inference(data_preprocess)
                output = self.postprocess(output)
            else:
                output = self.explain_handle(data_preprocess, data)
        return output

    def explain_handle(self, data_preprocess, raw_data):
        inputs = None
        target = 0
        row = raw_data[0]
        if isinstance(row, dict):
            inputs = row.get("data") or row.get("body")
            target = row.get("target") or 0
        get_insights = getattr(self, "get_insights", None)
        if get_insights is None:
            raise NotImplementedError(
                f"{type(self).__name__} has no get_insights(): this handler cannot explain"
            )
        return get_insights(data_preprocess, inputs, target)

    def _is_explain(self):
        if self.context and self.context.get_request_header(0, "explain") == "True":
            self.explain = True
            return True
        return False

    def _is_describe(self):
        return bool(self.context and self.context.get_request_header(0, "describe") == "True")

    def describe_handle(self):
        """Customized metadata for describe ?customized=true; none by default."""
        logger.info("Collect customized metadata")
        return {}

    def get_device(self):
        return self.device
