"""What ``--confirm`` concludes of a cell judged against its stored baseline: whether the software or
the system (the node) moved its figure, and by how much, from what was measured and nothing else.

A stored figure from another day moved for one of two reasons: the software changed, or the node
did. An A/B of the current environment against the baseline's own, rebuilt, on this node now
(:mod:`harness.session.paired`) measures the software's part: its ratio, current/reference. The rest
of the stored move (the stored ratio over the A/B's) is the system's only where

- the baseline's environment was rebuilt exactly (:func:`plan_rebuild`): its commit and the code
  that commit exports, the full package set of the interpreter its ranks ran in, the stack facts no
  package set carries (:data:`SYSTEM_FACTS`), its launch environment and launcher, its workload, its
  rank layout (:data:`LAYOUT_FACTS`), and the code that computes the figures; a part that cannot be
  rebuilt explains the move as well as the node could;
- and the rebuilt environment's own figure on this node now reproduces the stored move
  (:func:`reproduces`): judged against the stored band as the cell's figure was, it falls short of it
  (or beyond it) as the cell's did.

So the causes are ``software`` (the A/B says ``regressed``), ``system`` (an exact rebuild, the A/B
``same`` or ``improved``, and the move reproduced) and ``unknown`` (anything else, with the reason).
Pure functions of data: :meth:`harness.session.suite.Suite.confirm` gathers the facts and launches.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

from harness.judging.kinds import PairedKind, VerdictKind
from harness.judging.paired import PairedVerdict, median_interval
from harness.judging.stats import Estimate
from harness.judging.verdicts import Reference, band_verdict
from harness.machine.environment import MASKED
from harness.machine.references import ReferenceError, pins_to_rebuild

SOFTWARE, SYSTEM, UNKNOWN = "software", "system", "unknown"
SYSTEM_FACTS = ("mpi", "cuda", "nccl", "driver")
"""The fingerprint's stack facts that no package set carries: the node's MPI library, CUDA, NCCL and
GPU driver, which an A/B cannot install for its reference."""
LAYOUT_FACTS = ("nodes", "processes_per_node", "cores_per_rank", "threads_per_rank")
"""The fingerprint's hardware facts that say how the ranks were laid out on the nodes: a figure
measured on half the cores per rank moves for that alone, so a rebuild laid out otherwise cannot
show that the node moved the stored one."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Setting:
    """What a cell's figure was measured with, as far as rebuilding it goes: as a baseline entry
    recorded it, or as this session runs it. A field None: not recorded."""

    commit: str | None
    committed: bool = True
    """The code is its commit's: no change to ``harness/`` that git has not recorded."""
    code: Mapping[str, str] | None = None
    """``harness``: the hash of the package's code; ``figures``: of the modules that compute the
    figures (:func:`harness.machine.provenance.code_version`)."""
    runtime: str = "torch"
    packages: Mapping[str, str] | None = None
    """Every distribution of the interpreter the cell's ranks ran in, with ``python``."""
    stack: Mapping[str, Any] | None = None
    """The fingerprint's stack facts (:mod:`harness.judging.fingerprint`)."""
    launch_environment: Mapping[str, str] | None = None
    """The variables the ranks ran with (:func:`harness.machine.environment.rank_settings`)."""
    launcher: str | None = None
    layout: Mapping[str, Any] | None = None
    """The fingerprint's hardware facts, of which the rank layout (:data:`LAYOUT_FACTS`) is compared:
    the rest is the node, which a rebuild leaves as it is."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Rebuild:
    """How the baseline's environment is rebuilt over the current one, and what of it cannot be."""

    commit: str | None
    parts: tuple[str, ...] = ()
    """The ``--against`` parts beyond the commit: ``pkg:`` pins and ``env:`` variables."""
    missing: tuple[str, ...] = ()
    """Each part that cannot be rebuilt, in words: the A/B cannot speak for it."""
    identical: bool = False
    """What can be rebuilt is the current environment itself: no A/B can show a software change."""

    @property
    def exact(self) -> bool:
        return self.commit is not None and not self.missing

    def with_missing(self, *missing: str) -> Rebuild:
        return dataclasses.replace(self, missing=self.missing + tuple(m for m in missing if m))


