"""Keras models, randomly initialised: ResNet50 from keras.applications (ResNet v1: the stride in
the first 1x1 convolution, where torchvision's v1.5 has it in the 3x3) and the CIFAR ResNet44 of
He et al. as harness.rank.cifar_resnet builds it for torch (its convolutions He-normal from their
fan-in, where torch's module takes the fan-out: the initial weights differ in scale, not only in
value)."""
from __future__ import annotations

import keras
from keras import layers


def resnet50(*, image_size: int, num_classes: int) -> keras.Model:
    return keras.applications.ResNet50(weights=None, input_shape=(image_size, image_size, 3), classes=num_classes,
                                       classifier_activation=None)


def _basic_block(x, channels: int, stride: int):
    shortcut = x
    y = layers.Conv2D(channels, 3, strides=stride, padding="same", use_bias=False, kernel_initializer="he_normal")(x)
    y = layers.ReLU()(layers.BatchNormalization()(y))
    y = layers.Conv2D(channels, 3, padding="same", use_bias=False, kernel_initializer="he_normal")(y)
    y = layers.BatchNormalization()(y)
    if stride != 1 or shortcut.shape[-1] != channels:
        # option A: subsample (a 1x1 pooling window at the block's stride), then pad the new
        # channels with zeros: no parameters
        shortcut = layers.MaxPooling2D(pool_size=1, strides=stride)(shortcut)
        extra = channels - shortcut.shape[-1]
        shortcut = keras.ops.pad(shortcut, ((0, 0), (0, 0), (0, 0), (extra // 2, extra - extra // 2)))
    return layers.ReLU()(layers.Add()([y, shortcut]))


def cifar_resnet(*, depth: int, image_size: int, num_classes: int) -> keras.Model:
    if (depth - 2) % 6:
        raise ValueError(f"a CIFAR ResNet has 6n+2 layers; {depth} is not of that form")
    blocks = (depth - 2) // 6
    inputs = keras.Input((image_size, image_size, 3))
    x = layers.Conv2D(16, 3, padding="same", use_bias=False, kernel_initializer="he_normal")(inputs)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    for stage, channels in enumerate((16, 32, 64)):
        for block in range(blocks):
            x = _basic_block(x, channels, 2 if stage and not block else 1)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(num_classes)(x), name=f"resnet{depth}")
