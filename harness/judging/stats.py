"""Statistics behind a cell's verdict: confidence intervals, warm-up, stopping, bands, change points.

Every function here is pure and, given ``seed``, deterministic. A cell is judged in this order:

1. ``detect_warmup`` on the slowest rank's step times, and drop those leading steps from every rank;
2. ``throughput_interval`` (and ``efficiency_interval`` against the series' smallest rank count);
3. ``needs_more_samples`` while measuring adaptively;
4. ``verdict`` of the interval against the baseline's band, a band that ``tolerance_from_repeats``
   can derive from repeated runs;
5. ``change_points`` over a cell's nightly history.

``scipy`` (distributions) and ``arch`` (block bootstrap) are imported inside the functions that
need them, so importing this module (as the pytest plugin does in every session of the
environment) costs only numpy.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

from harness.common.jsonio import finite_number, finite_or_none
from harness.judging import pelt
from harness.judging.kinds import VerdictKind

MIN_STEPS = 5
"""Fewer timed steps than this give a point value with an infinite interval."""

DEFAULT_REPS = 2000
"""Bootstrap replicates; the percentile ends move by well under 1% of the width between seeds."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Estimate:
    """A point value with a two-sided confidence interval ``[low, high]``."""

    value: float
    low: float
    """Lower end of the interval; ``-inf`` when there were too few samples to have one."""
    high: float
    """Upper end of the interval; ``+inf`` when there were too few samples to have one."""
    confidence: float = 0.95
    n_steps: int = 0
    """Samples (timed steps) the interval rests on; 0 when it does not come from samples."""
    block_length: float = math.nan
    """Mean block length of the stationary bootstrap; NaN when no bootstrap was run."""

    @property
    def half_width_rel(self) -> float:
        """Half the interval's width over the point value; ``inf`` without an interval."""
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.value == 0:
            return math.inf
        return (self.high - self.low) / 2 / abs(self.value)

    @property
    def too_few_samples(self) -> bool:
        return not (math.isfinite(self.low) and math.isfinite(self.high))

    def text(self, digits: int, style: str = "f") -> str:
        """``value [low, high]`` with ``digits`` decimals (``style`` ``"g"``: significant digits); the
        value alone where it is exact, ``[no CI]`` after it where there is no interval."""
        spec = f".{digits}{style}"
        if self.low == self.high:
            return format(self.value, spec)
        if self.too_few_samples:
            return f"{self.value:{spec}} [no CI]"
        return f"{self.value:{spec}} [{self.low:{spec}}, {self.high:{spec}}]"

    def to_json(self) -> dict:
        """As results files and the history hold it: an end the interval lacks is null."""
        return {"value": self.value, "low": finite_or_none(self.low), "high": finite_or_none(self.high),
                "confidence": self.confidence, "n_steps": self.n_steps}

    @classmethod
    def from_json(cls, data: Any) -> Estimate | None:
        """An estimate :meth:`to_json` wrote; ``None`` where ``data`` holds no finite value. A null
        end reads as no interval."""
        if not isinstance(data, Mapping) or not finite_number(data.get("value")):
            return None

        def end(key: str, missing: float) -> float:
            return float(data[key]) if finite_number(data.get(key)) else missing
        return cls(value=float(data["value"]), low=end("low", -math.inf), high=end("high", math.inf),
                   confidence=float(data.get("confidence") or 0.95), n_steps=int(data.get("n_steps") or 0))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BandVerdict:
    """Where an interval lies against a band (:func:`verdict`); a cell's verdicts are
    :class:`harness.judging.verdicts.Verdict`."""

    kind: VerdictKind
    """pass, fail, inconclusive or faster."""
    message: str


# --- throughput and efficiency -------------------------------------------------------------------


