"""harness.judging.confirmation: ``--confirm`` says ``system`` only on positive evidence (an exact
rebuild, an A/B that finds no software change, the baseline environment's own figure reproducing
the stored move), ``software`` where the A/B regressed, and otherwise ``unknown`` naming why; the
split in numbers. Without launching anything."""
import math

import pytest

from harness.judging.confirmation import (Rebuild, Setting, Split, conclude, figure_now, judged_now, plan_rebuild,
                                          quotient, rebuilt_code_missing, reproduces)
from harness.judging.kinds import PairedKind, VerdictKind
from harness.judging.paired import PairedVerdict
from harness.judging.stats import Estimate
from harness.judging.verdicts import Reference

PACKAGES = {"python": "3.11.7", "torch": "2.14.1", "numpy": "2.4.6", "dlscale": "0.1"}
CODE = {"harness": "c0de", "figures": "f1g5"}
STACK = {"python": "3.11.7", "torch": "2.14.1", "mpi": "mpirun (Open MPI) 4.1.4"}
LAYOUT = {"cpu": "AMD EPYC", "cores": 4, "nodes": 1, "ranks": 2, "device": "cpu", "threads_per_rank": 2,
          "cores_per_rank": 2, "processes_per_node": 2}
"""The fingerprint's hardware facts: the node, and how the ranks were laid out on it."""
RECORDED = Setting(commit="a" * 40, code=CODE, packages=PACKAGES, stack=STACK,
                   launch_environment={"OMP_PROC_BIND": "close"}, launcher="mpirun", layout=LAYOUT)
PROJECT = frozenset({"dlscale"})
BAND = Reference(value=100.0, lower=-0.1, upper=0.1, unit="img/s")
EXACT = Rebuild(commit="a" * 40, parts=("pkg:torch==2.14.1",))


def now(**changes) -> Setting:
    """The current setting: the recorded one with ``changes``, at another commit."""
    fields = dict(commit="b" * 40, code=CODE, packages=PACKAGES, stack=STACK,
                  launch_environment={"OMP_PROC_BIND": "close"}, launcher="mpirun", layout=LAYOUT)
    return Setting(**{**fields, **changes})


def verdict(kind: PairedKind, value: float, low: float, high: float) -> PairedVerdict:
    return PairedVerdict(kind=kind, ratio=Estimate(value=value, low=low, high=high, n_steps=8), p_value=0.008,
                         pairs=8, min_effect=0.03)


def ratio(value: float, low: float, high: float) -> Estimate:
    return Estimate(value=value, low=low, high=high)


# --- what can be rebuilt, exactly ----------------------------------------------------------------

def test_a_baseline_recorded_with_the_current_environment_is_rebuilt_exactly_by_nothing():
    rebuild = plan_rebuild(RECORDED, now(), project=PROJECT)
    assert rebuild.exact and rebuild.identical and rebuild.parts == () and rebuild.missing == ()


def test_packages_and_variables_that_differ_are_rebuilt_by_pins_and_env_parts():
    current = now(packages={**PACKAGES, "torch": "2.15.0", "dlscale": "0.2"},
                  launch_environment={"OMP_PROC_BIND": "spread", "NCCL_ALGO": "Ring"})
    rebuild = plan_rebuild(RECORDED, current, project=PROJECT)
    assert rebuild.parts == ("pkg:torch==2.14.1", "env:NCCL_ALGO", "env:OMP_PROC_BIND=close")
    assert rebuild.exact and not rebuild.identical  # the project's own version comes from the commit


def test_the_same_code_at_another_commit_is_the_current_environment():
    assert plan_rebuild(RECORDED, now(code=CODE)).identical
    assert not plan_rebuild(RECORDED, now(code={**CODE, "harness": "other"})).identical
    # a baseline without a code version: its commit, where the current code is that commit's
    old = Setting(commit="b" * 40, packages=PACKAGES, stack=STACK, launch_environment={}, launcher="mpirun")
    assert plan_rebuild(old, now(code=None, launch_environment={})).identical
    assert not plan_rebuild(old, now(code=None, launch_environment={}, committed=False)).identical