def plan_rebuild(recorded: Setting, current: Setting, *, project: frozenset[str] = frozenset(),
                 workload_change: str | None = None) -> Rebuild:
    """The parts that rebuild ``recorded`` over ``current`` and what cannot be rebuilt. The torch
    runtime's packages are pinned back (an overlay: a distribution installed since cannot be taken
    away); another runtime's must be as recorded, for only torch's are rebuilt; ``project``: this
    project's own distributions, whose code comes from the commit."""
    parts: list[str] = []
    missing = [_code_missing(recorded, current), *_stack_missing(recorded, current),
               _layout_missing(recorded, current)]
    if recorded.commit is None:
        missing.append("commit: the baseline records no git commit")
    pins, said = _packages(recorded, current, project)
    parts += pins
    missing += said
    variables, said = _launch(recorded, current)
    parts += variables
    missing += said
    if workload_change:
        missing.append(f"workload: the baseline was measured with another configuration ({workload_change})")
    same_code = (recorded.code["harness"] == current.code["harness"]) if recorded.code and current.code else \
        (recorded.commit == current.commit and current.committed)
    return Rebuild(commit=recorded.commit, parts=tuple(parts), missing=tuple(m for m in missing if m),
                   identical=not parts and same_code)


def rebuilt_code_missing(recorded: Setting, rebuilt_code: str) -> str | None:
    """What is wrong with the code the commit exported (``rebuilt_code``, its hash), or None: it must
    be the code the baseline was recorded with, which it is not where that had uncommitted changes."""
    if not recorded.code or recorded.code.get("harness") == rebuilt_code:
        return None
    return (f"code: commit {str(recorded.commit)[:10]} does not rebuild the code the baseline was recorded with "
            "(it had changes that were not committed)")


def _code_missing(recorded: Setting, current: Setting) -> str | None:
    if not recorded.code:
        return "code: the baseline records no version of its code"
    if current.code and recorded.code.get("figures") != current.code.get("figures"):
        return ("figures' code: the modules that compute the figures changed since the baseline, so its figure "
                "and today's are not computed alike")
    return None


def _stack_missing(recorded: Setting, current: Setting) -> list[str]:
    if recorded.stack is None:
        return ["stack: the baseline records no stack facts (no fingerprint)"]
    old, new = recorded.stack, current.stack or {}
    changed = [f"{fact} {old.get(fact, '(none)')} -> {new.get(fact, '(none)')}" for fact in SYSTEM_FACTS
               if old.get(fact) != new.get(fact)]
    if not changed:
        return []
    return [f"stack: {', '.join(changed)} (the node's MPI, CUDA, NCCL and driver: an A/B cannot install them)"]


def _layout_missing(recorded: Setting, current: Setting) -> str | None:
    if recorded.layout is None:
        return "layout: the baseline records no rank layout (no fingerprint)"
    old, new = recorded.layout, current.layout or {}
    changed = [f"{fact} {old.get(fact, '(none)')} -> {new.get(fact, '(none)')}" for fact in LAYOUT_FACTS
               if old.get(fact) != new.get(fact)]
    if not changed:
        return None
    return f"layout: {', '.join(changed)} (the ranks are laid out otherwise than when the baseline was recorded)"


def _packages(recorded: Setting, current: Setting, project: frozenset[str]) -> tuple[list[str], list[str]]:
    runtime = recorded.runtime
    if recorded.packages is None:
        return [], [f"packages: the {runtime} runtime's package set was not kept beside the baselines"]
    if current.packages is None:
        return [], [f"packages: the {runtime} runtime's interpreter does not say what it holds"]
    if runtime != "torch":
        changed = _changed(recorded.packages, current.packages)
        return [], [f"packages: the {runtime} runtime's changed ({changed}), and only the torch runtime's "
                    "package set can be rebuilt"] if changed else []
    try:
        pins = pins_to_rebuild(recorded.packages, current.packages, project)
    except ReferenceError as error:
        return [], [f"packages: {error}"]
    since = sorted(set(current.packages) - set(recorded.packages) - project - {"python"})
    return pins, [f"packages: installed since, which an overlay cannot take away: {_listed(since)}"] if since else []


def _launch(recorded: Setting, current: Setting) -> tuple[list[str], list[str]]:
    missing = []
    if recorded.launcher and current.launcher and recorded.launcher != current.launcher:
        missing.append(f"launcher: the baseline was launched by {recorded.launcher}, this session launches by "
                       f"{current.launcher}")
    if recorded.launch_environment is None:
        return [], missing + ["launch environment: the baseline records none"]
    old, new = recorded.launch_environment, current.launch_environment or {}
    parts, secret = [], []
    for name in sorted(set(old) | set(new)):
        if old.get(name) == new.get(name):
            continue
        if old.get(name) == MASKED:
            secret.append(name)
        else:
            parts.append(f"env:{name}" if name not in old else f"env:{name}={old[name]}")
    if secret:
        missing.append(f"launch environment: {_listed(secret)} held a secret, not recorded, which cannot be set back")
    return parts, missing


def _changed(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    return _listed([f"{name} {old.get(name, '(none)')} -> {new.get(name, '(none)')}"
                    for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)])