def throughput_interval(
    rank_step_times: Sequence[Sequence[float]],
    batch_per_rank: Sequence[int] | int,
    *,
    confidence: float = 0.95,
    seed: int = 0,
    reps: int = DEFAULT_REPS,
) -> Estimate:
    """Global throughput (images/s) of a synchronous job, with a block-bootstrap interval.

    ``rank_step_times[r][i]`` is rank r's time for timed step i. Every step is as slow as its
    slowest rank, so step i processed ``sum(B)`` images in ``max_r t_r[i]`` seconds. The point value
    is the ratio estimator ``n * sum(B) / sum_i max_r t_r[i]`` (total images over total time), not
    the mean of per-step rates, which a few slow steps would bias upward.

    Consecutive steps are correlated, so the interval comes from a stationary bootstrap
    (Politis & Romano 1994, ``arch.bootstrap.StationaryBootstrap``) of the per-step maxima. The
    mean block length is ``arch.bootstrap.optimal_block_length`` (Politis & White 2004) but at
    least sqrt(n), and the percentile interval is widened for the small number of blocks
    (``_block_length``, ``_expansion``). Coverage of a nominal 95% interval on simulated step
    times: about 95% for independent steps, about 90% for AR(1) steps with coefficient 0.5, and
    70-85% with coefficient 0.8 (20-100 steps): strongly correlated short runs stay optimistic.
    Fewer than ``MIN_STEPS`` steps: the point value with an infinite interval.
    """
    step_max = _slowest_rank_steps(rank_step_times)
    images_per_step = float(sum(_batches(batch_per_rank, len(rank_step_times))))
    point, replicates, block = _throughput_replicates(step_max, images_per_step, confidence, seed, reps)
    if replicates is None:
        return _without_interval(point, confidence, step_max.size)
    low, high = _percentile_interval(replicates, confidence)
    return Estimate(
        value=point, low=low, high=high, confidence=confidence, n_steps=step_max.size, block_length=block
    )


def efficiency_interval(
    rank_step_times: Sequence[Sequence[float]],
    batch_per_rank: Sequence[int] | int,
    reference: Sequence[Sequence[float]] | Estimate,
    reference_batch_per_rank: Sequence[int] | int | None = None,
    *,
    reference_ranks: int | None = None,
    confidence: float = 0.95,
    seed: int = 0,
    reps: int = DEFAULT_REPS,
) -> Estimate:
    """Parallel efficiency ``E_G = (X_G / G) / (X_ref / G_ref)`` with a percentile interval.

    ``G`` is ``len(rank_step_times)``. The reference is either another run's per-rank step times
    (``G_ref`` is then its length and ``reference_batch_per_rank`` defaults to
    ``batch_per_rank``'s per-rank value), or a throughput ``Estimate`` from a baseline, for which
    ``reference_ranks`` is required.

    The two runs are independent, so each side is bootstrapped on its own and the ratio is taken
    replicate by replicate. A reference ``Estimate`` is sampled from a normal distribution whose
    central ``reference.confidence`` interval has the reference's mean half-width (a reference
    with ``low == high`` is taken as exact).
    """
    ranks = len(rank_step_times)
    step_max = _slowest_rank_steps(rank_step_times)
    images_per_step = float(sum(_batches(batch_per_rank, ranks)))
    measured_seed, reference_seed = np.random.SeedSequence(seed).spawn(2)
    point, replicates, block = _throughput_replicates(step_max, images_per_step, confidence, measured_seed, reps)

    if isinstance(reference, Estimate):
        if reference_ranks is None or reference_ranks <= 0:
            raise ValueError("a reference given as an Estimate needs reference_ranks (a positive int)")
        if not reference.value > 0:
            raise ValueError(f"reference throughput must be positive, got {reference.value}")
        ref_ranks = reference_ranks
        ref_point = reference.value
        if reference.too_few_samples or replicates is None:
            ref_replicates = None
        else:
            z = _distributions().norm.ppf(0.5 + reference.confidence / 2)
            sigma = (reference.high - reference.low) / 2 / z
            ref_replicates = np.random.default_rng(reference_seed).normal(ref_point, sigma, size=reps)
    else:
        ref_ranks = len(reference)
        if reference_batch_per_rank is None:
            per_rank = _batches(batch_per_rank, ranks)
            if len(set(per_rank)) != 1:
                raise ValueError("ranks have different batch sizes: pass reference_batch_per_rank")
            reference_batch_per_rank = per_rank[0]
        ref_step_max = _slowest_rank_steps(reference)
        ref_images = float(sum(_batches(reference_batch_per_rank, ref_ranks)))
        ref_point, ref_replicates, _ = _throughput_replicates(
            ref_step_max, ref_images, confidence, reference_seed, reps
        )

    scale = ref_ranks / ranks
    value = point / ref_point * scale
    if replicates is None or ref_replicates is None:
        return _without_interval(value, confidence, step_max.size)
    # A normal reference with a very wide interval can draw values <= 0; those ratios mean nothing.
    usable = ref_replicates > 0
    low, high = _percentile_interval(replicates[usable] / ref_replicates[usable] * scale, confidence)
    return Estimate(
        value=value, low=low, high=high, confidence=confidence, n_steps=step_max.size, block_length=block
    )


