"""ts.torch_handler.object_detector.ObjectDetector: TorchServe's built-in object detector.

The model is a torchvision-style detector (a list of {"boxes", "labels", "scores"} per image).
Images are only converted to tensors. Each request's answer is a list of its detections with a
score of at least `threshold` (0.5): {label: [x1, y1, x2, y2], "score": s}.
"""

from torchvision import transforms

from ts.torch_handler.vision_handler import VisionHandler
from ts.utils.labels import map_class_to_label


class ObjectDetector(VisionHandler):
    image_processing = transforms.Compose([transforms.ToTensor()])
    threshold = 0.5

    def postprocess(self, data):
        result = []
        for row in data:
            keep = row["scores"] >= self.threshold
            boxes = row["boxes"][keep].tolist()
            labels = row["labels"][keep].tolist()
            scores = row["scores"][keep].tolist()
            detections = []
            for label, box, score in zip(labels, boxes, scores):
                det = map_class_to_label([[box]], self.mapping, [[label]])[0]
                det["score"] = score
                detections.append(det)
            result.append(detections)
        return result
