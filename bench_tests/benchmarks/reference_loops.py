"""One rank of a reference training loop, written the way each framework's own examples write it,
on the harness's synthetic ResNet50 workload: what the harness's cells are checked against
(test_reference_loops.py). It imports nothing from the harness.

    mpirun -np 2 --map-by slot:PE=1 --bind-to core python -m bench_tests.benchmarks.reference_loops \
        --framework ddp|horovod|deepspeed --batch 16 --image-size 32 --classes 100 \
        --warmup 5 --steps 50 --out DIR [--dtype fp32|tf32|bf16|fp16] [--channels-last] [--compile]

Each rank computes on its local rank's GPU where there are GPUs (NCCL), else on the CPU (Gloo),
uses as many threads as the launcher gave it cores, warms up, meets the others at a barrier, times
every step with ``time.perf_counter`` (on a GPU up to the end of the step's kernels, as the
examples' per-step ``loss.item()`` waits for them) and writes ``DIR/rank<R>.json``: its step
times, images and timed window, and how long each of its threads ran on a CPU and waited for one
during the window (``/proc/self/task/*/schedstat``, read only at the window's ends), which shows
what a framework's helper threads take from the training thread on the rank's cores. The optimizer and loss settings default to the harness's cells'
(the ``cpu-small`` profile), so that only the way the loop is written differs.

Precision and layout as the frameworks' own documents write them, recorded in the rank's JSON
(``dtype``, ``channels_last``, ``compiled``, the TF32 flags as the loop ran, fp16's last loss scale):

- ``--dtype fp32`` (default): float32, TF32 off (``torch.backends.cuda.matmul.allow_tf32`` and
  ``torch.backends.cudnn.allow_tf32`` set False: torch leaves cuDNN's on by default); ``tf32``: the
  same two flags True. GPU only, as is ``fp16``: on a CPU the rank exits with a one-line error.
- ``bf16``, ``fp16``: DDP and Horovod as PyTorch's AMP recipe: ``torch.autocast(device_type,
  dtype)`` around the forward and the loss, backward outside it; fp16 with ``torch.amp.GradScaler``
  (Horovod as its documents have it: ``scaler.scale(loss).backward()``, ``optimizer.synchronize()``,
  ``scaler.unscale_(optimizer)``, ``scaler.step(optimizer)`` under ``optimizer.skip_synchronize()``,
  ``scaler.update()``). DeepSpeed with its config's ``"bf16"``/``"fp16"`` section (weights in that
  dtype, fp16 with its dynamic loss scale; the batch norms' running statistics too, through
  ``data_types.buffer_dtype``) and the batch cast to the engine's dtype, as DeepSpeed's CIFAR-10
  example casts it. At bf16 and fp16 the TF32 flags stay torch's defaults.
- ``--channels-last``: the model and the batch in ``torch.channels_last`` memory format (PyTorch's
  channels-last tutorial). ``--compile``: ``torch.compile`` of the model as each documents it: DDP's
  wrapped model (PyTorch's DDP notes), Horovod's model, DeepSpeed's ``engine.compile()``; compiled
  in the first warm-up step (``--warmup`` 1 or more keeps it out of the timed window).
"""
from __future__ import annotations

import argparse
import contextlib
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
Settings = Callable[[], dict]
"""What a loop records of how it trained, read after the timed window (fp16's loss scale)."""
Loop = tuple[int, Step, Barrier, Settings]

DTYPES = ("fp32", "tf32", "bf16", "fp16")
GPU_ONLY = ("tf32", "fp16")
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def numerics_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtype", choices=DTYPES, default="fp32",
                        help="fp32 (TF32 off), tf32 (GPU), bf16 (autocast; DeepSpeed: its bf16), "
                             "fp16 (GPU; autocast and GradScaler; DeepSpeed: its fp16)")
    parser.add_argument("--channels-last", action="store_true", help="model and batch in torch.channels_last")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")


def set_tf32(dtype: str) -> None:
    """fp32 and tf32 say outright whether TF32 runs; bf16 and fp16 leave torch's defaults, as the AMP recipe does."""
    if dtype in ("fp32", "tf32"):
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        torch.backends.cudnn.allow_tf32 = dtype == "tf32"


def autocast(args: argparse.Namespace, device: torch.device) -> Callable[[], contextlib.AbstractContextManager]:
    """What the forward and the loss run under: torch.autocast for bf16 and fp16, else nothing."""
    if args.dtype not in AUTOCAST:
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type=device.type, dtype=AUTOCAST[args.dtype])


def grad_scaler(args: argparse.Namespace, device: torch.device) -> torch.amp.GradScaler | None:
    return torch.amp.GradScaler(device.type) if args.dtype == "fp16" else None