@pytest.mark.parametrize("recorded, current, named", [
    (RECORDED, now(stack={**STACK, "mpi": "mpirun (Open MPI) 4.1.6"}),
     "stack: mpi mpirun (Open MPI) 4.1.4 -> mpirun (Open MPI) 4.1.6 (the node's MPI, CUDA, NCCL and driver: an A/B "
     "cannot install them)"),
    (RECORDED, now(stack={**STACK, "cuda": "13.0", "driver": "580.1"}),
     "stack: cuda (none) -> 13.0, driver (none) -> 580.1"),
    (Setting(commit="a" * 40, code=CODE, packages=PACKAGES, launch_environment={}, launcher="mpirun"),
     now(launch_environment={}), "stack: the baseline records no stack facts (no fingerprint)"),
    (Setting(commit="a" * 40, code=CODE, stack=STACK, launch_environment={}, launcher="mpirun"),
     now(launch_environment={}), "packages: the torch runtime's package set was not kept beside the baselines"),
    (Setting(commit="a" * 40, code=CODE, stack=STACK, launch_environment={}, launcher="mpirun", runtime="tensorflow"),
     now(launch_environment={}, runtime="tensorflow"),
     "packages: the tensorflow runtime's package set was not kept beside the baselines"),
    (Setting(commit="a" * 40, code=CODE, stack=STACK, launch_environment={}, launcher="mpirun", runtime="mxnet",
             packages={"python": "3.11.7", "mxnet": "1.9.1", "numpy": "1.23.5"}),
     now(launch_environment={}, runtime="mxnet", packages={"python": "3.11.7", "mxnet": "1.9.1", "numpy": "1.23.4"}),
     "packages: the mxnet runtime's changed (numpy 1.23.5 -> 1.23.4), and only the torch runtime's package set can "
     "be rebuilt"),
    (RECORDED, now(packages={**PACKAGES, "python": "3.12.3"}),
     "packages: it was recorded with Python 3.11.7, this is Python 3.12.3: a package set cannot change the "
     "interpreter"),
    (RECORDED, now(packages={**PACKAGES, "scipy": "1.17.0"}),
     "packages: installed since, which an overlay cannot take away: scipy"),
    (RECORDED, now(code=None), None),  # the current code unknown: the commit stands for it
    (Setting(commit="a" * 40, packages=PACKAGES, stack=STACK, launch_environment={}, launcher="mpirun"),
     now(launch_environment={}), "code: the baseline records no version of its code"),
    (RECORDED, now(code={**CODE, "figures": "changed"}),
     "figures' code: the modules that compute the figures changed since the baseline, so its figure and today's are "
     "not computed alike"),
    (Setting(commit="a" * 40, code=CODE, packages=PACKAGES, stack=STACK, launcher="mpirun"), now(),
     "launch environment: the baseline records none"),
    (Setting(commit="a" * 40, code=CODE, packages=PACKAGES, stack=STACK, launcher="mpirun",
             launch_environment={"NCCL_IB_KEY": "***"}), now(launch_environment={}),
     "launch environment: NCCL_IB_KEY held a secret, not recorded, which cannot be set back"),
    (RECORDED, now(launcher="srun"), "launcher: the baseline was launched by mpirun, this session launches by srun"),
    (Setting(commit=None, code=CODE, packages=PACKAGES, stack=STACK, launch_environment={}, launcher="mpirun"),
     now(launch_environment={}), "commit: the baseline records no git commit"),
    (RECORDED, now(layout={**LAYOUT, "cores_per_rank": 1, "threads_per_rank": 1}),
     "layout: cores_per_rank 2 -> 1, threads_per_rank 2 -> 1 (the ranks are laid out otherwise than when the "
     "baseline was recorded)"),
    (RECORDED, now(layout={**LAYOUT, "nodes": 2, "processes_per_node": 1}),
     "layout: nodes 1 -> 2, processes_per_node 2 -> 1"),
    (RECORDED, now(layout=None), "layout: nodes 1 -> (none), processes_per_node 2 -> (none)"),
    (Setting(commit="a" * 40, code=CODE, packages=PACKAGES, stack=STACK, launch_environment={}, launcher="mpirun"),
     now(launch_environment={}), "layout: the baseline records no rank layout (no fingerprint)"),
    (RECORDED, now(layout={**LAYOUT, "cpu": "Intel Xeon", "cores": 8}), None),  # the node, which is the system's
])
def test_a_part_that_cannot_be_rebuilt_is_named(recorded, current, named):
    rebuild = plan_rebuild(recorded, current, project=PROJECT)
    if named is None:
        assert rebuild.exact
        return
    assert not rebuild.exact
    assert any(line.startswith(named) for line in rebuild.missing), rebuild.missing


