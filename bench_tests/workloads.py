"""The workload the suite's own tests run (small enough for a 2-core machine), and the scaling
test module their pytest sessions run."""
from pathlib import Path

import harness.bench
from harness.rank.workload import Workload

SCALING_TEST = Path(harness.bench.__file__).with_name("test_scaling.py")

TEST_MODEL = "resnet20"
"""The model of launch tests whose subject is not the model (real cells beyond each runtime's
ResNet50 cell, drills, failures, equivalence, two hosts): He et al.'s smallest
CIFAR ResNet, built by harness.rank.cifar_resnet without importing torchvision. It all-reduces 0.27M
parameters where torchvision's ResNet50 all-reduces 25.6M, and TensorFlow traces its step in about
half of ResNet44's time (a one-rank TensorFlow cell: 19 s against 28 s). ResNet50 still runs in the
DDP real cells, each runtime's model cell, the breakdown cells and the installed package's session."""

JUDGED_MODEL = "resnet44"
"""The model of the suite sessions these tests judge a cell in (the suite's flow, the A/B): the
contention guard reads the node's CPU time in 10-ms ticks, and five ResNet20 steps (about 0.3 s on
two cores) made a few ticks of background work 5% of the window, so a CI run judged a cell far
below its baseline `inconclusive` ("not trusted: work outside the cell took 5%"); ResNet44's
window is twice as long, and these tests passed with it in every CI run."""

TINY = Workload(image_size=32, batch_size=8, warmup_steps=2, steps=5, num_workers=1, num_classes=10)

TINY_FLAGS = ["--image-size", str(TINY.image_size), "--batch-size", str(TINY.batch_size), "--steps", str(TINY.steps),
              "--warmup-steps", str(TINY.warmup_steps), "--num-workers", str(TINY.num_workers)]
"""The same workload as the scaling suite's command-line options."""