def needs_more_samples(estimate: Estimate, target_half_width_rel: float = 0.02) -> bool:
    """True while the interval's relative half-width is wider than the target (or absent)."""
    if target_half_width_rel <= 0:
        raise ValueError(f"target_half_width_rel must be positive, got {target_half_width_rel}")
    return not estimate.half_width_rel <= target_half_width_rel


# --- warm-up -------------------------------------------------------------------------------------


def detect_warmup(step_times: Sequence[float], batch: int = 5) -> int:
    """Leading steps to drop, by MSER-5 (White 1997; White, Cobb & Spratt 2000).

    The series is cut into batches of ``batch`` steps (a trailing partial batch is ignored) and
    their means ``Y_1..Y_k`` taken. For each cut ``d`` the Marginal Standard Error Rule scores the
    batches kept, ``MSER(d) = sum_{j>d} (Y_j - mean_{j>d} Y)^2 / (k - d)^2``, which falls while
    dropping moves transient batches out and rises once it only shrinks the sample. The cut that
    minimises it, times ``batch``, is returned. Cuts are bounded to half the batches, because the
    score is unstable near the end of the series. Fewer than two batches: 0.

    It never keeps a slow leading batch, but it often cuts deeper than needed: on 100 steps with
    5% noise and a 10-step slow start it returns 10 about half the time and up to the bound
    (50) in about a fifth of runs; on a steady series it returns 0 about 60% of the time and
    drops 7% of the steps on average (13% of 50 steps). Over-cutting costs samples, not bias.

    Pass the slowest rank's per-step times (``max`` over ranks per step) and drop the same number
    of leading steps from every rank.
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    x = np.asarray(step_times, dtype=float)
    k = x.size // batch
    if k < 2:
        return 0
    means = x[: k * batch].reshape(k, batch).mean(axis=1)
    best_d, best_score = 0, math.inf
    for d in range(k // 2 + 1):
        kept = means[d:]
        score = float(np.sum((kept - kept.mean()) ** 2)) / kept.size**2
        if score < best_score:
            best_d, best_score = d, score
    return best_d * batch


# --- verdicts and bands --------------------------------------------------------------------------


def verdict(
    measured: Estimate,
    reference: float,
    lower_rel: float | None,
    upper_rel: float | None = None,
    *,
    higher_is_better: bool = True,
) -> BandVerdict:
    """Judge an interval against a ReFrame-style band ``[reference*(1+lower_rel), reference*(1+upper_rel)]``.

    ``lower_rel <= 0 <= upper_rel``. For a higher-is-better metric (throughput, efficiency) the
    lower edge is the regression edge and the upper edge, if given, the improvement edge:

    - ``fail``: the whole interval lies below the lower edge;
    - ``faster``: the whole interval lies above the upper edge (a pass; the baseline may be stale);
    - ``pass``: the whole interval lies at or above the lower edge;
    - ``inconclusive``: the interval straddles the lower edge (or there is no interval).

    For a lower-is-better metric (step time, data wait) the roles of the edges swap: ``upper_rel``
    is required and is the regression edge, ``lower_rel`` (optional) the improvement edge.
    """
    if not reference > 0:
        raise ValueError(f"reference must be positive, got {reference}")
    if lower_rel is not None and lower_rel > 0:
        raise ValueError(f"lower_rel must be <= 0 (e.g. -0.1 for 10% below), got {lower_rel}")
    if upper_rel is not None and upper_rel < 0:
        raise ValueError(f"upper_rel must be >= 0 (e.g. 0.1 for 10% above), got {upper_rel}")
    bad_rel, good_rel = (lower_rel, upper_rel) if higher_is_better else (upper_rel, lower_rel)
    if bad_rel is None:
        which = "lower_rel" if higher_is_better else "upper_rel"
        raise ValueError(f"{which} is required: it is the regression edge of this metric's band")

    interval = measured.text(4, "g")
    bad_edge = reference * (1 + bad_rel)
    good_edge = None if good_rel is None else reference * (1 + good_rel)
    # Flip signs for lower-is-better metrics so that one set of comparisons serves both directions.
    sign = 1.0 if higher_is_better else -1.0
    low, high = sorted((sign * measured.low, sign * measured.high))
    worse, better = ("below", "above") if higher_is_better else ("above", "below")

    if measured.too_few_samples:
        return BandVerdict(kind=VerdictKind.INCONCLUSIVE, message=f"{interval}: too few samples for an interval")
    if high < sign * bad_edge:
        return BandVerdict(
            kind=VerdictKind.FAIL, message=f"{interval}: whole interval {worse} the band's edge {bad_edge:.4g}"
        )
    if good_edge is not None and low > sign * good_edge:
        return BandVerdict(
            kind=VerdictKind.FASTER,
            message=f"{interval}: whole interval {better} {good_edge:.4g}, better than baseline: update?",
        )
    if low >= sign * bad_edge:
        return BandVerdict(kind=VerdictKind.PASS,
                           message=f"{interval}: whole interval within the band's edge {bad_edge:.4g}")
    return BandVerdict(
        kind=VerdictKind.INCONCLUSIVE,
        message=f"{interval}: interval straddles the band's edge {bad_edge:.4g}; measure longer",
    )


def tolerance_from_repeats(
    values: Sequence[float], floor_rel: float = 0.05, *, confidence: float = 0.99
) -> tuple[float, float]:
    """A symmetric band ``(lower_rel, upper_rel)`` around ``mean(values)`` from repeated runs.

    The band is the two-sided prediction interval for one new run,
    ``mean +- t_{n-1} * s * sqrt(1 + 1/n)``, relative to the mean. Unlike a fixed ``k * s`` it
    widens when the repeats are few (s from three runs is itself very uncertain: t_{2, 0.995} is
    9.9, against 2.6 for many runs) and it is a statement about the next run, which is what a
    nightly check compares. It is never tighter than ``floor_rel``, and the lower edge never goes
    below -1 (a zero value). Store ``mean(values)`` as the reference with this band.
    """
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        raise ValueError(f"a band from repeats needs at least 2 values, got {x.size}")
    if floor_rel < 0:
        raise ValueError(f"floor_rel must be >= 0, got {floor_rel}")
    mean = float(x.mean())
    if not mean > 0:
        raise ValueError(f"repeats must have a positive mean, got {mean}")
    t = _distributions().t.ppf(0.5 + confidence / 2, df=x.size - 1)
    half = t * float(x.std(ddof=1)) * math.sqrt(1 + 1 / x.size) / mean
    half = max(half, floor_rel)
    return (max(-half, -1.0), half)


# --- nightly history ------------------------------------------------------------------------------


def change_points(values: Sequence[float], min_size: int = 3, penalty: float | None = None) -> list[int]:
    """Indices where a cell's nightly history shifts and stays shifted.

    Each index is the first night of a new level. PELT with the ``l1`` cost (sum of absolute
    deviations from each segment's median; :mod:`harness.judging.pelt`, as ``ruptures.Pelt`` finds
    them), so that a lone outlier cannot pay for a segment of its own: the median of any
    ``min_size >= 3`` nights ignores one spike.

    Without ``penalty`` it is ``2 * sigma * log(n)`` per change point, where the noise ``sigma``
    is ``1.4826 * MAD`` of the first differences over ``sqrt(2)``, robust both to spikes and to the
    shifts being looked for (each shift is one large difference). That is about a BIC penalty for
    a Laplace likelihood; with 5% night-to-night noise a 15% shift lasting 5 nights is found.
    """
    x = np.asarray(values, dtype=float)
    if min_size < 2:
        raise ValueError(f"min_size must be at least 2, got {min_size}")
    if x.size < 2 * min_size:
        return []
    if penalty is None:
        diffs = np.diff(x)
        sigma = 1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2)
        # Identical nights give sigma 0; keep the penalty from vanishing with it.
        sigma = max(sigma, 1e-3 * abs(float(np.median(x))), 1e-12)
        penalty = 2.0 * sigma * math.log(x.size)
    return pelt.change_points(x.tolist(), min_size=min_size, penalty=penalty)


# --- helpers -------------------------------------------------------------------------------------


def _slowest_rank_steps(rank_step_times: Sequence[Sequence[float]]) -> np.ndarray:
    if len(rank_step_times) == 0:
        raise ValueError("no ranks' step times")
    lengths = {len(steps) for steps in rank_step_times}
    if len(lengths) != 1:
        raise ValueError(f"ranks timed different numbers of steps: {sorted(lengths)}")
    times = np.asarray(rank_step_times, dtype=float)
    if times.shape[1] == 0:
        raise ValueError("no timed steps")
    if not (np.all(np.isfinite(times)) and np.all(times > 0)):
        raise ValueError("step times must be finite and positive")
    return times.max(axis=0)


def _batches(batch_per_rank: Sequence[int] | int, ranks: int) -> list[int]:
    if isinstance(batch_per_rank, int):
        batches = [batch_per_rank] * ranks
    else:
        batches = list(batch_per_rank)
        if len(batches) != ranks:
            raise ValueError(f"{len(batches)} batch sizes for {ranks} ranks")
    if any(b <= 0 for b in batches):
        raise ValueError(f"batch sizes must be positive, got {batches}")
    return batches


def throughput_point(rank_step_times: Sequence[Sequence[float]], batch_per_rank: Sequence[int] | int) -> float:
    """The point value of :func:`throughput_interval`, without an interval: every step as slow as its
    slowest rank, total images over total time."""
    step_max = _slowest_rank_steps(rank_step_times)
    return _throughput(float(sum(_batches(batch_per_rank, len(rank_step_times)))), float(step_max.mean()))


def _throughput(images_per_step: float, mean_step_s: float | np.ndarray) -> float | np.ndarray:
    """A synchronous job's images per second: ``n * sum(B) / sum_i max_r t_r[i]``, written with the
    mean slowest-rank step (of one series, or of each bootstrap replicate)."""
    return images_per_step / mean_step_s


def _throughput_replicates(
    step_max: np.ndarray,
    images_per_step: float,
    confidence: float,
    seed: int | np.random.SeedSequence,
    reps: int,
) -> tuple[float, np.ndarray | None, float]:
    """Point throughput, its widened bootstrap replicates (None below MIN_STEPS), the block length.

    The replicates are scaled about the point value by ``_expansion`` so that their plain
    percentiles give the expanded percentile interval; scaling replicates rather than moving the
    percentile levels keeps them usable in ratios (``efficiency_interval``).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if reps < 100:
        raise ValueError(f"reps must be at least 100 for a percentile interval, got {reps}")
    point = _throughput(images_per_step, float(step_max.mean()))
    if step_max.size < MIN_STEPS:
        return point, None, math.nan
    bootstrap = _import("arch.bootstrap", "arch")
    block = _block_length(step_max, bootstrap)
    resampler = bootstrap.StationaryBootstrap(block, step_max, seed=np.random.default_rng(seed))
    means = resampler.apply(lambda sample: np.atleast_1d(sample.mean()), reps)[:, 0]
    replicates = _throughput(images_per_step, means)
    return point, point + _expansion(step_max.size / block, confidence) * (replicates - point), block


