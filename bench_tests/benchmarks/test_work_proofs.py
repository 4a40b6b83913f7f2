"""Counted work where the answer is known (docs/measurements.md, "Counted work"):

- what counting costs a launch: launches of default-matrix cells with and without counting, side by
  side in random order, the ratio of their wall times printed (the issue's bound: 10%);
- A/As: every counted launch of a cell counts the same work, and so does each launcher;
- a model change of about 5% (ResNet44's last stage 64 -> 68 channels) judged by ``--against git:``
  on a 1-rank and a 2-rank cell: the work change named, with its operator, from the first pair; and
  by its host instructions (``--count-instructions``, one launch a side under callgrind).

    DLSCALE_BENCHMARKS=1 pytest bench_tests/benchmarks/test_work_proofs.py -s
    (DLSCALE_WORK_ROUNDS: rounds of the cost benchmark, default 5; DLSCALE_WORK_REPEATS: sessions of
    the model change per cell, default 10)

Not part of ordinary runs: without DLSCALE_BENCHMARKS=1 (or --benchmark-only) it skips.
"""
from __future__ import annotations

import json
import os
import random
import statistics
from pathlib import Path

import pytest

from bench_tests.benchmarks.ab_common import only_when_asked  # noqa: F401 - the opt-in gate
from bench_tests.benchmarks.ab_common import compare
from bench_tests.projects import throwaway_project
from harness.config.cells import PROFILES
from harness.judging.work import cell_work, work_digest
from harness.launch.launchers import LAUNCHERS
from harness.launch.runner import run_cell
from harness.rank.cell import Cell
from harness.rank.spec import RankOptions

ROUNDS = int(os.environ.get("DLSCALE_WORK_ROUNDS", "5"))
REPEATS = int(os.environ.get("DLSCALE_WORK_REPEATS", "10"))
DATASET = Path(os.environ.get("DLSCALE_CACHE", Path.home() / ".cache" / "dlscale")) / "dataset"
COST_CELLS = [Cell(framework="ddp", loader="native", model="resnet50", ranks=1),
              Cell(framework="ddp", loader="synthetic", model="resnet50", ranks=2)]
WIDER_SUBJECT = "the last stage 64 -> 68 channels"


def launch(cell: Cell, launcher: str, workdir: Path, count: bool):
    workload = PROFILES["cpu-small"].workload.replace(data_dir=str(DATASET))
    run = run_cell(cell, workload, LAUNCHERS.create(launcher), workdir=workdir,
                   options=RankOptions(cores_per_rank=1, count_work=count))
    assert run.ok, run.error
    return run


def test_counting_costs_a_launch_little_and_counts_the_same_every_launch(tmp_path):
    rng = random.Random(0)
    report = {}
    for cell in COST_CELLS:
        walls = {True: [], False: []}
        digests, work = set(), None
        for round_ in range(ROUNDS):
            for count in rng.sample([True, False], 2):
                run = launch(cell, "srun", tmp_path / f"{cell.id}-{round_}-{count}", count)
                walls[count].append(run.wall_s)
                if count:
                    work = cell_work(run.records)
                    digests.add(work_digest(work))
        ratios = [with_ / without for with_, without in zip(walls[True], walls[False])]
        report[cell.id] = {"wall_with_s": walls[True], "wall_without_s": walls[False], "ratios": ratios,
                           "median_ratio": statistics.median(ratios), "digests": sorted(digests),
                           "counted_step_s": work["cost_s"]}
        print(f"{cell.id}: launch with counting / without, median of {ROUNDS} rounds "
              f"{statistics.median(ratios):.3f} (rounds {', '.join(f'{r:.3f}' for r in ratios)}); "
              f"the counted step {work['cost_s']:.2f} s; {len(digests)} distinct work in {ROUNDS} counted launches")
        assert len(digests) == 1, digests  # exact counts, launch after launch
    by_launcher = {name: work_digest(cell_work(launch(COST_CELLS[1], name, tmp_path / name, True).records))
                   for name in ("srun", "mpirun", "torchrun")}
    print(f"{COST_CELLS[1].id}: work by launcher: {by_launcher}")
    report["by_launcher"] = by_launcher
    output = Path(os.environ.get("DLSCALE_WORK_JSON", "results/counted_work.json"))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=1))
    assert len(set(by_launcher.values())) == 1, by_launcher
    assert all(report[cell.id]["median_ratio"] < 1.10 for cell in COST_CELLS), report