def test_a_rebuild_on_half_the_cores_per_rank_is_not_exact_and_cannot_make_the_move_the_systems():
    """``--confirm --duet`` halves the cores per rank: the baseline's environment, rebuilt on half the
    cores, runs as slowly as the cell did, so an A/B ``same`` and the move reproduced would make the
    cell's shortfall the node's, which ``--system-changes pass`` then excuses. The layout is not the
    baseline's, so the cause stays ``unknown``, naming it."""
    halved = {**LAYOUT, "cores_per_rank": 1, "threads_per_rank": 1}
    rebuild = plan_rebuild(RECORDED, now(packages={**PACKAGES, "torch": "2.15.0"}, layout=halved), project=PROJECT)
    assert rebuild.parts == ("pkg:torch==2.14.1",) and not rebuild.exact
    assert rebuild.missing == ("layout: cores_per_rank 2 -> 1, threads_per_rank 2 -> 1 (the ranks are laid out "
                               "otherwise than when the baseline was recorded)",)
    same = verdict(PairedKind.SAME, 1.0, 0.98, 1.02)
    said = conclude(rebuild, Split.of(STORED, same.ratio, ratio(0.6, 0.58, 0.62), VerdictKind.FAIL), verdict=same)
    assert said.cause == "unknown" and "not rebuilt: layout: cores_per_rank 2 -> 1" in said.message
    # nothing else changed: no A/B to run, and the cell's own figure is still not the baseline's layout's
    unchanged = plan_rebuild(RECORDED, now(layout=halved), project=PROJECT)
    assert unchanged.identical and not unchanged.exact
    assert conclude(unchanged, Split.identical(STORED, VerdictKind.FAIL)).cause == "unknown"


def test_another_workload_cannot_be_rebuilt():
    rebuild = plan_rebuild(RECORDED, now(), workload_change="batch_size: 16 -> 32")
    assert rebuild.missing == ("workload: the baseline was measured with another configuration (batch_size: 16 -> 32)",)


def test_a_commit_does_not_rebuild_code_that_was_not_committed():
    assert rebuilt_code_missing(RECORDED, "c0de") is None
    assert rebuilt_code_missing(RECORDED, "other") == (
        f"code: commit {'a' * 10} does not rebuild the code the baseline was recorded with (it had changes that "
        "were not committed)")


# --- the figures ---------------------------------------------------------------------------------

def test_the_baseline_environments_figure_now_is_judged_against_the_stored_band():
    figures = [60.0, 61.0, 59.0, 60.5, 59.5, 60.0, 61.5, 58.5]  # the reference side's launches, baseline 100
    now_ratio = figure_now(figures, BAND.value)
    assert now_ratio.value == pytest.approx(0.60, abs=0.005) and now_ratio.high < 0.62
    assert judged_now(now_ratio, BAND, len(figures)) == VerdictKind.FAIL
    assert judged_now(figure_now([99.0, 101.0, 100.0, 98.0, 102.0, 100.5, 99.5, 100.0], 100.0), BAND, 8) == \
        VerdictKind.PASS
    assert judged_now(figure_now([60.0, 61.0], 100.0), BAND, 2) == VerdictKind.INCONCLUSIVE  # no interval yet


def test_the_stored_move_is_reproduced_only_in_its_own_direction():
    assert reproduces(ratio(0.6, 0.58, 0.62), VerdictKind.FAIL)
    assert not reproduces(ratio(0.6, 0.58, 0.62), VerdictKind.PASS)
    assert not reproduces(ratio(0.6, 0.58, 0.62), VerdictKind.INCONCLUSIVE)
    assert reproduces(ratio(1.5, 1.45, 1.55), VerdictKind.FASTER)
    assert not reproduces(ratio(1.5, 1.45, 1.55), VerdictKind.FAIL)


def test_the_system_part_is_the_stored_ratio_over_the_software_part():
    system = quotient(ratio(0.6, 0.57, 0.63), ratio(0.8, 0.78, 0.82))
    assert (system.value, system.low, system.high) == pytest.approx((0.75, 0.57 / 0.82, 0.63 / 0.78))
    assert math.isinf(quotient(ratio(0.6, 0.57, 0.63), Estimate(value=0.8, low=-math.inf, high=math.inf)).high)


# --- the cause -----------------------------------------------------------------------------------

STORED = ratio(0.60, 0.59, 0.61)  # the cell ran at 60% of its baseline: a fail


