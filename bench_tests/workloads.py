"""The workload the suite's own tests run (small enough for a 2-core machine), and the scaling
test module their pytest sessions run."""
from pathlib import Path

import harness.bench
from harness.rank.workload import Workload

SCALING_TEST = Path(harness.bench.__file__).with_name("test_scaling.py")

TINY = Workload(image_size=32, batch_size=8, warmup_steps=2, steps=5, num_workers=1, num_classes=10)

TINY_FLAGS = ["--image-size", str(TINY.image_size), "--batch-size", str(TINY.batch_size), "--steps", str(TINY.steps),
              "--warmup-steps", str(TINY.warmup_steps), "--num-workers", str(TINY.num_workers)]
"""The same workload as the scaling suite's command-line options."""