def _listed(items: Sequence[str], most: int = 4) -> str:
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")


# --- what the figures say ------------------------------------------------------------------------

def scaled(estimate: Estimate, factor: float) -> Estimate:
    """An estimate times a positive ``factor``, its interval too: a figure over the baseline's is
    ``scaled(figure, 1 / baseline)``."""
    return dataclasses.replace(estimate, value=estimate.value * factor, low=estimate.low * factor,
                               high=estimate.high * factor)


def figure_now(figures: Sequence[float], baseline: float) -> Estimate:
    """The baseline environment's figure on this node now, over the stored one: the Hodges-Lehmann
    median of the launches' ratios with its signed-rank 95% interval (the A/B's reference side)."""
    return median_interval([math.log(figure / baseline) for figure in figures])


def judged_now(ratio: Estimate, band: Reference, launches: int) -> VerdictKind:
    """The baseline environment's figure now, judged against the stored band as the cell's was."""
    return band_verdict(scaled(ratio, band.value), band, launches).kind


def reproduces(stored: Estimate, now: VerdictKind) -> bool:
    """Whether the baseline environment's figure now (judged ``now``) moved as the cell's did: below
    the band where the cell's figure lies below the stored one, beyond it where above."""
    return now == (VerdictKind.FAIL if stored.value < 1 else VerdictKind.FASTER)


def quotient(stored: Estimate, software: Estimate) -> Estimate:
    """The system's part: the stored ratio over the A/B's, its interval from the two intervals' far
    ends (neither is known better than that); none where either has none."""
    value = stored.value / software.value
    bounded = all(math.isfinite(end) and end > 0 for end in (stored.low, stored.high, software.low, software.high))
    if not bounded:
        return Estimate(value=value, low=-math.inf, high=math.inf)
    return Estimate(value=value, low=stored.low / software.high, high=stored.high / software.low)


# --- the conclusion ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Split:
    """The stored move in numbers: ``stored`` = the cell's figure over the baseline's; ``software``
    = the A/B's current/reference (exactly 1 where the environments are identical); ``system`` =
    stored over software; ``now`` = the baseline environment's figure on this node now over the
    stored one, and ``now_kind`` how the stored band judges it; ``not_now`` why the A/B's launches
    do not give that figure, where they do not."""

    stored: Estimate
    software: Estimate | None = None
    system: Estimate | None = None
    now: Estimate | None = None
    now_kind: VerdictKind | None = None
    not_now: str | None = None

    @classmethod
    def of(cls, stored: Estimate, software: Estimate | None = None, now: Estimate | None = None,
           now_kind: VerdictKind | None = None, not_now: str | None = None) -> Split:
        """The split of ``stored`` given the A/B's ratio (``software``; None where no A/B was judged)."""
        return cls(stored=stored, software=software, system=quotient(stored, software) if software else None,
                   now=now, now_kind=now_kind, not_now=not_now)

    @classmethod
    def identical(cls, stored: Estimate, now_kind: VerdictKind) -> Split:
        """Where the baseline's environment is the current one: no software part, the cell's own figure
        the baseline environment's now."""
        return cls.of(stored, Estimate(value=1.0, low=1.0, high=1.0), now=stored, now_kind=now_kind)

    def text(self, settled: bool = True) -> str:
        """The split in words; where the cause is not ``settled`` the stored ratio over the
        software's is not called the system's."""
        if self.software is None:
            return f"split: stored ratio {self.stored.text(3)}, software and system not measured"
        which = "identical environments" if self.software.low == self.software.high == 1 else \
            "the A/B's current/reference"
        rest = "system" if settled else "the rest, not shown to be the system's,"
        return (f"split: software {self.software.text(3)} ({which}), {rest} {self.system.text(3)} (the stored "
                f"ratio {self.stored.text(3)} over the software's)")

    def to_json(self) -> dict:
        def estimate(e: Estimate | None) -> dict | None:
            return e.to_json() if e else None
        return {"stored": estimate(self.stored), "software": estimate(self.software), "system": estimate(self.system),
                "baseline_environment_now": estimate(self.now),
                "baseline_environment_now_verdict": str(self.now_kind) if self.now_kind else None,
                "baseline_environment_not_now": self.not_now}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Conclusion:
    cause: str
    """:data:`SOFTWARE`, :data:`SYSTEM` or :data:`UNKNOWN`."""
    message: str
    split: Split


