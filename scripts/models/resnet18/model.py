"""ResNet-18 (torchvision's architecture: BasicBlock, [2, 2, 2, 2], 1000 classes) as the one
nn.Module class of an eager-mode archive: BaseHandler instantiates it with no arguments and
loads the archive's state dict into it."""

from torchvision.models.resnet import BasicBlock, ResNet


class ResNet18(ResNet):
    def __init__(self):
        super().__init__(BasicBlock, [2, 2, 2, 2], num_classes=1000)
