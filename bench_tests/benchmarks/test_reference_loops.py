"""Does the harness measure a framework as that framework's own loop runs? Each framework's
synthetic ResNet50 cell (the ``cpu-small`` workload, 1 core per rank, mpirun) against a reference
loop written the way the framework's own examples write it (reference_loops.py), both launched by
the same launcher object with the same binding and environment.

    DLSCALE_BENCHMARKS=1 pytest bench_tests/benchmarks/test_reference_loops.py -s

On a GPU node, ``DLSCALE_REFERENCE_DEVICE=cuda`` compares the study's workload (224 px, 64 images
per GPU) instead, a GPU per rank, through torchrun; ``DLSCALE_REFERENCE_FRAMEWORKS`` and
``DLSCALE_REFERENCE_RANKS`` (comma-separated) pick the rows.

``DLSCALE_REFERENCE_DTYPES`` (comma-separated of fp32, tf32, bf16, fp16; default fp32) and
``DLSCALE_REFERENCE_CHANNELS_LAST=1`` pick the precision rows: each framework x rank count at each
dtype, in channels-last tensors where asked (every row then). The cell is
``Cell(..., dtype=d, channels_last=cl)`` and its reference loop runs with ``--dtype d
[--channels-last]``, each written as the framework's documents write it (reference_loops.py:
autocast and, for fp16, a gradient scaler; DeepSpeed its own bf16/fp16), so that harness/reference
holds at each precision. A row the harness cannot run is left out and its reason printed under the
table: TensorFlow trains in fp32 only (``harness.rank.frameworks.numerics_unsupported``), tf32
and fp16 are GPU arithmetic. Where no row is left the test is skipped with those reasons.
``DLSCALE_REFERENCE_ROUNDS`` (default 3) and ``DLSCALE_REFERENCE_WORKLOAD`` (the workload's fields
over the profile's, e.g. ``batch_size=8,steps=3``) shorten a run that only checks the plumbing
(``ci/gpu_check.sh --cpu``).

Harness and reference alternate over interleaved rounds (the order flips from one launch pair to
the next), and both are reduced by the same definitions: the suite's figure (MSER-5 warm-up
trimmed, all ranks' images over the sum of each step's slowest-rank time) and the plain one (all
ranks' images over the slowest rank's timed window, which also holds whatever a loop does between
steps). A row fails when the harness's median throughput is below MIN_RATIO of the reference's on
either definition. Not part of ordinary runs.

TensorFlow's parameter server, whose one coordinator runs every worker's steps, is compared apart
(``test_parameter_server_cell_matches_tensorflows_own_loop``): the cell against the loop of
TensorFlow's parameter-server tutorial (reference_loop_keras_ps.py), over the timed window only; in
fp32 and contiguous tensors only, skipped with the reason where the precision rows name neither.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import uuid
from pathlib import Path
from typing import Mapping

import pytest

from bench_tests.benchmarks.reference_loops import LOOPS
from harness.config.cells import PROFILES
from harness.judging.metrics import step_samples, trim_warmup
from harness.judging.stats import throughput_interval
from harness.launch.launchers import LAUNCHERS, Launcher, LaunchRequest, with_harness_importable
from harness.launch.procs import TOKEN_VARIABLE, kill_processes_with_token
from harness.launch.runner import run_cell
from harness.rank.cell import Cell
from harness.rank.contention import wait_share
from harness.rank.frameworks import FRAMEWORKS, has_servers, numerics_unsupported
from harness.rank.numerics import DEFAULT_DTYPE, Numerics
from harness.rank.rankenv import launch_port_block
from harness.rank.runtime import rank_interpreter, unavailable
from harness.rank.spec import RankOptions
from harness.rank.workload import Workload

ROUNDS = 3
COMPARED = ("ddp", "horovod", "deepspeed", "tensorflow")
MIN_RATIO = float(os.environ.get("DLSCALE_REFERENCE_MIN_RATIO", 0.97))
"""0 where a run only checks the plumbing (``ci/gpu_check.sh --cpu``: three steps hold no ratio)."""
REFERENCE_MODULES = {"tensorflow": "bench_tests.benchmarks.reference_loop_keras",
                     "tensorflow_ps_async": "bench_tests.benchmarks.reference_loop_keras_ps"}
"""Each framework's reference loop, where it is not reference_loops.py (another runtime's interpreter)."""
TIMEOUT_S = 600


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Setting:
    device: str
    workload: Workload
    launcher: str
    frameworks: tuple[str, ...]
    ranks: tuple[int, ...]
    cores_per_rank: int | None
    """None on a GPU: each rank binds near its GPU."""
    dtypes: tuple[str, ...] = (DEFAULT_DTYPE,)
    channels_last: bool = False
    """Every row's tensors in channels-last memory format."""
    rounds: int = ROUNDS

    def numerics(self, dtype: str) -> Numerics:
        return Numerics(dtype=dtype, channels_last=self.channels_last)

    def skipped(self, framework: str, dtype: str) -> str | None:
        """Why the harness cannot run ``framework``'s cell at ``dtype`` in this setting, or None."""
        return numerics_unsupported(framework, self.numerics(dtype), gpu=self.device == "cuda")