def widen_last_stage(project: Path) -> None:
    model = project / "harness" / "rank" / "cifar_resnet.py"
    model.write_text(model.read_text().replace("STAGE_CHANNELS = (16, 32, 64)", "STAGE_CHANNELS = (16, 32, 68)"))


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_wider_layer_is_named_by_its_work_from_the_first_pair(ranks, tmp_path):
    project = throwaway_project(tmp_path / "project", [(WIDER_SUBJECT, widen_last_stage)])
    named = []
    for index in range(REPEATS):
        cell = compare(tmp_path / "sessions", f"wider g{ranks}", index, REPEATS, "--against", "git:HEAD~1",
                       "--gpus", str(ranks), "--pairs", "6", "--max-pairs", "6", project=project)
        flops = next((moved for moved in cell["work"]["change"]["moved"] if moved["part"] == "flops"), None)
        print(f"  g{ranks} session {index + 1}: {cell['work']['reading']}; speed {cell['verdict']}")
        named.append(flops is not None and "aten::convolution" in flops["text"])
    print(f"wider last stage, g{ranks}: its work change named from the first pair in {sum(named)} of {REPEATS} "
          "sessions")
    assert all(named)


def instructions_ab(tmp_path: Path, label: str, subject: str, change) -> dict:
    """One A/B of a commit making ``change`` against its parent with ``--count-instructions`` (1
    rank, 6 pairs): its paired cell, after printing its readings and the functions that moved."""
    project = throwaway_project(tmp_path / "project", [(subject, change)])
    cell = compare(tmp_path / "sessions", f"{label}, instructions", 0, 1, "--against", "git:HEAD~1", "--gpus", "1",
                   "--count-instructions", "--pairs", "6", "--max-pairs", "6", project=project)
    counted = cell["instructions"]
    print(f"{label}: {cell['work']['reading']}; {counted.get('reading') or counted['error']}; launches under "
          f"callgrind {counted['launches']}")
    for line in counted.get("moved", []):
        print(f"  moved most: {line}")
    return cell


def test_a_wider_layer_is_named_by_its_instructions_from_one_launch_a_side(tmp_path):
    """The same 5% model change, by ``--count-instructions``: one launch a side under callgrind."""
    counted = instructions_ab(tmp_path, "wider last stage, g1", WIDER_SUBJECT, widen_last_stage)["instructions"]
    assert counted["change"]["changed"] and counted["change"]["ratio"] > 1.02


def test_a_python_loop_in_the_step_is_the_same_work_and_other_instructions(tmp_path):
    """A change that moves no FLOP: each step runs a Python loop beside its work."""
    from bench_tests.projects import PYTHON_STEP_SUBJECT, python_step

    cell = instructions_ab(tmp_path, "python loop, g1", PYTHON_STEP_SUBJECT, python_step)
    assert cell["instructions"]["change"]["changed"] and not cell["work"]["change"]["moved"]


def bisect_six_commits(tmp_path: Path, subject: str, change, model: str, *flags: str, timeout: float) -> tuple:
    """dlscale-bisect over six commits after the good end, the third making ``change``: its result
    file, the culprit's commit and the wall time it took, after printing its output."""
    import subprocess
    import sys
    import time

    from bench_tests.projects import git, harmless
    from bench_tests.workloads import TINY_FLAGS

    project = throwaway_project(tmp_path / "project", [
        ("note one", harmless("one")), ("note two", harmless("two")), (subject, change),
        ("note three", harmless("three")), ("note four", harmless("four")), ("note five", harmless("five"))])
    culprit = git(project, "rev-parse", "HEAD~3")
    cell = f"ddp-synthetic-{model}-g1"
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).with_name("dlscale-bisect")), cell, "--good", "HEAD~6",
                           "--launcher", "mpirun", *TINY_FLAGS, *flags, "--seed", "3"], cwd=project,
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, DLSCALE_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(project)))
    spent = time.monotonic() - started
    print(done.stdout[-4000:])
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return json.loads((project / "results" / "bisect" / f"{cell}.json").read_text()), culprit, spent


