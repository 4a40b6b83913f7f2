"""How a cell's measurement becomes its verdicts: the one policy the suite and its self-test run.

Pure functions of data: a cell's evidence (its throughput and efficiency intervals, fingerprint,
machine yardstick and wait for a CPU) and its baseline entry in, verdicts out. Nothing here
launches a process, reads a file or imports a framework, so the order of the verdicts is tested
without launching anything (``bench_tests/unit/test_judging.py``).

The order, first match wins for the cell as a whole:

1. ``no-baseline``: the baseline file has no entry for the cell;
2. ``stale``: the entry was measured with another workload, on other hardware or with other huge
   pages (the fingerprint names the fact); another software stack is *not* stale: it is judged,
   and named;
3. ``machine-differs``: the machine yardstick ran beyond ``1 +- same_machine_drift`` (a system's tunable) of the
   baseline's: another machine, not a drift;
4. ``pass``, ``fail``, ``inconclusive``, ``faster`` for throughput (and efficiency): a CPU cell's
   throughput is judged as measured and, where the yardstick moved beyond its own launch-to-launch
   noise, also normalised by it, and only a verdict the two readings agree on stands (:func:`agreed`);
5. a ``fail`` measured while work outside the cell took its cores becomes ``inconclusive``; a
   wait the cell's own processes caused does not (:func:`harness.judging.contention.distrust`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from harness.config.cells import measured_config, scaling_cell
from harness.judging.breakdown import CellBreakdown, attribute_regression
from harness.judging.contention import beyond_contention, distrust
from harness.judging.fingerprint import stack_changes, stale_differences, stale_words
from harness.judging.kinds import MOST_SERIOUS_FIRST, VerdictKind
from harness.judging.stats import BandVerdict, Estimate, needs_more_samples, verdict
from harness.judging.tunables import DEFAULT_TUNABLES, Tunables
from harness.judging.yardstick import (Yardstick, another_machine, beyond_noise, launch_noise, normalise_estimate,
                                       speed_ratio)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Reference:
    """A reference value with a relative band, in the spirit of ReFrame's references."""

    value: float
    lower: float
    """Relative lower edge, e.g. -0.1: fail below 0.9 x value."""
    upper: float | None
    """Relative upper edge: above it the verdict is ``faster`` (an improvement to record)."""
    unit: str
    defaulted: bool = False
    """True when the file gave no band and a default stands in."""
    repeats: int | None = None
    """How many measurements the band was derived from (``--update-baselines --cell-repeats``): it is
    then the prediction interval of one more launch, and narrows for a measurement pooled from
    several (:meth:`for_launches`). ``None``: a default or hand-written band, taken as it is."""

    def edge_below(self, launches: int = 1) -> float:
        """The value below which a measurement pooled from ``launches`` launches fails."""
        return self.value * (1 + self.for_launches(launches).lower)

    def for_launches(self, launches: int) -> "Reference":
        """The band a measurement pooled from ``launches`` launches is judged against.

        Launches of one cell differ by more than a launch's own interval says (on this project's CI
        machine a cv of 3-5% between launches against +-0.7% within one): each process gets its own
        memory layout and its own share of the host. The band from ``n`` repeats is
        ``t * s * sqrt(1 + 1/n)`` for one launch; the mean of ``k`` launches varies as ``s / sqrt(k)``,
        so its band is ``t * s * sqrt(1/k + 1/n)``: the same band scaled by
        ``sqrt((1/k + 1/n) / (1 + 1/n))``."""
        if self.repeats is None or self.repeats < 2 or launches <= 1:
            return self
        scale = math.sqrt((1 / launches + 1 / self.repeats) / (1 + 1 / self.repeats))
        return dataclasses.replace(self, lower=self.lower * scale,
                                   upper=None if self.upper is None else self.upper * scale)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    kind: VerdictKind
    message: str
    metric: str | None = None
    """The metric it judges (``throughput``, ``efficiency``, ``accuracy``); None for a verdict on the
    cell as a whole (``no-baseline``, ``stale``, ``machine-differs``). ``--system-changes pass`` excuses
    a throughput fail that ``--confirm`` found the node's, and never an efficiency fail: the ratio of
    two throughputs of one session cancels the node's speed."""

    @property
    def failed(self) -> bool:
        return self.kind == VerdictKind.FAIL


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """What a cell's pooled launches measured, as judging needs it."""

    cell_id: str
    config_hash: str
    config: Mapping
    """The workload the cell ran with (named in a ``stale`` verdict when it differs)."""
    throughput: Estimate
    efficiency: Estimate | None = None
    efficiency_source: str | None = None
    """"measured", "baseline" or "by definition" (the reference cell itself, not judged)."""
    fingerprint: Mapping | None = None
    yardstick: Yardstick | None = None
    """``None`` for GPU cells: a CPU workload says nothing about a GPU's speed."""
    cpu_wait_share: float | None = None
    outside_share: float | None = None
    """Share of the ranks' own cores' time work outside the cell took (:mod:`harness.rank.contention`)."""
    outside_stall: float | None = None
    """The most of the window that outside work can have stood the cell still (the same module)."""
    breakdown: CellBreakdown | None = None
    launches: int = 1
    """How many launches the figures pool (contended ones left out)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Judgement:
    verdicts: list[Verdict]
    machine_speed: float | None = None
    """The machine's speed relative to the baseline's, by the yardstick, when it was used."""
    stack_changes: list[str] = dataclasses.field(default_factory=list)


def judge(measured: Estimate, reference: Reference | None, *, metric: str, launches: int = 1) -> Verdict:
    """Judge a measured interval, pooled from ``launches`` launches, against its reference band as
    measured (higher is better)."""
    if reference is None:
        return Verdict(kind=VerdictKind.NO_BASELINE, message=f"no {metric} baseline", metric=metric)
    result = band_verdict(measured, reference, launches)
    return Verdict(kind=result.kind, message=f"{metric} {measured.value / reference.value - 1:+.1%} against "
                                             f"{_band(reference, launches)}: {result.message}{_defaulted(reference)}",
                   metric=metric)


def band_verdict(measured: Estimate, reference: Reference, launches: int = 1) -> BandVerdict:
    """The interval against the band for ``launches`` launches (:meth:`Reference.for_launches`). A
    pass whose value lies below the edge the band would have after one more launch is not settled:
    it is ``inconclusive``, and the cell is launched again while its budget allows, so that a
    regression smaller than the one-launch band still fails once enough launches pin it down."""
    band = reference.for_launches(launches)
    result = verdict(measured, band.value, band.lower, band.upper)
    if result.kind == VerdictKind.PASS and reference.repeats:
        edge = reference.edge_below(launches + 1)
        if measured.value < edge:
            return BandVerdict(kind=VerdictKind.INCONCLUSIVE, message=(
                f"{result.message}, but below the edge {edge:.4g} of the band for {launches + 1} launches: "
                "one more launch could make it a fail"))
    return result


def judge_accuracy(final: float, entry: Mapping | None, reference: Reference | None, *, config_hash: str) -> Verdict:
    """An accuracy cell's final validation accuracy against its baseline (no interval: one run)."""
    if entry is not None and entry.get("config_hash") not in (None, config_hash):
        return Verdict(kind=VerdictKind.STALE, message="baseline measured with other accuracy settings")
    return judge(Estimate(value=final, low=final, high=final), reference, metric="accuracy")