def conclude(rebuild: Rebuild, split: Split, *, verdict: PairedVerdict | None = None, error: str | None = None,
             difference: str = "") -> Conclusion:
    """The cause, from the rebuild, the A/B's ``verdict`` (None where none ran: ``error`` says why,
    or the environments are identical) and the baseline environment's figure now (``split.now``; a
    reason in ``split.not_now`` where the A/B's launches cannot give it, which leaves no ``system``)."""
    not_rebuilt = f"not rebuilt: {'; '.join(rebuild.missing)}" if rebuild.missing else ""
    changed = f"; changed since the baseline: {difference}" if difference else ""
    if error:
        return Conclusion(cause=UNKNOWN, split=split, message=_joined(
            f"unknown: the A/B against the baseline's environment failed: {error}", not_rebuilt, split.text(False)))
    if verdict is None and not rebuild.identical:
        return Conclusion(cause=UNKNOWN, split=split, message=_joined(
            "unknown: the baseline's environment cannot be rebuilt", not_rebuilt, split.text(False)))
    now = f"{split.now.text(3)} of the stored figure ({split.now_kind})" if split.now else "not measured"
    if verdict is None:  # identical: the cell's own figure is the baseline environment's now
        if not rebuild.exact:
            return Conclusion(cause=UNKNOWN, split=split, message=_joined(
                "unknown: what can be rebuilt of the baseline's environment is the current one, so no A/B can "
                "show a software change", not_rebuilt, split.text(False)))
        if split.now_kind is not None and reproduces(split.stored, split.now_kind):
            return Conclusion(cause=SYSTEM, split=split, message=_joined(
                f"system: the baseline was recorded with this very environment (commit {str(rebuild.commit)[:10]}, "
                f"the same code, packages, stack and launch environment), and it runs at {now} on this node now",
                split.text()))
        return Conclusion(cause=UNKNOWN, split=split, message=_joined(
            f"unknown: the baseline was recorded with this very environment, but it runs at {now} on this node "
            "now: the stored move is not reproduced", split.text(False)))
    measured = f"A/B {verdict.kind}: {verdict.message}"
    if verdict.kind == PairedKind.REGRESSED:
        return Conclusion(cause=SOFTWARE, split=split, message=_joined(
            f"software: the current environment is slower than the baseline's on this node now ({measured})",
            split.text(), not_rebuilt and f"{not_rebuilt} (the A/B cannot speak for these)") + changed)
    if verdict.kind == PairedKind.INCONCLUSIVE:
        return Conclusion(cause=UNKNOWN, split=split, message=_joined(
            f"unknown: the A/B against the baseline's environment is inconclusive ({measured})", not_rebuilt,
            split.text(False)) + changed)
    runs = "both environments run the same" if verdict.kind == PairedKind.SAME else \
        "the current environment runs faster than the baseline's"
    if not rebuild.exact:
        return Conclusion(cause=UNKNOWN, split=split, message=_joined(
            f"unknown: {runs} on this node now ({measured}), but the baseline's environment was not rebuilt "
            "exactly, and what was not rebuilt could have moved the stored figure as well as the node",
            not_rebuilt, split.not_now, split.text(False)) + changed)
    if split.not_now:
        return Conclusion(cause=UNKNOWN, split=split, message=_joined(
            f"unknown: {runs} on this node now ({measured}), but the baseline's own environment's figure on it "
            f"was not measured: {split.not_now}", split.text(False)) + changed)
    if split.now_kind is None or not reproduces(split.stored, split.now_kind):
        return Conclusion(cause=UNKNOWN, split=split, message=_joined(
            f"unknown: {runs} on this node now ({measured}), but the baseline's own environment, rebuilt, runs "
            f"at {now} on it: the stored move is not reproduced", split.text(False)) + changed)
    return Conclusion(cause=SYSTEM, split=split, message=_joined(
        f"system: {runs} on this node now ({measured}), and the baseline's own environment, rebuilt exactly, "
        f"runs at {now} on it", split.text()) + changed)


def _joined(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def software_by_work(change: Mapping | None, same_workload: bool) -> str | None:
    """The cause a cell's counted work already gives, before any rebuild: where the step moved a count
    that tells the software (harness.rank.work.SOFTWARE_PARTS: operators, FLOPs, collectives,
    memory) from its baseline's, counted with the same packages and the same workload (``change``:
    harness.judging.work.against_baseline's, as JSON), the software changed. None where the work does
    not say: the same work, only the data or the GPU's kernels moved (the kernels a library picks
    depend on the GPU), only a timed figure moved (never work), or nothing was compared."""
    from harness.rank.work import SOFTWARE_PARTS

    if not change or not same_workload or not change.get("changed"):
        return None
    moved = [moved for moved in change["moved"] if moved["part"] in SOFTWARE_PARTS]
    if not moved:
        return None
    return (f"software: the cell does other work per step than at its baseline, counted with the same packages and "
            f"workload ({change['text']}): no rebuild needed to tell")

