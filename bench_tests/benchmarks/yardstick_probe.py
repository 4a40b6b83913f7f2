"""One measurement for the yardstick-tracking benchmark: a ResNet50 training step (32 px, batch 16,
100 classes, SGD, the cpu-small cell's shape) and the machine yardstick, interleaved in one process
so that both see the same conditions.

    python -m bench_tests.benchmarks.yardstick_probe THREADS ROUNDS

Prints one JSON line: the median step time and the median yardstick time, in seconds.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

STEPS_PER_ROUND = 8


def main(argv: list[str]) -> int:
    threads, rounds = int(argv[0]), int(argv[1])
    import torch
    import torchvision

    from harness.machine.yardstick import run_yardstick

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=100)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images, labels = torch.randn(16, 3, 32, 32), torch.randint(0, 100, (16,))

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()

    for _ in range(3):
        step()
    steps, yardsticks = [], []
    for _ in range(rounds):
        yardsticks += run_yardstick(repeats=2)
        for _ in range(STEPS_PER_ROUND):
            started = time.perf_counter()
            step()
            steps.append(time.perf_counter() - started)
    print(json.dumps({"step_s": statistics.median(steps), "yardstick_s": statistics.median(yardsticks)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