def test_a_bisect_by_instructions_names_the_python_loop_the_work_cannot_see(tmp_path):
    """Six commits after the good end, the third adding a Python loop to every step (the same work):
    ``--by instructions`` places each midpoint by one launch under callgrind."""
    from bench_tests.projects import PYTHON_STEP_SUBJECT, python_step
    from bench_tests.workloads import TEST_MODEL

    result, culprit, spent = bisect_six_commits(tmp_path, PYTHON_STEP_SUBJECT, python_step, TEST_MODEL, "--by",
                                                "instructions", "--verify-pairs", "6", "--max-rounds", "6",
                                                timeout=3000)
    print(f"bisect by instructions over 6 commits: {len(result['steps'])} steps, {result['launches']} launches, "
          f"{spent:.0f} s of wall time; culprit {[c['point'][:10] for c in result['culprits']]} (the loop: "
          f"{culprit[:10]})")
    assert [(c["point"], c["verified"]) for c in result["culprits"]] == [(culprit, True)]
    assert result["culprits"][0]["evidence"].startswith("instructions: +")


def test_a_bisect_over_six_commits_names_the_wider_layer_by_its_work(tmp_path):
    """Six commits after the good end, the third widening ResNet44's last stage (about 5% more
    FLOPs, a speed change the pairs can hardly see on these VMs): asked where the work changed
    (``--by work``, not ``auto``'s what made it slower), one launch a point places each midpoint, the
    culprit is verified by its work, and its speed stated by 6 pairs."""
    from bench_tests.workloads import JUDGED_MODEL

    result, culprit, spent = bisect_six_commits(tmp_path, WIDER_SUBJECT, widen_last_stage, JUDGED_MODEL, "--by", "work",
                                                "--verify-pairs", "6", "--max-rounds", "8", timeout=1800)
    print(f"bisect over 6 commits: {len(result['steps'])} steps, {result['launches']} launches, {spent:.0f} s "
          f"of wall time; culprit {[c['point'][:10] for c in result['culprits']]} (the wider layer: {culprit[:10]})")
    assert [(c["point"], c["verified"]) for c in result["culprits"]] == [(culprit, True)]
    assert result["culprits"][0]["evidence"].startswith("work: +")


EVERY_FRAMEWORK = [("ddp", "native", 2, "mpirun"), ("torch_ps_sync", "synthetic", 3, "torchrun"),
                   ("tensorflow", "native-tfrecord", 2, "mpirun"), ("horovod_tf", "native", 2, "mpirun"),
                   ("mxnet", "native", 2, "mpirun"), ("tensorflow_ps_async", "synthetic", 3, "mpirun"),
                   ("torch_ps_async", "synthetic", 3, "torchrun"), ("mxnet_ps_sync", "synthetic", 3, "torchrun"),
                   ("mxnet_ps_async", "synthetic", 3, "torchrun")]
"""One counted cell of each framework (ResNet20, the launch tests' workload)."""


@pytest.mark.parametrize("framework, loader, ranks, launcher", EVERY_FRAMEWORK,
                         ids=[framework for framework, *_ in EVERY_FRAMEWORK])
def test_every_framework_counts_the_same_work_launch_after_launch_and_what_counting_costs(
        framework, loader, ranks, launcher, tmp_path, tiny_dataset, tiny_tfrecords):
    """An A/A of 2 pairs (4 counted launches) a framework, every count equal (its servers' too),
    and beside each counted launch a plain one (counting off), in random order, their wall times
    side by side."""
    from bench_tests.workloads import TEST_MODEL, TINY

    rng = random.Random(1)
    workload = TINY.replace(data_dir=str(tiny_dataset), tfrecord_dir=str(tiny_tfrecords))
    cell = Cell(framework=framework, loader=loader, model=TEST_MODEL, ranks=ranks)
    walls, digests, works = {True: [], False: []}, [], []
    for round_ in range(4):
        for count in rng.sample([True, False], 2):
            options = RankOptions(cores_per_rank=1, count_work=count) if ranks <= 2 else RankOptions(count_work=count)
            run = run_cell(cell, workload, LAUNCHERS.create(launcher), workdir=tmp_path / f"{cell.id}-{round_}-{count}",
                           options=options)
            assert run.ok, run.error
            walls[count].append(run.wall_s)
            if count:
                works.append(cell_work(run.records, run.server_records))
                digests.append(work_digest(works[-1]))
    first = works[0]
    report = {"digests": digests, "wall_counted_s": walls[True], "wall_plain_s": walls[False],
              "median_ratio": statistics.median(c / p for c, p in zip(walls[True], walls[False])),
              "counted_step_s": [work["cost_s"] for work in works],
              "flops": first.get("flops", {}).get("total"), "flops_by_phase": first.get("flops", {}).get("by_phase"),
              "collectives": first.get("collectives"), "servers": first.get("servers"), "data": first.get("data"),
              "not_counted": first.get("not_counted")}
    print(f"{cell.id}: {len(set(digests))} distinct work in 4 counted launches; wall counted/plain median "
          f"{report['median_ratio']:.3f} ({walls[True]} vs {walls[False]})", flush=True)
    output = Path(os.environ.get("DLSCALE_WORK_DIR", "results")) / f"counted_work_{cell.id}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=1))
    assert len(set(digests)) == 1, report


