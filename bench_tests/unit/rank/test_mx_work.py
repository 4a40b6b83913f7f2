"""An MXNet step's forward FLOPs from its hybridised graph (harness.rank.mx_work), in MXNet's own
environment: a layer whose FLOPs are known, and Gluon's ResNet-50 v1 at 224 px."""
import json
import os
import subprocess

import pytest

from bench_tests.components import framework_component, needs
from harness.launch.launchers import with_harness_importable
from harness.rank.frameworks import FRAMEWORKS
from harness.rank.runtime import interpreter, unavailable

SCRIPT = r"""
import json, os
os.environ["OMP_NUM_THREADS"] = "1"
import mxnet as mx
from mxnet.gluon import nn
from harness.rank.gluon.training import initialize
from harness.rank.models import MODELS
from harness.rank.mx_work import forward_flops
from harness.rank.runtime import Device

small = nn.HybridSequential()
small.add(nn.Conv2D(8, 3, padding=1, use_bias=False), nn.Flatten(), nn.Dense(10))
small.initialize()
small.hybridize()
small(mx.nd.ones((2, 3, 8, 8)))
resnet = initialize(MODELS.create_in("mxnet", "resnet50", image_size=224, num_classes=1000), Device("cpu"))
resnet.hybridize(static_alloc=True, static_shape=True)
resnet(mx.nd.ones((1, 3, 224, 224)))
print(json.dumps({"small": forward_flops(small, (2, 3, 8, 8)), "resnet50": forward_flops(resnet, (1, 3, 224, 224))}))
"""


@pytest.fixture(scope="module")
def counted():
    needs(framework_component("mxnet"), unavailable("mxnet", FRAMEWORKS.entry("mxnet")))
    done = subprocess.run([interpreter("mxnet"), "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                          env=with_harness_importable(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_known_layers_forward_flops(counted):
    """A 3x3 convolution, 3 -> 8 channels on 8x8 images, batch 2: 2 x 8 x 8 x 8 outputs of 27
    multiply-adds, 27,648; a 512 -> 10 dense layer: 2 x 10 of 512, 10,240; two FLOPs each."""
    assert counted["small"] == {"Convolution": 55_296, "FullyConnected": 20_480}


def test_resnet50_v1_counts_its_stride_in_the_1x1_convolution(counted):
    """Gluon's ResNet-50 v1: 3.858 G multiply-adds a forward pass at 224 px, 5.7% fewer than
    torchvision's v1.5 (4.09 G, the stride-2 in the 3x3 convolution): the same count as Keras' ResNet50
    (docs/measurements.md, "Counted work in every framework")."""
    flops = counted["resnet50"]
    assert flops == {"Convolution": 7_711_850_496, "FullyConnected": 4_096_000}
    assert sum(flops.values()) / 2 / 1e9 == pytest.approx(4.09 * (1 - 0.057), rel=0.002)
