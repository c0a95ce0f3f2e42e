"""ts.torch_handler.vision_handler.VisionHandler: the base of the built-in image handlers.

preprocess() turns each request into an image tensor: the request's "data" or "body" is image
bytes (or base64 text of them) decoded and passed through the subclass's image_processing
transform (ts.handler_utils.vision.Pipeline), or a nested list of numbers taken as the tensor
itself. Each request is prepared on its own: one whose image cannot be decoded or transformed
is left out of the batch and answered 400 with a message that names it, and the others go on
in one forward (nothing runs twice). The images of a batch are prepared in parallel on the
worker's intra-op threads (PIL releases the GIL while it decodes and resizes) and written
straight into the batch tensor, so a batch of N requests is one forward.

model-config.yaml, handler section:
  decode: auto (default) | pil | device. pil is TorchServe's path (PIL, then image_processing).
      device decodes JPEGs with torchvision.io.decode_jpeg on the model's device (nvjpeg on a
      GPU) and runs Resize and CenterCrop on the tensor there; auto is device when the model is
      on a GPU and pil otherwise. Pixels differ from PIL's by decoder and resampling rounding
      (scripts/bench/vision_decode_drift.py measures the top-5 drift).
  fast_decode: false (default) | true. PIL decodes a JPEG at the smallest DCT scale that still
      covers the first Resize (draft mode): faster for images at least twice the resized size,
      with different pixels (docs/performance.md gives the drift).
Explanations (explain_handle) use Captum's IntegratedGradients when Captum is importable; it is
not a Debian package, so without it an explanation request fails with a message saying so.
"""

import logging
from concurrent.futures import ThreadPoolExecutor

import torch
from PIL import Image

from ts.handler_utils.timer import timed
from ts.handler_utils.vision import BadImage, Pipeline, is_jpeg, request_bytes
from ts.torch_handler.base_handler import BaseHandler
from ts.utils.util import PredictionException

try:
    from captum.attr import IntegratedGradients
except ImportError:  # not packaged for Debian: explanations are refused by name
    IntegratedGradients = None

logger = logging.getLogger(__name__)

DECODE = ("auto", "pil", "device")


def _flag(cfg, key):
    v = cfg.get(key, False)
    if isinstance(v, bool):
        return v
    if str(v).lower() in ("true", "false"):
        return str(v).lower() == "true"
    raise ValueError(f'model-config.yaml: handler.{key}: "{v}" is not true or false')


