"""The models, randomly initialised: the study's torchvision ResNets (ImageNet-shaped input) and
the CIFAR ResNets of He et al. (32 px input): seeds 002 and 003's ResNet44 and the smallest, ResNet20."""
from __future__ import annotations

from harness.common.registry import Entry, Registry

CIFAR_RUNTIMES = {"tensorflow": "harness.rank.tfkeras.models:cifar_resnet",
                  "mxnet": "harness.rank.gluon.models:cifar_resnet"}

MODELS = Registry("model", {
    "resnet50": Entry("torchvision.models:resnet50", runtimes={"tensorflow": "harness.rank.tfkeras.models:resnet50",
                                                                "mxnet": "harness.rank.gluon.models:resnet50"}),
    "resnet101": Entry("torchvision.models:resnet101"),
    "resnet152": Entry("torchvision.models:resnet152"),
    # He et al.'s smallest CIFAR ResNet: the suite's own launch tests run it, where the model is not
    # what they test (TensorFlow traces its graph in about half of ResNet44's time)
    "resnet20": Entry("harness.rank.cifar_resnet:cifar_resnet", {"depth": 20}, runtimes=CIFAR_RUNTIMES),
    "resnet44": Entry("harness.rank.cifar_resnet:cifar_resnet", {"depth": 44}, runtimes=CIFAR_RUNTIMES),
})


def build_model(name: str, num_classes: int):
    return MODELS.create(name, weights=None, num_classes=num_classes)