def _block_length(x: np.ndarray, bootstrap) -> float:
    """Mean block length: Politis-White, but at least sqrt(n), and at most n/4.

    Politis-White minimises the error of the bootstrap variance; from a short, noisy series it
    often returns about 1 even when steps are clearly correlated (median 1.6 for 20 steps of an
    AR(1) with coefficient 0.5), and blocks that short lose the correlation: the interval
    covers 73% instead of 95%. Intervals want longer blocks than variance estimates do (Hall,
    Horowitz & Jing 1995), hence the sqrt(n) floor. The n/4 cap keeps at least four blocks.
    Politis-White is not tried below 16 steps, where it has too few autocorrelations to work on.
    """
    n = x.size
    block = math.sqrt(n)
    if n >= 16 and np.ptp(x) > 0:
        optimal = float(bootstrap.optimal_block_length(x)["stationary"].iloc[0])
        if math.isfinite(optimal):
            block = max(block, optimal)
    return float(min(max(block, 1.0), max(1.0, n / 4)))


def _expansion(blocks: float, confidence: float) -> float:
    """Widening of a percentile interval resting on ``blocks`` roughly independent blocks.

    Hesterberg's expanded percentile interval (Hesterberg 2015, "What teachers should know about
    the bootstrap", sec. 5.3) corrects the percentile interval's narrowness in small samples by
    the factor ``sqrt(n/(n-1)) * t_{n-1} / z``; with dependent data the sample size that matters
    is the number of blocks, as for batch means. With the sqrt(n) block floor it lifts the
    coverage of a nominal 95% interval over AR(1) step times with coefficient 0.5 from 73-86%
    (Politis-White blocks, plain percentiles) to 91-93% for 20-100 steps.
    """
    tail = 0.5 + confidence / 2
    return math.sqrt(blocks / (blocks - 1)) * _distributions().t.ppf(tail, blocks - 1) / _distributions().norm.ppf(tail)


def _percentile_interval(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return float(low), float(high)


def _without_interval(value: float, confidence: float, n_steps: int) -> Estimate:
    return Estimate(value=value, low=-math.inf, high=math.inf, confidence=confidence, n_steps=n_steps)


def _distributions():
    from scipy import stats

    return stats


def _import(module: str, package: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"harness.judging.stats needs {package!r} for this: pip install {package} (see pyproject.toml)"
        ) from error
