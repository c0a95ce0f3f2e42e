"""ts.torch_handler.image_classifier.ImageClassifier: TorchServe's built-in image classifier.

Each image is resized to 256 (shorter side), center-cropped to 224, scaled to [0, 1] and
normalised with the ImageNet mean and std. The answer of each request is its top-5 classes as
{label: probability} (softmax over the model's outputs), labels from index_to_name.json, or the
class index as text without one; highest first.
"""

import torch
import torch.nn.functional as F
from torchvision import transforms

from ts.handler_utils.timer import timed
from ts.torch_handler.vision_handler import VisionHandler
from ts.utils.labels import map_class_to_label


class ImageClassifier(VisionHandler):
    topk = 5
    image_processing = transforms.Compose(
        [
            transforms.Resize(256),
            transforms.CenterCrop(224),
            transforms.ToTensor(),
            transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ]
    )

    def set_max_result_classes(self, topk):
        self.topk = topk

    def get_max_result_classes(self):
        return self.topk

    @timed
    def postprocess(self, data):
        ps = F.softmax(data, dim=1)
        probs, classes = torch.topk(ps, min(self.topk, ps.shape[1]), dim=1)
        return map_class_to_label(probs.tolist(), self.mapping, classes.tolist())