def agreed(as_measured: VerdictKind, normalised: VerdictKind) -> VerdictKind:
    """The verdict two readings of one throughput support together.

    The yardstick corrects a machine that changed speed, but on a shared node it also moves by
    itself from launch to launch (by -22%..+20% within an hour here, while the throughput moved by
    -12%..+5%: docs/verdicts.md, "Machine yardstick"). So a normalised fail on a machine the yardstick says
    got faster, or a normalised pass of a drop the yardstick says the machine explains, is no
    verdict on its own: only a kind both readings give stands; pass and faster together are a pass;
    anything else is inconclusive, and the cell is measured again."""
    if as_measured == normalised:
        return as_measured
    if {as_measured, normalised} <= {VerdictKind.PASS, VerdictKind.FASTER}:
        return VerdictKind.PASS
    return VerdictKind.INCONCLUSIVE


def judge_throughput(measured: Estimate, reference: Reference | None, *, machine_speed: float | None = None,
                     machine_drift: float = 0.0, raw_because: str = "", launches: int = 1) -> Verdict:
    """Judge a throughput interval against its band as measured and, given the machine's
    ``machine_speed`` relative to the baseline's, also normalised to the baseline's machine speed
    (widened by ``machine_drift``, :attr:`yardstick.Yardstick.drift`); the verdict is the one both
    readings agree on (:func:`agreed`). ``raw_because``: why a figure that could have been
    normalised was judged only as measured. ``launches``: how many launches the interval pools."""
    if reference is None:
        return Verdict(kind=VerdictKind.NO_BASELINE, message="no throughput baseline", metric="throughput")
    raw = band_verdict(measured, reference, launches)
    change = f"{measured.value / reference.value - 1:+.1%}"
    if machine_speed is None:
        how = f" as measured ({raw_because})" if raw_because else ""
        return Verdict(kind=raw.kind, message=f"throughput {change}{how} against {_band(reference, launches)}: "
                                              f"{raw.message}{_defaulted(reference)}", metric="throughput")
    judged = normalise_estimate(measured, machine_speed, machine_drift)
    normalised = band_verdict(judged, reference, launches)
    kind = agreed(raw.kind, normalised.kind)
    head = (f"throughput {judged.value / reference.value - 1:+.1%} normalised to the baseline's machine speed "
            f"(machine {machine_speed - 1:+.1%} by the yardstick, {machine_drift:.1%} apart before and after the "
            f"window), {change} as measured, against {_band(reference, launches)}")
    if raw.kind == normalised.kind:
        return Verdict(kind=kind, message=f"{head}: {normalised.message}{_defaulted(reference)}", metric="throughput")
    return Verdict(kind=kind, message=(
        f"{head}: the two readings disagree (normalised {normalised.kind}: {normalised.message}; as measured "
        f"{raw.kind}: {raw.message}), and the yardstick alone cannot settle it{_defaulted(reference)}"),
        metric="throughput")


