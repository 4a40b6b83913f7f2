"""The MXNet pieces of a rank's training: where its arrays live, how its model is initialised and
run, its loss, and the compute probe."""
from __future__ import annotations

import mxnet as mx
from mxnet import autograd, gluon

from harness.rank.trainloop import GraphProbe


def context_of(device) -> mx.Context:
    return mx.gpu(device.index) if device.type == "cuda" else mx.cpu()


def initialize(network: gluon.Block, device) -> gluon.Block:
    """Random weights on ``device``, as torchvision's ResNets and harness.rank.cifar_resnet start:
    He et al.'s normal over the fan-out for convolutions, torch's ``Linear`` initialisation (uniform
    within 1/sqrt(fan-in)) for the classifier; batch norm ones and zeros, biases zeros."""
    network.collect_params(".*dense.*_weight").setattr(
        "init", mx.init.Xavier(rnd_type="uniform", factor_type="in", magnitude=1))
    network.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="out", magnitude=2),
                       ctx=context_of(device))
    return network


def hybridized(block: gluon.HybridBlock) -> gluon.HybridBlock:
    """``block`` compiled to one static graph, as MXNet users run a model for speed: its memory is
    allocated once, for one input shape."""
    block.hybridize(static_alloc=True, static_shape=True)
    return block


class SmoothedCrossEntropy(gluon.HybridBlock):
    """Per-image cross-entropy of logits against float labels, label-smoothed as torch's: the target
    is ``1 - s + s/K`` at the label and ``s/K`` elsewhere."""

    def __init__(self, num_classes: int, smoothing: float):
        super().__init__()
        self.num_classes = num_classes
        self.smoothing = smoothing
        with self.name_scope():
            self.loss = gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False)

    def hybrid_forward(self, F, logits, labels):  # noqa: N803 - Gluon names its operator namespace F
        off = self.smoothing / self.num_classes
        target = F.one_hot(labels, self.num_classes, on_value=1 - self.smoothing + off, off_value=off)
        return self.loss(logits, target)


class GluonProbe(GraphProbe):
    """Forward and backward of a model of the same architecture as the trained one, with parameters
    of its own and no trainer: no communication. Its first call builds the static graph, untimed."""

    def __init__(self, model: gluon.HybridBlock, loss_fn: gluon.HybridBlock):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def step(self, images, labels) -> None:
        with autograd.record():
            loss = self.loss_fn(self.model(images), labels)
        loss.backward()


class OnDevice:
    """A loader's batches moved to the training context. The Gluon DataLoader's workers hand over
    batches in shared memory (``cpu_shared``), which the step copies into its own, as MXNet users
    do with ``as_in_context``; the copy so lands in the batch's wait, as torch's ``.to(device)``."""

    def __init__(self, loader, context: mx.Context):
        self.loader = loader
        self.context = context

    def __iter__(self):
        for images, labels in self.loader:
            yield images.as_in_context(self.context), labels.as_in_context(self.context)

    def settings(self) -> dict:
        return self.loader.settings()

    def batch_data(self) -> dict:
        if not hasattr(self.loader, "batch_data"):
            return {"not_counted": {"data": "this loader does not say what it read"}}
        return self.loader.batch_data()

    def close(self) -> None:
        self.loader.close()
