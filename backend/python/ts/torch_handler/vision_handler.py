"""ts.torch_handler.vision_handler.VisionHandler: the base of the built-in image handlers.

preprocess() turns each request into an image tensor: the request's "data" or "body" is image
bytes (or base64 text of them) opened with PIL and passed through the subclass's
image_processing transform, or a nested list of numbers taken as the tensor itself. The batch is
stacked into one tensor, so a batch of N requests is one forward. Explanations (explain_handle)
use Captum's IntegratedGradients when Captum is importable; it is not a Debian package, so
without it an explanation request fails with a message saying so.
"""

import base64
import binascii
import io

import torch
from PIL import Image

from ts.handler_utils.timer import timed
from ts.torch_handler.base_handler import BaseHandler

try:
    from captum.attr import IntegratedGradients
except ImportError:  # not packaged for Debian: explanations are refused by name
    IntegratedGradients = None


class VisionHandler(BaseHandler):
    image_processing = None  # a torchvision transform, set by subclasses

    def initialize(self, context):
        super().initialize(context)
        self.ig = IntegratedGradients(self.model) if IntegratedGradients is not None else None
        if not context.system_properties.get("limit_max_image_pixels", True):
            Image.MAX_IMAGE_PIXELS = None
        self.initialized = True

    def _to_tensor(self, value, idx):
        if isinstance(value, str):
            try:
                value = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as e:
                raise ValueError(f"request {idx}: text input is not base64 image data") from e
        if isinstance(value, (bytes, bytearray)):
            try:
                image = Image.open(io.BytesIO(value))
                image.load()
            except Exception as e:  # PIL raises several types for undecodable input
                raise ValueError(f"request {idx}: not an image PIL can read ({e})") from e
            if self.image_processing is None:
                raise NotImplementedError(
                    f"{type(self).__name__} defines no image_processing transform"
                )
            return self.image_processing(image)
        if value is None:
            raise ValueError(f"request {idx}: no 'data' or 'body' in the request")
        return torch.FloatTensor(value)

    @timed
    def preprocess(self, data):
        images = []
        for idx, row in enumerate(data):
            value = row.get("data") or row.get("body") if isinstance(row, dict) else row
            images.append(self._to_tensor(value, idx))
        return torch.stack(images).to(self.device)

    def get_insights(self, tensor_data, _, target=0):
        if self.ig is None:
            raise NotImplementedError(
                "explanations need Captum (captum.attr.IntegratedGradients), which is not "
                "installed: it is not available as a Debian package"
            )
        return self.ig.attribute(tensor_data, target=target, n_steps=15).tolist()
