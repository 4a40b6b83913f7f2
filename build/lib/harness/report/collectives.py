"""All-reduce bandwidth in the manner of nccl-tests, and the communication time it bounds.

    algbw = bytes / time
    busbw = algbw x 2(G-1)/G                      (what each link carries in a ring all-reduce)
    lower bound per step = 2(G-1)/G x gradient bytes / busbw

:class:`AllReduceGroup` makes the calling process rank 0 of a real ``G``-rank process group (gloo
on CPU, NCCL with a GPU per rank) and spawns ranks 1..G-1 as helper processes that mirror its
all-reduces, so that a timer in the calling process (pytest-benchmark's) times real collectives:
bench_tests/benchmarks/test_collectives.py. Its results file (``kind: "collectives"``) is what
harness.report.html reads for the lower bounds.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import multiprocessing
from pathlib import Path
from typing import Any, Mapping

RESNET_BACKBONE_PARAMETERS = {"resnet50": 23_508_032, "resnet101": 42_500_160, "resnet152": 58_143_808}
"""torchvision's ResNets without their final fully connected layer (which has 2048 inputs)."""
FC_INPUTS = 2048
BYTES_PER_GRADIENT = 4
"""fp32 gradients, as every cell trains."""


def parameter_count(model: str, num_classes: int = 1000) -> int:
    """Parameters of a torchvision ResNet with a ``num_classes``-way classifier (all trainable)."""
    try:
        backbone = RESNET_BACKBONE_PARAMETERS[model]
    except KeyError:
        raise ValueError(f"no parameter count for model {model!r}; known: {', '.join(RESNET_BACKBONE_PARAMETERS)}") \
            from None
    return backbone + (FC_INPUTS + 1) * num_classes


def gradient_bytes(model: str, num_classes: int = 1000) -> int:
    return BYTES_PER_GRADIENT * parameter_count(model, num_classes)


def bus_factor(ranks: int) -> float:
    """2(G-1)/G: the share of the buffer each rank sends (and receives) twice over in a ring all-reduce."""
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    return 2 * (ranks - 1) / ranks


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth, bytes per second."""
    return nbytes / seconds


def busbw(nbytes: float, seconds: float, ranks: int) -> float:
    """Bus bandwidth, bytes per second (nccl-tests' figure, comparable across rank counts)."""
    return algbw(nbytes, seconds) * bus_factor(ranks)


def allreduce_lower_bound_s(nbytes: float, ranks: int, bus_bandwidth: float) -> float:
    """The least time an all-reduce of ``nbytes`` over ``ranks`` ranks can take at ``bus_bandwidth``
    bytes per second: zero for one rank."""
    if bus_bandwidth <= 0:
        raise ValueError(f"bus bandwidth must be positive, got {bus_bandwidth}")
    return bus_factor(ranks) * nbytes / bus_bandwidth


# -- results file --------------------------------------------------------------------------------


def result_row(nbytes: int, seconds: float, ranks: int, *, fastest_s: float | None = None, rounds: int = 0,
               iterations: int = 0) -> dict:
    """One message size's figures, bandwidths in GB/s (10^9 bytes/s) as nccl-tests prints them."""
    return {"bytes": nbytes, "time_s": seconds, "time_min_s": fastest_s,
            "algbw_gbps": algbw(nbytes, seconds) / 1e9, "busbw_gbps": busbw(nbytes, seconds, ranks) / 1e9,
            "rounds": rounds, "iterations": iterations}


def load_collectives(path: Path) -> dict:
    data = json.loads(Path(path).read_text())
    if data.get("kind") != "collectives" or not isinstance(data.get("results"), list):
        raise ValueError(f"{path} is not a collectives results file (kind 'collectives' with a results list)")
    return data


def peak_busbw(collectives: Mapping) -> dict:
    """The message size with the highest bus bandwidth: the bandwidth a lower bound may assume."""
    rows = [row for row in collectives["results"] if row.get("busbw_gbps")]
    if not rows:
        raise ValueError("the collectives results hold no bus bandwidth (one rank, or nothing measured)")
    return max(rows, key=lambda row: row["busbw_gbps"])


def lower_bound_rows(collectives: Mapping, cells: list[Mapping], *, num_classes: int | None = None) -> list[list[str]]:
    """Per model and rank count found in ``cells`` (a results file's cells): gradient bytes, the
    all-reduce lower bound per step at the benchmark's peak bus bandwidth, and the cells' measured
    exposed communication per step (their slowest rank's) beside it."""
    from harness.judging.breakdown import BreakdownUnavailable, cell_breakdown
    from harness.config.cells import scaling_cell

    peak = peak_busbw(collectives)
    bandwidth = peak["busbw_gbps"] * 1e9
    classes = num_classes or 1000
    rows = [["model", "ranks", f"gradient MB ({classes} classes)",
             f"lower bound s/step (busbw {peak['busbw_gbps']:.2f} GB/s)", "cell",
             "measured exposed communication s/step"]]
    parsed_cells = [(parsed, cell) for cell in cells if (parsed := scaling_cell(cell["cell"]))]
    seen = set()
    for parsed, cell in sorted(parsed_cells, key=lambda pc: (pc[0].model, pc[0].ranks, pc[1]["cell"])):
        model, ranks = parsed.model, parsed.ranks
        if model not in RESNET_BACKBONE_PARAMETERS:
            continue
        nbytes = gradient_bytes(model, classes)
        bound = allreduce_lower_bound_s(nbytes, ranks, bandwidth)
        try:
            measured = f"{cell_breakdown(cell.get('records') or []).slowest.communication:.4f}"
        except BreakdownUnavailable:
            measured = "-"
        first = (model, ranks) not in seen
        seen.add((model, ranks))
        rows.append([model if first else "", str(ranks) if first else "", f"{nbytes / 1e6:.1f}" if first else "",
                     f"{bound:.4f}" if first else "", cell["cell"], measured])
    return rows


# -- a real process group with the calling process as rank 0 ---------------------------------------


def _helper(rank: int, ranks: int, address: str, backend: str, device_type: str, conn) -> None:
    """Rank ``rank``: mirrors rank 0's all-reduces until rank 0 sends the stop value."""
    import torch
    import torch.distributed as dist

    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=address, rank=rank, world_size=ranks,
                            timeout=datetime.timedelta(seconds=120))
    try:
        while True:
            command = conn.recv()
            if command[0] == "stop":
                return
            buffer = torch.zeros(command[1], dtype=torch.float32, device=device)
            while True:
                dist.all_reduce(buffer)
                if buffer[0].item() != 0:  # rank 0 contributed the stop value: this size is done
                    break
    finally:
        dist.destroy_process_group()


