"""The workload the suite's own tests run (small enough for a 2-core machine), and the scaling
test module their pytest sessions run."""
from pathlib import Path

import harness.bench
from harness.rank.workload import Workload

SCALING_TEST = Path(harness.bench.__file__).with_name("test_scaling.py")

TEST_MODEL = "resnet44"
"""The model of launch tests whose subject is not the model (failures, drills, two hosts, the
suite's flow): the CIFAR ResNet44 of harness.rank.cifar_resnet builds without importing torchvision
and all-reduces 0.66M parameters where torchvision's ResNet50 all-reduces 25.6M, which shortens
each launch. ResNet50 still runs in the DDP real cells, each runtime's model cell, the breakdown
cells and the installed package's session."""

TINY = Workload(image_size=32, batch_size=8, warmup_steps=2, steps=5, num_workers=1, num_classes=10)

TINY_FLAGS = ["--image-size", str(TINY.image_size), "--batch-size", str(TINY.batch_size), "--steps", str(TINY.steps),
              "--warmup-steps", str(TINY.warmup_steps), "--num-workers", str(TINY.num_workers)]
"""The same workload as the scaling suite's command-line options."""
