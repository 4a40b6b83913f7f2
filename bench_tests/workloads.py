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
"""The model of the suite sessions these tests judge a cell in (the suite's flow, the A/B): its
five steps take about 0.4 s on two cores, twice ResNet20's, so the throughput interval and the
contention guard's tick counters (harness.rank.contention.TICKS_UNCERTAIN_PER_CORE: a ResNet20
window once read 3 ticks of counter noise as 5% outside work) have a window to work with, at a
cost of a fraction of a second beside each launch's imports."""

TINY = Workload(image_size=32, batch_size=8, warmup_steps=2, steps=5, num_workers=1, num_classes=10)

TINY_FLAGS = ["--image-size", str(TINY.image_size), "--batch-size", str(TINY.batch_size), "--steps", str(TINY.steps),
              "--warmup-steps", str(TINY.warmup_steps), "--num-workers", str(TINY.num_workers)]
"""The same workload as the scaling suite's command-line options."""