def judge_cell(evidence: Evidence, entry: Mapping | None, references: Mapping[str, Reference | None], *,
               use_yardstick: bool = True, baseline_path: str = "the baseline file",
               baseline_wait: float | None = None, tunables: Tunables = DEFAULT_TUNABLES) -> Judgement:
    """The verdicts of one cell against its baseline ``entry`` (``references``: its metrics'
    reference bands by name), in the order of this module's docstring. ``baseline_wait``: the
    share of the step time the baseline's ranks waited for a CPU; ``tunables``: the system's."""
    if entry is None:
        return Judgement(verdicts=[Verdict(kind=VerdictKind.NO_BASELINE,
                                           message=f"no baseline for {evidence.cell_id} in {baseline_path}")])
    if differs := config_change(entry, evidence):
        return Judgement(verdicts=[Verdict(kind=VerdictKind.STALE, message=(
            f"baseline measured with another configuration ({differs}); re-record it with --update-baselines"))])
    if differs := stale_differences(entry.get("fingerprint"), evidence.fingerprint):
        return Judgement(verdicts=[Verdict(kind=VerdictKind.STALE, message=(
            f"baseline measured {stale_words(differs)} ({'; '.join(differs)}); re-record it on this machine with "
            "--update-baselines"))])
    speed, raw_because = speed_against_baseline(evidence.yardstick, entry, use_yardstick=use_yardstick,
                                                default_noise=tunables.yardstick_noise)
    if another := another_machine(speed, tunables.same_machine_drift):
        return Judgement(verdicts=[Verdict(kind=VerdictKind.MACHINE_DIFFERS, message=another)], machine_speed=speed)
    judged = [(evidence.throughput, references.get("throughput"))]
    verdicts = [judge_throughput(evidence.throughput, references.get("throughput"),
                                 machine_speed=None if raw_because else speed,
                                 machine_drift=evidence.yardstick.drift if speed and evidence.yardstick else 0.0,
                                 raw_because=raw_because, launches=evidence.launches)]
    efficiency_reference = references.get("efficiency")
    if evidence.efficiency is not None and efficiency_reference and evidence.efficiency_source != "by definition":
        # not normalised: its two throughputs come from one session, so the machine's drift cancels
        judged.append((evidence.efficiency, efficiency_reference))
        verdicts.append(judge(evidence.efficiency, efficiency_reference, metric="efficiency",
                              launches=evidence.launches))
    if evidence.breakdown and entry.get("breakdown") and any(v.failed for v in verdicts):
        moved = attribute_regression(evidence.breakdown.slowest, entry["breakdown"])
        verdicts = [dataclasses.replace(v, message=f"{v.message}; {moved}") if v.failed else v for v in verdicts]
    changes = stack_changes(entry.get("fingerprint"), evidence.fingerprint)
    if changes:
        verdicts = [dataclasses.replace(v, message=f"{v.message} [software changed since the baseline: "
                                                   f"{', '.join(changes)}]") for v in verdicts]
    verdicts = [distrust(v, evidence.cpu_wait_share, baseline_wait, evidence.outside_share, stall=evidence.outside_stall,
                         notable=tunables.notable_wait,
                         beyond=reference is not None and beyond_contention(
                             measured, reference.edge_below(evidence.launches), evidence.outside_stall))
                for v, (measured, reference) in zip(verdicts, judged)]
    return Judgement(verdicts=verdicts, machine_speed=speed, stack_changes=changes)