def test_an_ab_that_regressed_is_the_softwares_with_the_split_in_numbers():
    split = Split.of(STORED, ratio(0.80, 0.78, 0.82), ratio(0.75, 0.73, 0.77), VerdictKind.FAIL)
    said = conclude(EXACT, split, verdict=verdict(PairedKind.REGRESSED, 0.80, 0.78, 0.82), difference="1 commit(s): x")
    assert said.cause == "software"
    assert said.message.startswith("software: the current environment is slower than the baseline's on this node now "
                                   "(A/B regressed: current/reference 0.800 [0.780, 0.820]")  # the A/B's own words
    assert "split: software 0.800 [0.780, 0.820] (the A/B's current/reference), system 0.750 [0.720, 0.782] (the " \
           "stored ratio 0.600 [0.590, 0.610] over the software's)" in said.message
    assert said.message.endswith("; changed since the baseline: 1 commit(s): x")
    assert said.split.to_json()["system"]["value"] == pytest.approx(0.75)


def test_a_software_regression_is_said_even_where_a_part_could_not_be_rebuilt():
    rebuild = EXACT.with_missing("stack: mpi 4.1.4 -> 4.1.6")
    said = conclude(rebuild, Split.of(STORED, ratio(0.8, 0.78, 0.82)),
                    verdict=verdict(PairedKind.REGRESSED, 0.8, 0.78, 0.82))
    assert said.cause == "software" and "not rebuilt: stack: mpi 4.1.4 -> 4.1.6 (the A/B cannot speak for these)" \
        in said.message


def test_system_takes_an_exact_rebuild_an_ab_without_a_software_change_and_the_move_reproduced():
    same = verdict(PairedKind.SAME, 1.0, 0.98, 1.02)
    reproduced = Split.of(STORED, same.ratio, ratio(0.60, 0.58, 0.62), VerdictKind.FAIL)
    said = conclude(EXACT, reproduced, verdict=same)
    assert said.cause == "system"
    assert said.message.startswith("system: both environments run the same on this node now (A/B same: "
                                   "current/reference 1.000 [0.980, 1.020]")
    assert "and the baseline's own environment, rebuilt exactly, runs at 0.600 [0.580, 0.620] of the stored figure " \
           "(fail) on it" in said.message
    assert "system 0.600 [0.578, 0.622]" in said.message
    faster = verdict(PairedKind.IMPROVED, 1.2, 1.15, 1.25)  # the software gained, the node lost more
    assert conclude(EXACT, Split.of(STORED, faster.ratio, ratio(0.5, 0.48, 0.52), VerdictKind.FAIL),
                    verdict=faster).cause == "system"


def test_an_ab_without_a_change_is_not_the_systems_where_a_part_was_not_rebuilt():
    """The issue's case: commit and packages as recorded, the stack changed: no 'node changed'."""
    same = verdict(PairedKind.SAME, 1.0, 0.98, 1.02)
    rebuild = EXACT.with_missing("stack: mpi 4.1.4 -> 4.1.6")
    said = conclude(rebuild, Split.of(STORED, same.ratio, ratio(0.6, 0.58, 0.62), VerdictKind.FAIL), verdict=same)
    assert said.cause == "unknown"
    assert "the baseline's environment was not rebuilt exactly" in said.message
    assert "not rebuilt: stack: mpi 4.1.4 -> 4.1.6" in said.message


def test_a_stored_inconclusive_the_baseline_environment_does_not_reproduce_is_unknown():
    """A stored ``inconclusive`` then an A/B ``same`` is no slower node: nothing measured one."""
    same = verdict(PairedKind.SAME, 1.0, 0.98, 1.02)
    stored = ratio(0.92, 0.88, 0.96)
    said = conclude(EXACT, Split.of(stored, same.ratio, ratio(0.95, 0.91, 0.99), VerdictKind.INCONCLUSIVE),
                    verdict=same)
    assert said.cause == "unknown"
    assert "but the baseline's own environment, rebuilt, runs at 0.950 [0.910, 0.990] of the stored figure " \
           "(inconclusive) on it: the stored move is not reproduced" in said.message


def test_an_inconclusive_or_failed_ab_is_unknown():
    unclear = verdict(PairedKind.INCONCLUSIVE, 0.95, 0.85, 1.05)
    assert conclude(EXACT, Split.of(STORED, unclear.ratio), verdict=unclear).message.startswith(
        "unknown: the A/B against the baseline's environment is inconclusive (A/B inconclusive: ")
    failed = conclude(EXACT, Split.of(STORED), error="3 of 4 pairs failed")
    assert failed.cause == "unknown" and failed.message == (
        "unknown: the A/B against the baseline's environment failed: 3 of 4 pairs failed; split: stored ratio "
        "0.600 [0.590, 0.610], software and system not measured")


