"""Gluon models, randomly initialised by the runtime (``initialize``): ResNet50 from Gluon's model
zoo and the CIFAR ResNet44 of He et al. as harness.rank.cifar_resnet builds it for torch.

Gluon's ``resnet50_v1`` is ResNet v1 as the paper and Keras' ResNet50 have it: a bottleneck's stride
sits in its first 1x1 convolution, where torchvision's v1.5 has it in the 3x3 (v1.5 costs a little
more compute per image at the same parameter count). Its two 1x1 convolutions per bottleneck also
carry biases, which torchvision's do not: 25,575,912 parameters at 1000 classes against 25,557,032.
"""
from __future__ import annotations

from mxnet.gluon import HybridBlock, nn
from mxnet.gluon.model_zoo import vision

STAGE_CHANNELS = (16, 32, 64)


def resnet50(*, image_size: int, num_classes: int) -> HybridBlock:
    return vision.resnet50_v1(classes=num_classes)


class BasicBlock(HybridBlock):
    """Two 3x3 convolutions and an identity shortcut; where the block halves the map and widens it,
    the shortcut subsamples and pads the new channels with zeros (option A: no parameters)."""

    def __init__(self, inputs: int, outputs: int, stride: int):
        super().__init__()
        self.stride = stride
        self.padded_channels = outputs - inputs
        with self.name_scope():
            self.conv1 = nn.Conv2D(outputs, 3, strides=stride, padding=1, use_bias=False, in_channels=inputs)
            self.bn1 = nn.BatchNorm(in_channels=outputs)
            self.conv2 = nn.Conv2D(outputs, 3, padding=1, use_bias=False, in_channels=outputs)
            self.bn2 = nn.BatchNorm(in_channels=outputs)

    def shortcut(self, F, x):  # noqa: N803 - Gluon names its operator namespace F
        if self.stride == 1 and self.padded_channels == 0:
            return x
        x = F.slice(x, begin=(None, None, None, None), end=(None, None, None, None),
                    step=(1, 1, self.stride, self.stride))
        before = self.padded_channels // 2
        after = self.padded_channels - before
        zeros = [F.zeros_like(F.slice_axis(x, axis=1, begin=0, end=count)) for count in (before, after)]
        return F.concat(zeros[0], x, zeros[1], dim=1)

    def hybrid_forward(self, F, x):  # noqa: N803
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(F, x))


class CifarResNet(HybridBlock):
    def __init__(self, blocks_per_stage: int, num_classes: int):
        super().__init__()
        with self.name_scope():
            self.conv1 = nn.Conv2D(STAGE_CHANNELS[0], 3, padding=1, use_bias=False, in_channels=3)
            self.bn1 = nn.BatchNorm(in_channels=STAGE_CHANNELS[0])
            self.stages = nn.HybridSequential()
            inputs = STAGE_CHANNELS[0]
            for stage, channels in enumerate(STAGE_CHANNELS):
                for block in range(blocks_per_stage):
                    self.stages.add(BasicBlock(inputs, channels, stride=2 if stage > 0 and block == 0 else 1))
                    inputs = channels
            self.pool = nn.GlobalAvgPool2D()
            self.fc = nn.Dense(num_classes, in_units=inputs)

    def hybrid_forward(self, F, x):  # noqa: N803
        x = self.stages(F.relu(self.bn1(self.conv1(x))))
        return self.fc(self.pool(x))


def cifar_resnet(*, depth: int, image_size: int, num_classes: int) -> CifarResNet:
    """The 6n+2-layer CIFAR ResNet (there are no published weights to load)."""
    if depth < 8 or (depth - 2) % 6:
        raise ValueError(f"a CIFAR ResNet has 6n+2 layers (20, 32, 44, 56, 110, ...); got {depth}")
    return CifarResNet((depth - 2) // 6, num_classes)