def setting(env: Mapping[str, str] = os.environ) -> Setting:
    gpu = env.get("DLSCALE_REFERENCE_DEVICE", "cpu") == "cuda"
    dtypes = tuple(env.get("DLSCALE_REFERENCE_DTYPES", DEFAULT_DTYPE).split(","))
    for dtype in dtypes:
        Numerics(dtype=dtype)  # a name it does not know is an error naming the valid ones
    frameworks = tuple(env.get("DLSCALE_REFERENCE_FRAMEWORKS", ",".join(COMPARED)).split(","))
    with_loops = sorted({*LOOPS, *REFERENCE_MODULES})
    if without := [framework for framework in frameworks if framework not in with_loops]:
        raise ValueError(f"DLSCALE_REFERENCE_FRAMEWORKS: no reference loop for {', '.join(without)} "
                         f"(there is one for {', '.join(with_loops)})")
    return Setting(device="cuda" if gpu else "cpu",
                   workload=overridden(PROFILES["study" if gpu else "cpu-small"].workload, env),
                   launcher="torchrun" if gpu else "mpirun",
                   frameworks=frameworks,
                   ranks=tuple(int(count) for count in env.get("DLSCALE_REFERENCE_RANKS", "1,2").split(",")),
                   cores_per_rank=None if gpu else 1, dtypes=dtypes,
                   channels_last=env.get("DLSCALE_REFERENCE_CHANNELS_LAST", "0") == "1",
                   rounds=int(env.get("DLSCALE_REFERENCE_ROUNDS", ROUNDS)))


def overridden(workload: Workload, env: Mapping[str, str]) -> Workload:
    """``workload`` with the fields ``DLSCALE_REFERENCE_WORKLOAD`` names (``field=value,...``)."""
    fields = {}
    for item in filter(None, env.get("DLSCALE_REFERENCE_WORKLOAD", "").split(",")):
        name, _, value = item.partition("=")
        if name not in Workload.__dataclass_fields__:
            raise ValueError(f"DLSCALE_REFERENCE_WORKLOAD: no workload field {name!r}")
        fields[name] = type(getattr(workload, name))(value)
    return workload.replace(**fields)


Row = tuple[str, str, int]
"""framework, dtype, ranks."""


@pytest.fixture(autouse=True)
def only_when_asked(request):
    if not (request.config.getoption("benchmark_only", False) or os.environ.get("DLSCALE_BENCHMARKS")):
        pytest.skip("a benchmark: run with --benchmark-only or DLSCALE_BENCHMARKS=1")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Throughput:
    suite: float
    """Images/s as the suite computes it: warm-up trimmed, images over the slowest-rank step sums."""
    window: float
    """Images/s over the timed window: all ranks' images over the slowest rank's window."""
    cpu_wait: float | None
    """The largest share of the timed time any rank's threads, together, waited for a CPU."""


def throughput(records: list[dict], cpu_wait: float | None) -> Throughput:
    trimmed, _ = trim_warmup(records)
    return Throughput(suite=throughput_interval(*step_samples(trimmed)).value,
                      window=sum(record["images"] for record in records) / max(record["window_s"] for record in records),
                      cpu_wait=cpu_wait)