def speed_against_baseline(yardstick: Yardstick | None, entry: Mapping, *, use_yardstick: bool = True,
                           default_noise: float = DEFAULT_TUNABLES.yardstick_noise) -> tuple[float | None, str]:
    """The machine's speed relative to the baseline's, and why a throughput is judged only as
    measured (``""``: it is judged normalised by that speed too). Within the yardstick's own
    launch-to-launch noise the speed is shown but not used (:func:`harness.judging.yardstick.beyond_noise`)."""
    if yardstick is None:
        return None, ""  # a GPU cell: no CPU yardstick can speak for it
    if not use_yardstick:
        return None, "--no-yardstick"
    baseline = Yardstick.from_json(entry.get("yardstick"))
    speed = speed_ratio(yardstick, baseline)
    if speed is None:
        return None, "the baseline has no yardstick of this version; re-record it to judge against machine speed"
    if not beyond_noise(speed, baseline, default_noise):
        noise = launch_noise(baseline, default_noise)
        return speed, (f"machine {speed - 1:+.1%} by the yardstick, within the +-{noise:.1%} it "
                       "strays by itself from launch to launch")
    return speed, ""


def overall(verdicts: list[Verdict]) -> VerdictKind:
    """A cell's one verdict from its metrics' verdicts: the most serious kind present."""
    kinds = {v.kind for v in verdicts}
    return next((kind for kind in MOST_SERIOUS_FIRST if kind in kinds), VerdictKind.PASS)


def measured_enough(throughput: Estimate, verdict_kind: VerdictKind, *, precision: float, spent_s: float,
                    next_launch_s: float, budget_s: float) -> bool:
    """Whether a cell stops launching: its interval is within ``precision`` and its verdict is not
    inconclusive, or one more launch (as long as the last, ``next_launch_s``) would overrun
    ``budget_s`` beyond the ``spent_s`` already spent."""
    if not needs_more_samples(throughput, precision) and verdict_kind != VerdictKind.INCONCLUSIVE:
        return True
    return spent_s + next_launch_s > budget_s


def config_change(entry: Mapping, evidence: Evidence) -> str | None:
    """What of the configuration this cell measures differs from its baseline's, or ``None``.

    Equal hashes: nothing. Otherwise the fields are compared one by one where the entry stores
    them, over the fields this cell measures (:func:`harness.config.cells.measured_config`), so a
    knob only other cells read, or a new recipe for the hash, does not make the baseline stale."""
    if entry.get("config_hash") in (None, evidence.config_hash):
        return None
    if not isinstance(entry.get("config"), Mapping):
        return "framework, loader or model settings"
    measured = measured_config(evidence.config, scaling_cell(evidence.cell_id))
    return config_differences(entry["config"], measured) or None


def config_differences(old: Mapping, new: Mapping) -> str:
    """``"key: old -> new"`` for each field of ``new`` that ``old`` does not hold the same."""
    keys = sorted(new)
    return ", ".join(f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in keys if old.get(key) != new.get(key))


def _band(reference: Reference, launches: int = 1) -> str:
    band = reference.for_launches(launches)
    pooled = f" for {launches} launches" if band is not reference else ""
    return f"baseline {reference.value:.4g} (band {band.lower:+.1%}{pooled})"


def _defaulted(reference: Reference) -> str:
    return " (default band: the baseline gives none)" if reference.defaulted else ""