class VisionHandler(BaseHandler):
    image_processing = None  # a torchvision transform, set by subclasses

    def initialize(self, context):
        super().initialize(context)
        self.ig = IntegratedGradients(self.model) if IntegratedGradients is not None else None
        if not context.system_properties.get("limit_max_image_pixels", True):
            Image.MAX_IMAGE_PIXELS = None
        self._failed = {}
        self._pool = None
        self._configure_decoding()
        self.initialized = True

    def _configure_decoding(self):
        cfg = (self.model_yaml_config or {}).get("handler") or {}
        cfg = cfg if isinstance(cfg, dict) else {}
        decode = str(cfg.get("decode", "auto")).lower()
        if decode not in DECODE:
            raise ValueError(
                f'model-config.yaml: handler.decode: "{cfg.get("decode")}" is not auto, pil or '
                "device"
            )
        self.fast_decode = _flag(cfg, "fast_decode")
        self.pipeline = Pipeline(self.image_processing) if self.image_processing else None
        self.decode_device = None
        name = type(self).__name__
        on_device = decode == "device" or (decode == "auto" and self.device.type == "cuda")
        if on_device and (self.pipeline is None or self.pipeline.tensor_steps is None):
            if decode == "device":
                raise ValueError(
                    f"model-config.yaml: handler.decode: device needs an image_processing of "
                    f"Resize, CenterCrop, ToTensor and Normalize; {name}'s is not"
                )
            logger.info("%s: images decoded by PIL: image_processing has other steps", name)
            on_device = False
        if on_device:
            self.decode_device = self.device
        if self.fast_decode and (self.pipeline is None or self.pipeline.first_resize is None):
            raise ValueError(
                f"model-config.yaml: handler.fast_decode: true needs an image_processing that "
                f"starts with Resize; {name}'s does not"
            )
        if self.fast_decode and self.decode_device is not None:
            logger.warning(
                "handler.fast_decode: true applies to PIL only: JPEG images are decoded on %s",
                self.decode_device,
            )
        logger.info(
            "%s: JPEG images decoded %s%s",
            name,
            f"by torchvision on {self.decode_device}" if self.decode_device else "by PIL",
            " at reduced DCT scale (fast_decode)" if self.fast_decode else "",
        )

    def example_input(self):
        crop = Pipeline(self.image_processing).crop if self.image_processing else None
        if crop is None:
            return super().example_input()
        h, w = (crop[0], crop[-1]) if isinstance(crop, (list, tuple)) else (crop, crop)
        g = torch.Generator().manual_seed(0)
        return (torch.rand(1, 3, h, w, generator=g) * 4 - 2).to(self.device)

    # ---- one request

    def _source(self, row, idx):
        """A request's nested list of numbers as a tensor, or its image bytes."""
        value = row.get("data") or row.get("body") if isinstance(row, dict) else row
        if isinstance(value, (list, tuple)):
            return torch.FloatTensor(value)
        data = request_bytes(value, idx)
        if self.pipeline is None:
            raise NotImplementedError(f"{type(self).__name__} defines no image_processing transform")
        return data

    def _prepare(self, row, idx):
        source = self._source(row, idx)
        if isinstance(source, torch.Tensor):
            return source
        return self.pipeline.pil_stage(source, idx, self.fast_decode)

    def _prepare_or_fail(self, data, idx):
        try:
            return self._prepare(data[idx], idx)
        except BadImage as e:
            self._failed[idx] = str(e)
            return None

    def _prepare_all(self, data):
        n = len(data)
        if self.decode_device is not None:
            return self._prepare_on_device(data)
        threads = torch.get_num_threads()
        if n < 2 or threads < 2:
            return [self._prepare_or_fail(data, i) for i in range(n)]
        if self._pool is None or self._pool._max_workers != threads:
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="ts-preprocess")
        return list(self._pool.map(lambda i: self._prepare_or_fail(data, i), range(n)))

    def _prepare_on_device(self, data):
        """The JPEGs decoded and transformed together on the device (decoding there is
        asynchronous already, and nvjpeg's handle is shared: one thread); other images as on
        the PIL path."""
        items, jpegs = [None] * len(data), []
        for i, row in enumerate(data):
            try:
                source = self._source(row, i)
                if isinstance(source, torch.Tensor):
                    items[i] = source
                elif is_jpeg(source):
                    jpegs.append((i, source))
                else:
                    items[i] = self.pipeline.pil_stage(source, i, self.fast_decode)
            except BadImage as e:
                self._failed[i] = str(e)
        for i, image in self.pipeline.device_stage(jpegs, self.decode_device):
            if isinstance(image, BadImage):
                self._failed[i] = str(image)
            else:
                items[i] = image
        return items

    @timed
    def preprocess(self, data):
        """The batch tensor of the requests whose image could be prepared (None if none);
        self._failed maps the index of each other request to its message."""
        self._failed = {}
        items = self._prepare_all(data)
        good = [i for i in range(len(data)) if i not in self._failed]
        if not good:
            return None
        shape = Pipeline.shape_of(items[good[0]])
        for i in good[1:]:
            if Pipeline.shape_of(items[i]) != shape:
                self._failed[i] = (
                    f"request {i}: an image of shape {list(Pipeline.shape_of(items[i]))} in a "
                    f"batch of {list(shape)}"
                )
        good = [i for i in good if i not in self._failed]
        first = items[good[0]]
        dtype = first.dtype if isinstance(first, torch.Tensor) and first.is_floating_point() else None
        batch = torch.empty((len(good),) + shape, dtype=dtype or torch.float32, device=self.device)
        unscaled = []
        for j, i in enumerate(good):
            if self.pipeline is None:
                batch[j].copy_(items[i])
            elif self.pipeline.write(items[i], batch[j]):
                unscaled.append(j)
        if len(unscaled) == len(good):
            self.pipeline.scale(batch)  # the usual case: one division and Normalize
        else:
            for j in unscaled:
                self.pipeline.scale(batch[j])
        return batch

    def handle(self, data, context):
        self.context = context
        if self._is_describe() or self._is_explain():
            return super().handle(data, context)
        batch = self.preprocess(data)
        out = [] if batch is None else self.postprocess(self.inference(batch))
        failed = self._failed
        if not failed or not isinstance(out, list) or len(out) != len(data) - len(failed):
            return out
        it = iter(out)
        return [
            PredictionException(failed[i], 400) if i in failed else next(it)
            for i in range(len(data))
        ]

    def get_insights(self, tensor_data, _, target=0):
        if self.ig is None:
            raise NotImplementedError(
                "explanations need Captum (captum.attr.IntegratedGradients), which is not "
                "installed: it is not available as a Debian package"
            )
        return self.ig.attribute(tensor_data, target=target, n_steps=15).tolist()