def widen_every_runtimes_last_stage(project: Path) -> None:
    """The CIFAR ResNet's last stage 64 -> 68 channels in the Keras and Gluon models."""
    keras_model = project / "harness" / "rank" / "tfkeras" / "models.py"
    keras_model.write_text(keras_model.read_text().replace("enumerate((16, 32, 64))", "enumerate((16, 32, 68))"))
    gluon_model = project / "harness" / "rank" / "gluon" / "models.py"
    gluon_model.write_text(gluon_model.read_text().replace("STAGE_CHANNELS = (16, 32, 64)",
                                                           "STAGE_CHANNELS = (16, 32, 68)"))


@pytest.mark.parametrize("framework, operator", [("tensorflow", "Conv2D"), ("mxnet", "Convolution")])
def test_a_wider_layer_in_tensorflow_and_mxnet_is_named_by_its_work_from_the_first_pair(framework, operator, tmp_path):
    project = throwaway_project(tmp_path / "project", [(WIDER_SUBJECT, widen_every_runtimes_last_stage)])
    named = []
    for index in range(REPEATS):
        cell = compare(tmp_path / "sessions", f"wider {framework}", index, REPEATS, "--against", "git:HEAD~1",
                       "--frameworks", framework, "--pairs", "6", "--max-pairs", "6", project=project)
        flops = next((moved for moved in cell["work"]["change"]["moved"] if moved["part"] == "flops"), None)
        print(f"  {framework} session {index + 1}: {cell['work']['reading']}; speed {cell['verdict']}")
        named.append(flops is not None and operator in flops["text"])
    assert all(named)


def smaller_ddp_buckets(project: Path) -> None:
    ddp = project / "harness" / "rank" / "frameworks" / "ddp.py"
    ddp.write_text(ddp.read_text().replace("bucket_cap_mb: int = 25", "bucket_cap_mb: int = 1"))


def test_a_communication_only_change_is_named_by_its_collectives_from_the_first_pair(tmp_path):
    """DDP's gradient buckets 25 -> 1 MB by commit on a 2-rank cell: the same FLOPs and operators
    but the calls, more all-reduces of the same bytes."""
    project = throwaway_project(tmp_path / "project", [("DDP's buckets 25 -> 1 MB", smaller_ddp_buckets)])
    cell = compare(tmp_path / "sessions", "smaller buckets g2", 0, 1, "--against", "git:HEAD~1", "--gpus", "2",
                   "--pairs", "6", "--max-pairs", "6", project=project)
    change = cell["work"]["change"]
    print(f"  smaller buckets: {cell['work']['reading']}; speed {cell['verdict']}")
    moved = [moved["part"] for moved in change["moved"]]
    assert "collectives" in moved and "flops" not in moved, change


def parameters_round_robin(project: Path) -> None:
    """torch's parameter servers take the parameters in turn, by index, instead of balancing their
    elements: the same gradients pushed, spread otherwise."""
    shards = project / "harness" / "rank" / "frameworks" / "ps_shards.py"
    shards.write_text(shards.read_text().replace("server = min(range(servers), key=lambda s: (load[s], s))",
                                                 "server = index % servers"))


def test_parameters_spread_otherwise_over_the_servers_are_named_by_each_servers_pushes_and_pulls(tmp_path):
    """A parameter-server change by commit on a cell with two servers and one worker: the worker
    pushes and pulls the same calls and bytes, the servers' shares move."""
    project = throwaway_project(tmp_path / "project", [("parameters to the servers in turn", parameters_round_robin)])
    cell = compare(tmp_path / "sessions", "servers in turn", 0, 1, "--against", "git:HEAD~1",
                   "--frameworks", "torch_ps_sync", "--gpus", "3", "--ps-servers", "2", "--pairs", "6",
                   "--max-pairs", "6", project=project)
    change = cell["work"]["change"]
    print(f"  servers in turn: {cell['work']['reading']}; speed {cell['verdict']}")
    moved = [moved["text"] for moved in change["moved"]]
    assert moved and all(" at server " in text for text in moved), change
    assert {"flops", "operators"} <= set(change["same"])