def test_a_baseline_whose_environment_cannot_be_built_is_unknown_naming_the_part():
    rebuild = Rebuild(commit="a" * 40, parts=("pkg:torch==2.14.1",)).with_missing(
        "build: --against pkg: torch==2.14.1 cannot be built: no such version")
    said = conclude(rebuild, Split.of(STORED))
    assert said.cause == "unknown" and said.message.startswith(
        "unknown: the baseline's environment cannot be rebuilt; not rebuilt: build: --against pkg: torch==2.14.1 "
        "cannot be built")


def test_the_baselines_own_environment_needs_no_ab_but_its_figure_now_must_reproduce_the_move():
    identical = Rebuild(commit="a" * 40, identical=True)
    said = conclude(identical, Split.identical(STORED, VerdictKind.FAIL))
    assert said.cause == "system" and said.message == (
        f"system: the baseline was recorded with this very environment (commit {'a' * 10}, the same code, packages, "
        "stack and launch environment), and it runs at 0.600 [0.590, 0.610] of the stored figure (fail) on this node "
        "now; split: software 1.000 (identical environments), system 0.600 [0.590, 0.610] (the stored ratio 0.600 "
        "[0.590, 0.610] over the software's)")
    unclear = conclude(identical, Split.identical(ratio(0.92, 0.88, 0.96), VerdictKind.INCONCLUSIVE))
    assert unclear.cause == "unknown" and "the stored move is not reproduced" in unclear.message


def test_where_only_what_cannot_be_rebuilt_differs_nothing_is_launched_and_it_is_unknown():
    """The issue's case without an A/B: commit and packages match, the stack changed."""
    rebuild = plan_rebuild(RECORDED, now(commit="a" * 40, stack={**STACK, "mpi": "mpirun (Open MPI) 4.1.6"}),
                           project=PROJECT)
    assert rebuild.identical and not rebuild.exact
    said = conclude(rebuild, Split.of(STORED))
    assert said.cause == "unknown" and said.message.startswith(
        "unknown: what can be rebuilt of the baseline's environment is the current one, so no A/B can show a software "
        "change; not rebuilt: stack: mpi mpirun (Open MPI) 4.1.4 -> mpirun (Open MPI) 4.1.6")


def test_other_work_than_the_baselines_is_the_softwares_before_any_rebuild():
    from harness.judging.confirmation import software_by_work
    from harness.judging.work import compare_work

    def work(convolution: int, bytes_read: int = 100) -> dict:
        return {"flops": {"total": convolution, "by_operator": {"aten::convolution": convolution}},
                "data": {"images": 8, "bytes_read": bytes_read}, "not_counted": {}}

    wider = compare_work(work(1000), work(1060)).to_json()
    said = software_by_work(wider, same_workload=True)
    assert said.startswith("software: the cell does other work per step than at its baseline, counted with the "
                           "same packages and workload (work: +6.0% FLOPs (aten::convolution)")
    assert software_by_work(wider, same_workload=False) is None  # another workload does other work
    assert software_by_work(compare_work(work(1000), work(1000)).to_json(), same_workload=True) is None
    assert software_by_work(compare_work(work(1000), work(1000, 120)).to_json(), same_workload=True) is None
    assert software_by_work(None, same_workload=True) is None


def test_only_the_counts_that_tell_the_software_confirm_it_by_work():
    """A GPU's kernel time is timed (a slower node moves it) and the kernels a library picks depend
    on the GPU: neither says the software changed; a move of memory does."""
    from harness.judging.confirmation import software_by_work
    from harness.judging.work import compare_work

    def work(*, kernels=500, kernel_time_s=0.1, memory=800) -> dict:
        return {"flops": {"total": 1000, "by_operator": {"aten::convolution": 1000}}, "memory": {"step_peak_bytes": memory},
                "gpu": {"kernels": kernels}, "timed": {"gpu_kernel_time_s": kernel_time_s}, "not_counted": {}}

    slower = compare_work(work(), work(kernel_time_s=0.2)).to_json()
    assert software_by_work(slower, same_workload=True) is None
    other_kernels = compare_work(work(), work(kernels=520)).to_json()
    assert software_by_work(other_kernels, same_workload=True) is None
    more_memory = compare_work(work(), work(memory=900)).to_json()
    assert software_by_work(more_memory, same_workload=True).startswith("software: ")