def to_device(args: argparse.Namespace, images: torch.Tensor, labels: torch.Tensor,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    if args.channels_last:
        return images.to(device, memory_format=torch.channels_last), labels.to(device)
    return images.to(device), labels.to(device)


def scaler_settings(scaler: torch.amp.GradScaler | None) -> Settings:
    return lambda: {} if scaler is None else {"loss_scale": scaler.get_scale()}


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
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
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
    if args.compile:
        model = torch.compile(model)  # the DDP-wrapped model, as PyTorch's DDP notes compile it
    images, labels = to_device(args, images, labels, device)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    forward_context, scaler = autocast(args, device), grad_scaler(args, device)

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        with forward_context():
            loss = criterion(model(images), labels)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:  # PyTorch's AMP recipe
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        return loss

    return dist.get_rank(), step, dist.barrier, scaler_settings(scaler)


def horovod_loop(args: argparse.Namespace, images: torch.Tensor, labels: torch.Tensor) -> Loop:
    import horovod.torch as hvd

    hvd.init()
    device = rank_device(hvd.local_rank())
    model, optimizer = model_and_optimizer(args, hvd.size(), device)
    images, labels = to_device(args, images, labels, device)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    if args.compile:
        model = torch.compile(model)  # the same parameters: Horovod's gradient hooks stay on them
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    forward_context, scaler = autocast(args, device), grad_scaler(args, device)

    def step() -> torch.Tensor:  # pytorch_synthetic_benchmark.py's benchmark_step
        optimizer.zero_grad()
        with forward_context():
            loss = criterion(model(images), labels)
        if scaler is None:
            loss.backward()
            optimizer.step()  # waits for the gradients' all-reduces, then updates
        else:  # Horovod's documented pattern for torch.amp
            scaler.scale(loss).backward()
            optimizer.synchronize()  # the all-reduces of the scaled gradients
            scaler.unscale_(optimizer)
            with optimizer.skip_synchronize():
                scaler.step(optimizer)
            scaler.update()
        return loss

    return hvd.rank(), step, hvd.barrier, scaler_settings(scaler)


def deepspeed_loop(args: argparse.Namespace, images: torch.Tensor, labels: torch.Tensor) -> Loop:
    torchrun_style_environment()
    device = rank_device(int(os.environ.get("LOCAL_RANK", "0")))
    if device.type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    deepspeed.init_distributed(dist_backend="nccl" if device.type == "cuda" else "gloo")
    model, optimizer = model_and_optimizer(args, deepspeed.comm.get_world_size(), device)
    images, labels = to_device(args, images, labels, device)
    config = {"train_micro_batch_size_per_gpu": args.batch, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": 0}, "gradient_clipping": 0.0, "steps_per_print": 2**31 - 1}
    if args.dtype in ("bf16", "fp16"):
        # DeepSpeed's dynamic loss scale for fp16, its defaults; the batch norms' running statistics in
        # the weights' dtype, as DeepSpeed before 0.19 cast the whole module (0.19 casts parameters
        # only, and a CPU batch norm takes one dtype): an older DeepSpeed ignores the key
        config["bf16" if args.dtype == "bf16" else "fp16"] = {"enabled": True}
        config["data_types"] = {"buffer_dtype": args.dtype}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    if args.compile:
        engine.compile()
    # DeepSpeed's CIFAR-10 example: the inputs in the engine's dtype
    if engine.bfloat16_enabled():
        images = images.to(torch.bfloat16)
    elif engine.fp16_enabled():
        images = images.to(torch.half)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)

    def step() -> torch.Tensor:
        loss = criterion(engine(images), labels)
        engine.backward(loss)
        engine.step()
        return loss

    def settings() -> dict:
        scale = getattr(engine.optimizer, "cur_scale", None)  # DeepSpeed's fp16 optimizers' dynamic loss scale
        return {"loss_scale": float(scale)} if engine.fp16_enabled() and scale is not None else {}

    return deepspeed.comm.get_rank(), step, deepspeed.comm.barrier, settings


def device_finish() -> Callable[[], None]:
    return torch.cuda.synchronize if torch.cuda.is_initialized() else lambda: None


LOOPS = {"ddp": ddp_loop, "horovod": horovod_loop, "deepspeed": deepspeed_loop}


def main(argv: list[str]) -> int:
    args = parse(argv, frameworks=tuple(LOOPS), extend=numerics_options)
    if args.dtype in GPU_ONLY and not torch.cuda.is_available():
        sys.exit(f"reference_loops: --dtype {args.dtype} needs a GPU (TF32 and fp16 with a gradient scaler are "
                 "GPU arithmetic); torch sees none here: use fp32 or bf16")
    set_tf32(args.dtype)
    cores = sorted(os.sched_getaffinity(0))  # the launcher bound this rank to them
    torch.set_num_threads(len(cores))
    torch.manual_seed(1234)
    images = torch.randn(args.batch, 3, args.image_size, args.image_size)
    labels = torch.randint(0, args.classes, (args.batch,))
    rank, step, barrier, settings = LOOPS[args.framework](args, images, labels)

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
        "window_threads": threads, "dtype": args.dtype, "channels_last": args.channels_last,
        "compiled": args.compile, "tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32,
                                           "cudnn": torch.backends.cudnn.allow_tf32},
        **settings(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