def run_harness(framework: str, dtype: str, ranks: int, launcher: Launcher, workdir: Path,
                compared: Setting) -> Throughput:
    cell = Cell(framework=framework, loader="synthetic", model="resnet50", ranks=ranks, dtype=dtype,
                channels_last=compared.channels_last)
    run = run_cell(cell, compared.workload, launcher, workdir=workdir,
                   options=RankOptions(device=compared.device, cores_per_rank=compared.cores_per_rank))
    assert run.ok, f"{cell.id}: {run.error}"
    return throughput(run.records, wait_share(run.records))


def run_reference(framework: str, dtype: str, ranks: int, launcher: Launcher, workdir: Path,
                  compared: Setting) -> Throughput:
    """The reference loop through ``launcher``, its environment prepared as harness.launch.runner prepares a
    cell's; reference_loops.py's at the row's precision (the others train in fp32 only and are never asked
    for another)."""
    numerics = () if framework in REFERENCE_MODULES else \
        ("--dtype", dtype, *(("--channels-last",) if compared.channels_last else ()))
    out = launch_reference(framework, ranks, launcher, workdir, compared.workload, compared.cores_per_rank,
                           *numerics, tag="-".join(compared.numerics(dtype).words))
    records = [json.loads(path.read_text()) for path in sorted(out.glob("rank*.json"))]
    assert len(records) == ranks, f"reference {framework} x{ranks}: {len(records)} rank records"
    if numerics:
        ran = {(record["dtype"], record["channels_last"]) for record in records}
        assert ran == {(dtype, compared.channels_last)}, f"reference {framework} x{ranks} ran as {ran}"
    threads = [record["window_threads"] for record in records]
    return throughput(records, max((t["main_waited_s"] + t["others_waited_s"]) / record["window_s"]
                                   for t, record in zip(threads, records)))