@dataclasses.dataclass(kw_only=True)
class AllReduceGroup:
    """A ``ranks``-rank process group whose rank 0 is this process.

    ``with AllReduceGroup(ranks=2) as group: buffer = group.start(numel); ...group.allreduce(buffer)...;
    group.finish(buffer)``: between ``start`` and ``finish`` every ``allreduce`` here is mirrored by
    each helper rank, however many times it is called. Buffers stay all zero so that repeated sums
    never overflow; ``finish`` sends a 1, which ends the helpers' loops.
    """

    ranks: int = 2
    device: str = "auto"
    """"cpu" (gloo), "cuda" (NCCL, one GPU per rank) or "auto" (cuda when there are ``ranks`` GPUs)."""
    timeout_s: int = 120

    def __post_init__(self) -> None:
        if self.ranks < 2:
            raise ValueError(f"an all-reduce benchmark needs at least 2 ranks, got {self.ranks}")

    def __enter__(self) -> "AllReduceGroup":
        import torch
        import torch.distributed as dist

        from harness.rank.rankenv import free_port

        if dist.is_initialized():
            raise RuntimeError("this process already belongs to a process group")
        use_cuda = self.device == "cuda" or (self.device == "auto" and torch.cuda.device_count() >= self.ranks)
        if use_cuda and torch.cuda.device_count() < self.ranks:
            raise RuntimeError(f"NCCL needs a GPU per rank: {self.ranks} ranks, {torch.cuda.device_count()} GPU(s)")
        self.backend = "nccl" if use_cuda else "gloo"
        self.torch_device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
        if use_cuda:
            torch.cuda.set_device(self.torch_device)
        address = f"tcp://127.0.0.1:{free_port()}"
        context = multiprocessing.get_context("spawn")
        self._pipes, self._helpers = [], []
        for rank in range(1, self.ranks):
            ours, theirs = context.Pipe()
            process = context.Process(target=_helper, args=(rank, self.ranks, address, self.backend,
                                                            self.torch_device.type, theirs), daemon=True)
            process.start()
            self._pipes.append(ours)
            self._helpers.append(process)
        dist.init_process_group(self.backend, init_method=address, rank=0, world_size=self.ranks,
                                timeout=datetime.timedelta(seconds=self.timeout_s))
        return self

    def start(self, numel: int) -> Any:
        """A zero buffer of ``numel`` fp32 values; the helpers start mirroring all-reduces of that size."""
        import torch

        for pipe in self._pipes:
            pipe.send(("run", numel))
        return torch.zeros(numel, dtype=torch.float32, device=self.torch_device)

    def allreduce(self, buffer) -> None:
        import torch
        import torch.distributed as dist

        dist.all_reduce(buffer)
        if buffer.is_cuda:
            torch.cuda.synchronize(buffer.device)  # the collective has finished, not just been queued

    def finish(self, buffer) -> None:
        buffer[0] = 1
        self.allreduce(buffer)

    def __exit__(self, *exc) -> None:
        import torch.distributed as dist

        for pipe in self._pipes:
            try:
                pipe.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
        for process in self._helpers:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
                process.join(timeout=10)
        if dist.is_initialized():
            dist.destroy_process_group()
