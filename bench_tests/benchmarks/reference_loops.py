"""One rank of a reference training loop, written the way each framework's own examples write it,
on the harness's synthetic ResNet50 workload: what the harness's cells are checked against
(test_reference_loops.py). It imports nothing from the harness.

    mpirun -np 2 --map-by slot:PE=1 --bind-to core python -m bench_tests.benchmarks.reference_loops \
        --framework ddp|horovod|deepspeed --batch 16 --image-size 32 --classes 100 \
        --warmup 5 --steps 50 --out DIR

Each rank computes on its local rank's GPU where there are GPUs (NCCL), else on the CPU (Gloo),
uses as many threads as the launcher gave it cores, warms up, meets the others at a barrier, times
every step with ``time.perf_counter`` (on a GPU up to the end of the step's kernels, as the
examples' per-step ``loss.item()`` waits for them) and writes ``DIR/rank<R>.json``: its step
times, images and timed window, and how long each of its threads ran on a CPU and waited for one
during the window (``/proc/self/task/*/schedstat``, read only at the window's ends), which shows
what a framework's helper threads take from the training thread on the rank's cores. The optimizer and loss settings default to the harness's cells'
(the ``cpu-small`` profile), so that only the way the loop is written differs.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Callable

import torch
import torchvision

from bench_tests.benchmarks.reference_common import parse, timed_window

Step = Callable[[], torch.Tensor]
Barrier = Callable[[], None]
Loop = tuple[int, Step, Barrier]


def torchrun_style_environment() -> None:
    """RANK/WORLD_SIZE/LOCAL_RANK from Open MPI's variables under mpirun, as torch's and DeepSpeed's
    ``env://`` initialisation reads them; MASTER_ADDR/PORT come from the parent's environment."""
    if "OMPI_COMM_WORLD_RANK" in os.environ and "RANK" not in os.environ:
        os.environ.update(RANK=os.environ["OMPI_COMM_WORLD_RANK"], WORLD_SIZE=os.environ["OMPI_COMM_WORLD_SIZE"],
                          LOCAL_RANK=os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")


def rank_device(local_rank: int) -> torch.device:
    if not torch.cuda.is_available():
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def model_and_optimizer(args: argparse.Namespace, world_size: int,
                        device: torch.device) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torchvision.models.resnet50(weights=None, num_classes=args.classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * world_size, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    return model, optimizer


def ddp_loop(args: argparse.Namespace, images: torch.Tensor, labels: torch.Tensor) -> Loop:
    import torch.distributed as dist

    torchrun_style_environment()
    device = rank_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    model, optimizer = model_and_optimizer(args, dist.get_world_size(), device)
    model = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=None if device.type == "cpu" else [device.index])
    images, labels = images.to(device), labels.to(device)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss

    return dist.get_rank(), step, dist.barrier


def horovod_loop(args: argparse.Namespace, images: torch.Tensor, labels: torch.Tensor) -> Loop:
    import horovod.torch as hvd

    hvd.init()
    device = rank_device(hvd.local_rank())
    model, optimizer = model_and_optimizer(args, hvd.size(), device)
    images, labels = images.to(device), labels.to(device)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)

    def step() -> torch.Tensor:  # pytorch_synthetic_benchmark.py's benchmark_step
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()  # waits for the gradients' all-reduces, then updates
        return loss

    return hvd.rank(), step, hvd.barrier


def deepspeed_loop(args: argparse.Namespace, images: torch.Tensor, labels: torch.Tensor) -> Loop:
    torchrun_style_environment()
    device = rank_device(int(os.environ.get("LOCAL_RANK", "0")))
    if device.type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    deepspeed.init_distributed(dist_backend="nccl" if device.type == "cuda" else "gloo")
    model, optimizer = model_and_optimizer(args, deepspeed.comm.get_world_size(), device)
    images, labels = images.to(device), labels.to(device)
    config = {"train_micro_batch_size_per_gpu": args.batch, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": 0}, "gradient_clipping": 0.0, "steps_per_print": 2**31 - 1}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)

    def step() -> torch.Tensor:
        loss = criterion(engine(images), labels)
        engine.backward(loss)
        engine.step()
        return loss

    return deepspeed.comm.get_rank(), step, deepspeed.comm.barrier


def device_finish() -> Callable[[], None]:
    return torch.cuda.synchronize if torch.cuda.is_initialized() else lambda: None


LOOPS = {"ddp": ddp_loop, "horovod": horovod_loop, "deepspeed": deepspeed_loop}


def main(argv: list[str]) -> int:
    args = parse(argv, frameworks=tuple(LOOPS))
    cores = sorted(os.sched_getaffinity(0))  # the launcher bound this rank to them
    torch.set_num_threads(len(cores))
    torch.manual_seed(1234)
    images = torch.randn(args.batch, 3, args.image_size, args.image_size)
    labels = torch.randint(0, args.classes, (args.batch,))
    rank, step, barrier = LOOPS[args.framework](args, images, labels)

    finish = device_finish()
    for _ in range(args.warmup):
        step()
    finish()
    barrier()  # every rank starts the timed window together
    step_times, window, threads, loss = timed_window(step, args.steps, finish=finish)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{rank}.json").write_text(json.dumps({
        "framework": args.framework, "rank": rank, "host": socket.gethostname(), "pid": os.getpid(),
        "cores": cores, "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name() if torch.cuda.is_initialized() else "cpu", "step_times": step_times,
        "images": args.batch * args.steps, "window_s": window, "final_loss": float(loss.detach()),
        "window_threads": threads,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
