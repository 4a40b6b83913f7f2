"""One rank of a cell. Started by a launcher, once per rank:

    srun -n 2 python -m harness.rank.worker SPEC.json

Reads its rank from the launcher's environment, trains, and writes ``record-rank<R>.json`` (or
``error-rank<R>.json`` with the traceback) into the spec's output directory. Progress goes to
``progress-rank<R>.json`` so the runner can tell a live rank from a hung one.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Iterator

from harness import HARNESS_SOURCE
from harness.common.jsonio import write_json_atomic
from harness.rank.instructions import InstructionCounting, exec_under_callgrind
from harness.rank.layout import apply_at_start
from harness.rank.numerics import Numerics
from harness.rank.rankenv import RankInfo, address_toward, read_rank_info
from harness.rank.spec import WorkerSpec
from harness.rank.stacks import StackDumps
from harness.rank.work import NotCounted, WorkCounter, uncounted


WORKER_START = time.time()
"""When this rank's worker module began: the interpreter's start-up lies before it."""


def _window_times(samples: dict) -> dict:
    start = samples.get("window_start_epoch")
    return {"window_start": start, "window_end": start + samples["window_s"]} if start is not None else {}


class ProgressFile:
    """Heartbeat and progress for the runner: rewritten at most every ``interval`` seconds, and at a
    phase's first and last step whatever the interval (a rank that enters its timed steps says so
    at once, even when the step after hangs), each write told to ``on_write``."""

    def __init__(self, path: Path, rank: int, interval: float = 1.0, on_write: Callable[[], None] = lambda: None):
        self.path = path
        self.rank = rank
        self.interval = interval
        self.on_write = on_write
        self.last_write = 0.0
        self.last_phase: str | None = None

    def __call__(self, phase: str, step: int, of: int) -> None:
        now = time.time()
        if now - self.last_write >= self.interval or step == of or phase != self.last_phase:
            write_json_atomic(self.path, {"rank": self.rank, "phase": phase, "step": step, "of": of, "time": now})
            self.last_write, self.last_phase = now, phase
            self.on_write()


def threads_for(rank: RankInfo, requested: int | None) -> int:
    """CPU threads per rank: the node's cores shared fairly among its ranks unless given."""
    if requested:
        return requested
    return max(1, len(os.sched_getaffinity(0)) // rank.local_world_size)


@contextlib.contextmanager
def framework_on_this_rank(framework: str, ranks: int, batch_per_rank: int, spec: WorkerSpec, rank: RankInfo,
                           device, workload, numerics: Numerics = Numerics()) -> Iterator:
    """The cell's framework adapter, set up for this rank's world and shut down after the block. It
    is given the workload's knobs that its registry entry claims (a parameter server's count) and
    the numerics the cell trains in."""
    from harness.rank.frameworks import FRAMEWORKS

    if ranks != rank.world_size:
        raise RuntimeError(f"cell {Path(spec.output_dir).name} wants {ranks} ranks but the launcher started "
                           f"{rank.world_size}")
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = rank.master_addr, str(rank.master_port)
    knobs = {knob: getattr(workload, knob) for knob in FRAMEWORKS.entry(framework).knobs}
    adapter = FRAMEWORKS.create(framework, **knobs, **spec.options.framework_options)
    adapter.numerics = numerics
    adapter.configure(batch_size=batch_per_rank, workdir=Path(spec.output_dir))
    adapter.setup(rank, device)
    try:
        yield adapter
    finally:
        adapter.shutdown()


def not_counting(options) -> str | None:
    """Why a launch with these :class:`~harness.rank.spec.RankOptions` counts no work, or None."""
    if options.count_instructions:  # the work's own counting would be counted
        return "this launch counted its steps' host instructions instead"
    if not options.count_work:
        return "counting was turned off (--no-count-work)"
    return None


def work_counter(runtime, adapter, device, options) -> tuple[WorkCounter | None, dict]:
    """What counts a training rank's work after its window, or None with the record's ``work``
    saying why nothing is counted."""
    if why := not_counting(options):
        return None, {"work": uncounted(why)}
    try:
        return runtime.work_counter(adapter, device), {}
    except NotCounted as why:
        return None, {"work": uncounted(str(why))}


def run(spec: WorkerSpec, rank: RankInfo, progress) -> dict:
    from harness.machine.binding import bind, bind_near_gpu
    from harness.machine.node import node_facts
    from harness.machine.provenance import package_versions
    from harness.machine.yardstick import run_yardstick
    from harness.rank.cell import Cell
    from harness.rank.faults import with_fault, with_fault_batches
    from harness.rank.frameworks import FRAMEWORKS, numerics_unsupported, serves
    from harness.rank.frameworks.base import Role
    from harness.rank.gate import meet
    from harness.rank.packages import tracked_packages
    from harness.rank.runtime import RUNTIMES
    from harness.rank.trainloop import PROBE_STEPS, DelayedBatches, run_probes, train
    from harness.rank.workload import Workload

    cell, workload, options = Cell(**spec.cell), Workload(**spec.workload), spec.options
    runtime = RUNTIMES.create(FRAMEWORKS.entry(cell.framework).runtime)
    serving = serves(cell.framework, rank.rank, rank.world_size, workload.ps_servers)
    device = runtime.pick_device("cpu" if serving else options.device, rank.local_rank)
    # a parameter server computes no step: its CPU is no reason to refuse a GPU arithmetic
    if reason := numerics_unsupported(cell.framework, cell.numerics, gpu=None if serving else device.type == "cuda"):
        raise RuntimeError(f"{cell.id}: {reason}")
    if options.cores_per_rank:
        cores = bind(rank.local_rank, options.cores_per_rank, within=options.core_set)
    elif device.type == "cuda":
        cores = bind_near_gpu(rank.local_rank, rank.local_world_size)
    else:
        cores = None
    threads = 1 if options.count_instructions else len(cores) if cores else threads_for(rank, options.threads_per_rank)
    runtime.set_threads(threads)
    runtime.seed(workload.seed)
    progress = with_fault(progress, options.fault, rank.rank)
    progress("setup", 0, 1)

    # The yardstick runs before the framework starts and after it has shut down, so that none of
    # its threads (Horovod's background loop, DeepSpeed's, gloo's) can slow it. A CPU yardstick
    # says nothing about a GPU's speed, so GPU cells go without.
    yardstick = run_yardstick() if device.type == "cpu" and options.yardstick else None
    with framework_on_this_rank(cell.framework, cell.ranks, workload.batch_size, spec, rank, device,
                                workload, cell.numerics) as adapter:
        with adapter.scope():
            model, optimizer, loss_fn = runtime.build(adapter, cell.model, workload,
                                                      adapter.training_ranks(rank.world_size), device, cell.numerics)
        role = adapter.role()
        # The probe's model copy before the adapter wraps the model; a training rank whose figure
        # does not read it (an A/B's, a bisect's) goes without
        probe = (runtime.probe(model, loss_fn, device) if options.compute_probe or role is not Role.TRAINS
                 else None)
        adapter.wrap(model, optimizer, loss_fn)
        set_up = time.time()
        progress("setup", 1, 1)
        if role is Role.SERVES:
            probe.close()
            samples, loader_settings = adapter.serve(progress, workload.steps), None
        elif role is Role.FOLLOWS:
            loader = runtime.loader(cell.loader, workload, rank, device)
            try:
                batch = next(iter(loader))  # the compute probe's: the steps' batches are the coordinator's
            finally:
                loader.close()
            try:
                samples = adapter.follow(progress, lambda: run_probes(probe, batch, PROBE_STEPS, runtime.sync(device)))
            finally:
                probe.close()
            if "work" not in samples:  # its coordinator counts the steps it sends
                samples["work"] = uncounted(not_counting(options) or "its coordinator counted no step")
            loader_settings = loader.settings()
        else:
            loader = runtime.loader(cell.loader, workload, rank, device)
            try:
                delay = options.data_delay  # a slow loader on purpose
                batches = (DelayedBatches(loader, delay.seconds)
                           if delay and delay.rank in (None, rank.rank) else loader)
                batches = with_fault_batches(batches, progress)  # a 'slow' fault sleeps inside the timed steps
                gate = (functools.partial(meet, options.window_gate)
                        if options.window_gate and rank.rank == 0 else None)
                instructions = InstructionCounting(Path(spec.output_dir)) if options.count_instructions else None
                counter, not_counted = work_counter(runtime, adapter, device, options)
                samples = train(adapter, batches, warmup_steps=workload.warmup_steps, steps=workload.steps,
                                device=device, progress=progress, probe=probe, own_cores=cores,
                                sync=runtime.sync(device), clock=runtime.clock(device), gate=gate,
                                counter=counter, batch_data=getattr(loader, "batch_data", None),
                                instructions=instructions)
                samples.update(not_counted)
            finally:
                loader.close()
            loader_settings = loader.settings()
        framework_settings = adapter.settings()
    if yardstick is not None:
        yardstick += run_yardstick()
    return {
        "cell": cell.id,
        # where the launch's time went: the interpreter and imports before the worker ran, the
        # framework and model, the warm-up, the window, the teardown (harness.session.paired)
        "timeline": {"worker_start": WORKER_START, "set_up": set_up, **_window_times(samples), "done": time.time()},
        **dataclasses.asdict(rank),
        "host": socket.gethostname(),
        "addr": address_toward(rank.master_addr, rank.master_port),
        "pid": os.getpid(),
        "harness": str(HARNESS_SOURCE),  # which code ran: an A/B's reference runs another checkout's
        "python": sys.executable,  # and in which interpreter: a reference with other packages runs its own
        "device": str(device),
        "threads": threads,
        "numerics": dataclasses.asdict(cell.numerics),
        **({"cores": cores} if cores else {}),
        # as this rank sees them: a launcher that drops the site's settings shows here
        "launch_environment": {name: os.environ.get(name) for name in spec.launch_environment},
        "framework_settings": framework_settings,
        **({"loader_settings": loader_settings} if loader_settings is not None else {}),
        "versions": package_versions(tracked_packages()),
        "node": node_facts(device.type == "cuda"),
        **samples,
        **({"yardstick": yardstick} if yardstick is not None else {}),
    }


def run_accuracy_task(spec: WorkerSpec, rank: RankInfo, progress) -> dict:
    """The accuracy task (harness.rank.accuracy) under the cell's framework, on this rank."""
    import torch

    from harness.machine.node import node_facts
    from harness.rank.accuracy import run_accuracy
    from harness.rank.frameworks import serves
    from harness.rank.torch_runtime import TorchRuntime
    from harness.rank.workload import Workload

    cell, settings = spec.cell, spec.options.accuracy
    torch.set_num_threads(threads_for(rank, spec.options.threads_per_rank))
    workload = Workload(ps_servers=cell["servers"]) if cell.get("servers") else Workload()
    serving = serves(cell["framework"], rank.rank, rank.world_size, workload.ps_servers)
    device = TorchRuntime().pick_device("cpu" if serving else spec.options.device, rank.local_rank)
    with framework_on_this_rank(cell["framework"], cell["ranks"], cell["batch_per_rank"], spec, rank,
                                device, workload) as adapter:
        outcome = run_accuracy(adapter, rank=rank, device=device, schedule=cell["schedule"],
                               epochs=settings["epochs"], batch_per_rank=cell["batch_per_rank"],
                               base_lr=settings["base_lr"], reference_batch=settings["reference_batch"],
                               warmup_epochs=settings["warmup_epochs"], label_smoothing=settings["label_smoothing"],
                               seed=settings["seed"], progress=progress)
    return {**dataclasses.asdict(rank), "host": socket.gethostname(), "pid": os.getpid(),
            "node": node_facts(device.type == "cuda"), **outcome}


def error_line(error: BaseException) -> str:
    """``Type: message``; for an error raised in a DataLoader worker, the original error's own line
    and where it was raised (torch re-raises it in the rank with the worker's whole traceback as its
    message, under a first line that names neither the error nor the file)."""
    text = str(error).rstrip()
    if "\nOriginal Traceback" not in text:
        return f"{type(error).__name__}: {text}"
    qualified, _, message = text.splitlines()[-1].partition(": ")
    where = text.splitlines()[0].removeprefix(f"Caught {type(error).__name__} ").rstrip(".")
    return f"{qualified.rsplit('.', 1)[-1]}: {message} ({where})"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    apply_at_start(["-m", "harness.rank.worker", *argv[1:]])  # a layout only a new process image can have
    spec = WorkerSpec.from_json(json.loads(Path(argv[1]).read_text()))
    output = Path(spec.output_dir)
    label = f"pid{os.getpid()}"
    try:
        rank = read_rank_info(os.environ)
        label = f"rank{rank.rank}"
        if spec.options.count_instructions:
            exec_under_callgrind(["-m", "harness.rank.worker", *argv[1:]], output)
        dumps = StackDumps(output, label, spec.silent_dump_s)
        task = run_accuracy_task if spec.options.accuracy is not None else run
        record = task(spec, rank, ProgressFile(output / f"progress-{label}.json", rank.rank, on_write=dumps.progressed))
        dumps.close()
        write_json_atomic(output / f"record-{label}.json", record)
    except BaseException as error:  # noqa: BLE001 - every failure must reach the runner
        # The launcher may be ending every rank by now (a peer's failure): its SIGTERM must not cut
        # this report short. Unused stack dump files are the runner's to remove.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        line = error_line(error)
        write_json_atomic(output / f"error-{label}.json", {
            "rank": label, "host": socket.gethostname(), "pid": os.getpid(),
            "error": line,
            "traceback": traceback.format_exc()[-4000:],
        })
        sys.stderr.write(f"[dlscale worker {label}] {line}\n")
        sys.stderr.flush()
        # Skip interpreter teardown: with peers stuck in a collective it can block for minutes.
        os._exit(1)
    exit_at_once()
    return 0


def exit_at_once() -> None:
    """End a rank whose record is written without the interpreter's teardown: freeing torch's and
    the frameworks' modules took about 2 s of every launch here (a fifth of an A/B's launch), after
    the adapter has shut its framework down. MPI, where the rank initialised it, is finalised first,
    as the launcher expects of every rank."""
    sys.stdout.flush()
    sys.stderr.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
