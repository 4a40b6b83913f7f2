"""The models, randomly initialised: the study's torchvision ResNets (ImageNet-shaped input) and
the CIFAR ResNet44 of seeds 002 and 003 (32 px input)."""
from __future__ import annotations

from harness.common.registry import Entry, Registry

MODELS = Registry("model", {
    "resnet50": Entry("torchvision.models:resnet50", runtimes={"tensorflow": "harness.rank.tfkeras.models:resnet50",
                                                                "mxnet": "harness.rank.gluon.models:resnet50"}),
    "resnet101": Entry("torchvision.models:resnet101"),
    "resnet152": Entry("torchvision.models:resnet152"),
    "resnet44": Entry("harness.rank.cifar_resnet:cifar_resnet", {"depth": 44},
                      runtimes={"tensorflow": "harness.rank.tfkeras.models:cifar_resnet",
                                "mxnet": "harness.rank.gluon.models:cifar_resnet"}),
})


def build_model(name: str, num_classes: int):
    return MODELS.create(name, weights=None, num_classes=num_classes)
