"""The study's models: torchvision ResNets with randomly initialised weights."""
from __future__ import annotations

from harness.common.registry import Entry, Registry

MODELS = Registry("model", {
    "resnet50": Entry("torchvision.models:resnet50"),
    "resnet101": Entry("torchvision.models:resnet101"),
    "resnet152": Entry("torchvision.models:resnet152"),
})


def build_model(name: str, num_classes: int):
    return MODELS.create(name, weights=None, num_classes=num_classes)
