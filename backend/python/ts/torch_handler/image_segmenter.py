"""ts.torch_handler.image_segmenter.ImageSegmenter: TorchServe's built-in image segmenter.

The model is a torchvision-style segmenter whose output has "out" of shape [N, K, H, W]. Images
are prepared as for the image classifier (resize 256, crop 224, ImageNet normalisation). Each
request's answer is an H x W grid of [class, probability] pairs: the most likely class of each
pixel (as a float, as TorchServe answers it) and its softmax probability.
"""

import torch
from torchvision import transforms

from ts.torch_handler.vision_handler import VisionHandler


class ImageSegmenter(VisionHandler):
    image_processing = transforms.Compose(
        [
            transforms.Resize(256),
            transforms.CenterCrop(224),
            transforms.ToTensor(),
            transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ]
    )

    def postprocess(self, data):
        out = data["out"] if isinstance(data, dict) else data
        best = torch.max(torch.nn.functional.softmax(out, dim=1), dim=1)
        return torch.stack([best.indices.type(best.values.dtype), best.values], dim=3).tolist()
