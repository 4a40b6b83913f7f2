"""The CIFAR ResNets of He et al. (2016, section 4.2), the model of seeds 002 and 003 (ResNet44).

6n+2 weighted layers: a 3x3 convolution to 16 channels, three stages of n basic blocks at 16, 32
and 64 channels (the first block of the second and third stage halves the feature map), global
average pooling and a fully connected classifier. Shortcuts are identities; where a stage halves
the map and doubles the channels, the shortcut subsamples and pads the new channels with zeros
(the paper's option A), so the model has no projection weights: ResNet44 holds 0.66M parameters,
as the paper's Table 6 says.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

STAGE_CHANNELS = (16, 32, 64)


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.stride = stride
        self.padded_channels = outputs - inputs

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1 and self.padded_channels == 0:
            return x
        x = x[:, :, ::self.stride, ::self.stride]
        half = self.padded_channels // 2
        return functional.pad(x, (0, 0, 0, 0, half, self.padded_channels - half))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = functional.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return functional.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, blocks_per_stage: int, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, STAGE_CHANNELS[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(STAGE_CHANNELS[0])
        layers, inputs = [], STAGE_CHANNELS[0]
        for stage, channels in enumerate(STAGE_CHANNELS):
            for block in range(blocks_per_stage):
                layers.append(BasicBlock(inputs, channels, stride=2 if stage > 0 and block == 0 else 1))
                inputs = channels
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(inputs, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(functional.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(functional.adaptive_avg_pool2d(x, 1), 1))


def cifar_resnet(depth: int, *, weights: None = None, num_classes: int = 10) -> CifarResNet:
    """The 6n+2-layer CIFAR ResNet, randomly initialised (there are no published weights to load)."""
    if weights is not None:
        raise ValueError("the CIFAR ResNets are trained from random weights; no pretrained weights exist")
    if depth < 8 or (depth - 2) % 6:
        raise ValueError(f"a CIFAR ResNet has 6n+2 layers (20, 32, 44, 56, 110, ...); got {depth}")
    return CifarResNet((depth - 2) // 6, num_classes)