def launch_reference(framework: str, processes: int, launcher: Launcher, workdir: Path, workload: Workload,
                     cores_per_rank: int | None, *extra: str, tag: str = "") -> Path:
    """Run ``framework``'s reference loop as ``processes`` ranks of ``launcher``; the directory its
    records are in (``tag``, e.g. the numerics, in its name)."""
    out = workdir / "-".join(("reference", framework, *([tag] if tag else []), f"g{processes}"))
    shutil.rmtree(out, ignore_errors=True)
    token = uuid.uuid4().hex
    args = ("--framework", framework, "--batch", str(workload.batch_size), "--image-size", str(workload.image_size),
            "--classes", str(workload.num_classes), "--warmup", str(workload.warmup_steps),
            "--steps", str(workload.steps), "--lr", str(workload.base_lr), "--momentum", str(workload.momentum),
            "--weight-decay", str(workload.weight_decay), "--label-smoothing", str(workload.label_smoothing),
            "--out", str(out.resolve()), *extra)
    module = REFERENCE_MODULES.get(framework, "bench_tests.benchmarks.reference_loops")
    request = LaunchRequest(ranks=processes, module=module, args=args, master_port=launch_port_block(processes),
                            rank_python=rank_interpreter(FRAMEWORKS.entry(framework).runtime),
                            job_name=f"dlscale-reference-{framework}-g{processes}-{token[:8]}",
                            master_addr=launcher.rendezvous_host(), token=token, cores_per_rank=cores_per_rank,
                            share_cores=cores_per_rank is None and has_servers(framework))
    env = dict(os.environ, PYTHONUNBUFFERED="1", MASTER_PORT=str(request.master_port), **{TOKEN_VARIABLE: token})
    if request.master_addr:
        env["MASTER_ADDR"] = request.master_addr
    else:
        env.pop("MASTER_ADDR", None)
    try:
        done = subprocess.run(launcher.command(request), env=with_harness_importable(env), capture_output=True,
                              text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        kill_processes_with_token(token)
    assert done.returncode == 0, \
        f"reference {framework} x{processes} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return out


def test_harness_matches_reference_loops(request, tmp_path):
    compared = setting()
    launcher = LAUNCHERS.create(compared.launcher)
    if reason := launcher.unavailable_reason():
        pytest.skip(f"{compared.launcher}: {reason}")
    skipped = {(framework, dtype): reason for framework in compared.frameworks for dtype in compared.dtypes
               if (reason := compared.skipped(framework, dtype))}
    skips = [f"{framework} at {_numerics(compared, dtype)}: {reason}" for (framework, dtype), reason in skipped.items()]
    rows: list[Row] = [(framework, dtype, ranks) for framework in compared.frameworks for dtype in compared.dtypes
                       if (framework, dtype) not in skipped for ranks in compared.ranks]
    if not rows:
        pytest.skip("no row the harness can run: " + "; ".join(skips))
    harness: dict[Row, list[Throughput]] = {row: [] for row in rows}
    reference: dict[Row, list[Throughput]] = {row: [] for row in rows}
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    for round_ in range(compared.rounds):
        for index, (framework, dtype, ranks) in enumerate(rows):
            order = [("harness", run_harness, harness), ("reference", run_reference, reference)]
            if (round_ + index) % 2:
                order.reverse()
            for name, run, into in order:
                measured = run(framework, dtype, ranks, launcher, tmp_path, compared)
                into[(framework, dtype, ranks)].append(measured)
                with capture.global_and_fixture_disabled():
                    print(f"round {round_ + 1}/{compared.rounds} {framework} {_numerics(compared, dtype)} x{ranks} "
                          f"{name}: "
                          f"{measured.suite:.1f} img/s (window {measured.window:.1f}, CPU wait "
                          f"{_share(measured.cpu_wait)})", flush=True)

    tables, failures = [], []
    for definition in ("suite", "window"):
        lines = [f"images/s, {_DEFINITIONS[definition]}",
                 "| framework | numerics | ranks | harness img/s | reference img/s | harness/reference "
                 "| E_G harness / reference | CPU wait harness / reference |",
                 "|---|---|---|---|---|---|---|---|"]
        for framework, dtype, ranks in rows:
            ours = [getattr(t, definition) for t in harness[(framework, dtype, ranks)]]
            theirs = [getattr(t, definition) for t in reference[(framework, dtype, ranks)]]
            ratios = [a / b for a, b in zip(ours, theirs)]
            efficiency = "-"
            fewest = min(compared.ranks)
            if ranks != fewest:  # within one precision: E_G compares a series
                ours_1 = statistics.median(getattr(t, definition) for t in harness[(framework, dtype, fewest)])
                theirs_1 = statistics.median(getattr(t, definition) for t in reference[(framework, dtype, fewest)])
                efficiency = (f"{statistics.median(ours) / ranks / ours_1:.2f} / "
                              f"{statistics.median(theirs) / ranks / theirs_1:.2f}")
            waits = " / ".join(_share(_median_or_none([t.cpu_wait for t in runs[(framework, dtype, ranks)]]))
                               for runs in (harness, reference))
            lines.append(f"| {framework} | {_numerics(compared, dtype)} | {ranks} | {_spread(ours, '.1f')} | "
                         f"{_spread(theirs, '.1f')} | {_spread(ratios, '.3f')} | {efficiency} | {waits} |")
            if statistics.median(ratios) < MIN_RATIO:
                failures.append(f"{framework} {_numerics(compared, dtype)} x{ranks} ({definition}): "
                                f"harness/reference {statistics.median(ratios):.3f}")
        tables.append("\n".join(lines))
    table = "\n\n".join(tables) + "".join(f"\nnot compared: {skip}" for skip in skips)
    with capture.global_and_fixture_disabled():
        print(f"\n{table}\n(median and min-max over {compared.rounds} interleaved rounds; ratios per round; CPU wait: "
              "median "
              "over rounds of the largest share of the timed time a rank's threads together waited on a run queue)",
              flush=True)
    request.node.user_properties.append(("reference_loops", table))
    assert not failures, f"the harness is slower than the framework's own loop by more than {1 - MIN_RATIO:.0%}: " \
                         + "; ".join(failures)



PS_FRAMEWORK = "tensorflow_ps_async"
PS_RANKS = (2, 3)
"""One worker and two, beside one server; in both, a coordinator process of its own."""


def test_parameter_server_cell_matches_tensorflows_own_loop(request, tmp_path):
    """TensorFlow's parameter server, whose one coordinator runs every step: the cell's throughput over
    its timed window (every worker's images over the longest worker's window) against the tutorial's
    loop (every step's images over the time from the first timed step scheduled to ``join()``); the
    CPU workload, mpirun, the processes sharing the cores as the suite runs them, each with the
    kernel threads a rank of the cell gets."""
    compared = setting()
    if DEFAULT_DTYPE not in compared.dtypes or compared.channels_last:
        pytest.skip(f"{PS_FRAMEWORK}: {compared.skipped(PS_FRAMEWORK, compared.dtypes[0])} "
                    f"(DLSCALE_REFERENCE_DTYPES={','.join(compared.dtypes)}"
                    f"{', DLSCALE_REFERENCE_CHANNELS_LAST=1' if compared.channels_last else ''})")
    launcher = LAUNCHERS.create("mpirun")
    if reason := launcher.unavailable_reason() or unavailable("tensorflow", FRAMEWORKS.entry(PS_FRAMEWORK)):
        pytest.skip(reason)
    workload = overridden(PROFILES["cpu-small"].workload, os.environ)
    measured: dict[str, dict[int, list[float]]] = {"harness": {r: [] for r in PS_RANKS}, "reference": {r: [] for r in PS_RANKS}}

    def harness(ranks: int) -> float:
        run = run_cell(Cell(framework=PS_FRAMEWORK, loader="synthetic", model="resnet50", ranks=ranks), workload,
                       launcher, workdir=tmp_path)
        assert run.ok, run.error
        return sum(record["images"] for record in run.records) / max(record["window_s"] for record in run.records)

    def reference(ranks: int) -> float:
        # the kernel threads the cell's ranks get (harness.rank.worker.threads_for): the loops differ in their loop only
        threads = max(1, len(os.sched_getaffinity(0)) // ranks)
        out = launch_reference(PS_FRAMEWORK, ranks + 1, launcher, tmp_path, workload, None, "--servers", "1",
                               "--threads", str(threads))
        record = json.loads((out / "coordinator.json").read_text())
        return record["images"] / record["window_s"]

    capture = request.config.pluginmanager.get_plugin("capturemanager")
    for round_ in range(compared.rounds):
        for index, ranks in enumerate(PS_RANKS):
            order = [("harness", harness), ("reference", reference)]
            for name, run in order if (round_ + index) % 2 == 0 else reversed(order):
                measured[name][ranks].append(run(ranks))
                with capture.global_and_fixture_disabled():
                    print(f"round {round_ + 1}/{compared.rounds} {PS_FRAMEWORK} x{ranks} {name}: "
                          f"{measured[name][ranks][-1]:.1f} img/s", flush=True)
    lines = [f"images/s, {_DEFINITIONS['window']}", "| framework | ranks | harness img/s | reference img/s | "
             "harness/reference |", "|---|---|---|---|---|"]
    failures = []
    for ranks in PS_RANKS:
        ours, theirs = measured["harness"][ranks], measured["reference"][ranks]
        ratios = [a / b for a, b in zip(ours, theirs)]
        lines.append(f"| {PS_FRAMEWORK} | {ranks} | {_spread(ours, '.1f')} | {_spread(theirs, '.1f')} | "
                     f"{_spread(ratios, '.3f')} |")
        if statistics.median(ratios) < MIN_RATIO:
            failures.append(f"x{ranks}: harness/reference {statistics.median(ratios):.3f}")
    table = "\n".join(lines) + "".join(f"\nnot compared: {PS_FRAMEWORK} at {dtype}: "
                                     f"{compared.skipped(PS_FRAMEWORK, dtype)}"
                                     for dtype in compared.dtypes if dtype != DEFAULT_DTYPE)
    with capture.global_and_fixture_disabled():
        print(f"\n{table}\n(median and min-max over {compared.rounds} interleaved rounds)", flush=True)
    request.node.user_properties.append(("reference_loops_ps", table))
    assert not failures, f"the harness is slower than TensorFlow's own loop by more than {1 - MIN_RATIO:.0%}: " \
                         + "; ".join(failures)

_DEFINITIONS = {
    "suite": "the suite's figure: warm-up trimmed (MSER-5), all ranks' images over the sum of each step's slowest-rank time",
    "window": "all ranks' images over the slowest rank's timed window",
}


def _numerics(compared: Setting, dtype: str) -> str:
    return " ".join((dtype, *(("channels_last",) if compared.channels_last else ())))


def _spread(values: list[float], spec: str) -> str:
    return f"{statistics.median(values):{spec}} ({min(values):{spec}}-{max(values):{spec}})"


def _median_or_none(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"
