"""A scaling-suite session's settings, and the check that no cell could run with a value given."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.config.cells import PROFILES
from harness.config.renames import flag_of
from harness.machine.huge_pages import MODES as HUGE_PAGES


class SuiteError(ValueError):
    """A setting or input that stops the suite before any process starts."""


DEFAULT_MEASURE_BUDGET_S = 90.0
"""A launch of a default CPU cell takes 25-35 s here: room for two more when the first leaves the
cell imprecise or inconclusive (at 45 s, none ever fitted: every history row had one launch)."""
DEVICES = ("auto", "cpu", "cuda")
SYSTEM_CHANGES = ("fail", "pass")
SPENDING_RULES = ("pocock", "obrien-fleming")
"""How an A/B's looks may spend its error (the functions: harness.judging.sequential)."""
AT_LEAST = {"image_size": 1, "batch_size": 1, "steps": 1, "warmup_steps": 0, "num_workers": 0, "repeat": 1,
            "measure_budget": 0, "deadline_reserve": 0, "cores_per_rank": 1, "ps_servers": 1, "pairs": 6, "max_pairs": 6}
"""``pairs``: the fewest with a 95% signed-rank interval (harness.judging.paired.MIN_PAIRS)."""
ABOVE_ZERO = ("precision", "widest_baseline", "cell_timeout", "hang_timeout", "min_effect", "pairs_budget")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SuiteOptions:
    launcher: str | None = None
    frameworks: str | None = None
    loaders: str | None = None
    models: str | None = None
    gpus: str | None = None
    dtypes: str | None = None
    """Comma-separated arithmetic of the cells (harness.rank.numerics.DTYPES); None: fp32."""
    channels_last: bool = False
    compile: bool = False
    """Every cell's model compiled with ``torch.compile``."""
    system: str | None = None
    partition: str | None = None
    """Slurm partition: srun starts the ranks there, and the baselines are ``<system>:<partition>``'s."""
    baselines_dir: Path = Path("baselines")
    results_json: Path | None = None
    workdir: Path = Path("results") / "cells"
    update_baselines: bool = False
    data: Path | None = None
    data_tfrecord: Path | None = None
    profile: str = "auto"
    device: str = "auto"
    image_size: int | None = None
    batch_size: int | None = None
    steps: int | None = None
    warmup_steps: int | None = None
    num_workers: int | None = None
    ps_servers: int | None = None
    """Parameter-server cells: how many of each launch's ranks serve (default 1)."""
    cores_per_rank: int | None = None
    """CPU cells: cores each rank owns (harness.machine.binding); None: the node's cores over the largest
    number of ranks a cell of the session puts on one node."""
    cell_timeout: float | None = None
    hang_timeout: float | None = None
    precision: float = 0.02
    """Target relative half-width of a cell's throughput interval."""
    measure_budget: float = DEFAULT_MEASURE_BUDGET_S
    """Seconds a cell may spend in further launches to reach ``precision`` or a clear verdict."""
    repeat: int = 1
    """Independent measurements per cell (``--cell-repeats``); with --update-baselines their spread sets the band."""
    band_floor: float = 0.05
    """Narrowest band --cell-repeats may derive."""
    widest_baseline: float = 0.10
    """Relative half-width of a measured interval beyond which ``--update-baselines`` keeps the
    old baseline: a reference that uncertain cannot place a band of 5-15%."""
    accept_regressions: bool = False
    """``--update-baselines`` records a cell judged ``fail`` too (a slowdown the site accepts)."""
    count_work: bool = True
    """Count each rank's work in a step after its timed window (harness.rank.work)."""
    count_instructions: bool = False
    """An A/B first launches each side once with its ranks under valgrind's callgrind and compares
    their steps' host instructions (harness.session.instructions)."""
    yardstick: bool = True
    """Judge a CPU cell's throughput normalised to its baseline's machine speed (harness.judging.yardstick);
    False judges it as measured, e.g. to check the machine itself."""
    history_dir: Path | None = Path("history")
    """Where each measured cell appends a line to ``<system>.jsonl``; None: no history. Relative
    paths here are the current directory's; the plugin gives the project's (pytest's rootdir)."""
    report: Path | None = None
    """Directory for the HTML report of the session."""
    launch_env: tuple[str, ...] = ()
    """``NAME=VALUE`` settings every rank gets (``--launch-env``), over those of ``launch_env_file``."""
    launch_env_file: Path | None = None
    """A site's launch environment file (``--launch-env-file``, else ``$DLSCALE_ENV_FILE``)."""
    against: tuple[str, ...] = ()
    """The reference environment's parts (``--against``, harness.machine.references): each cell is then
    measured as pairs of launches, the reference's and the current one's (harness.session.paired)."""
    pairs: int = 8
    """Pairs of the first round of an A/B; doubled while the verdict is inconclusive."""
    max_pairs: int = 32
    min_effect: float | None = None
    """Smallest change an A/B calls a regression or an improvement (relative throughput); None: the
    system's (harness.judging.tunables)."""
    pairs_budget: float = 1800.0
    """Seconds a cell's A/B pairs may take."""
    spending: str = "pocock"
    """How an A/B's looks spend its error (harness.judging.sequential.RULES)."""
    duet: bool = False
    """An A/B's two launches of a pair run at once, each on half of the node (harness.session.duet)."""
    confirm: bool = False
    """Confirm a cell judged fail, inconclusive or machine-differs against its stored baseline by an
    A/B against the environment the baseline was recorded with (the nightly recipe sets it)."""
    system_changes: str = "fail"
    """With ``confirm``: whether a cell whose slowdown the A/B puts on the node, not the software,
    fails (``fail``: an HPC centre's nightly wants to hear of a slow node) or passes (``pass``)."""
    huge_pages: str = "auto"
    """Huge pages for the ranks' heaps through glibc's tunable (harness.machine.huge_pages.MODES):
    ``auto`` gives CPU ranks the node's reserved pool where it has room, else transparent huge pages."""
    deadline: str | None = None
    """When the session must be over (harness.machine.time_left.session_end): ``@EPOCH``, a duration
    from now, ``auto`` (the Slurm job's end) or ``none``; None: ``$DLSCALE_DEADLINE``, else ``auto``."""
    deadline_reserve: float = 120.0
    """Seconds before the deadline kept for the session's end (summary, report, the nightly's history
    check): no cell is started that would run into them (harness.session.deadline)."""
    fault: dict | None = None
    """A fault every launch injects on purpose (:mod:`harness.rank.faults`): the self-test's regressions.
    No command-line option sets it."""


def check_settings(options: SuiteOptions) -> None:
    """Raise :class:`SuiteError` naming the first option whose value no cell could run with."""
    for name, least in AT_LEAST.items():
        value = getattr(options, name)
        if value is not None and not value >= least:
            raise SuiteError(f"{flag_of(name)} must be at least {least}, got {value}")
    for name in ABOVE_ZERO:
        value = getattr(options, name)
        if value is not None and not value > 0:
            raise SuiteError(f"{flag_of(name)} must be greater than 0, got {value}")
    if options.profile not in ("auto", *PROFILES):
        raise SuiteError(f"{flag_of('profile')}: unknown profile {options.profile!r}; valid names: auto, {', '.join(PROFILES)}")
    if options.against and options.update_baselines:
        raise SuiteError("--against compares two environments in this session and records no baseline: "
                         "leave out --update-baselines")
    if options.against and options.confirm:
        raise SuiteError("--confirm confirms verdicts against stored baselines, and --against judges cells by "
                         "pairs alone: give one of them")
    if options.system_changes not in SYSTEM_CHANGES:
        raise SuiteError(f"--system-changes: {options.system_changes!r} is not one of {', '.join(SYSTEM_CHANGES)}")
    if options.spending not in SPENDING_RULES:
        raise SuiteError(f"--spending: {options.spending!r} is not one of {', '.join(SPENDING_RULES)}")
    if options.duet and not (options.against or options.confirm):
        raise SuiteError("--duet runs an A/B's pairs at once: give it with --against or --confirm")
    if options.count_instructions and not options.against:
        raise SuiteError("--count-instructions compares the host instructions of an A/B's two sides: give it with "
                         "--against")
    if options.pairs > options.max_pairs:
        raise SuiteError(f"--pairs ({options.pairs}) must not exceed --max-pairs ({options.max_pairs})")
    if options.huge_pages not in HUGE_PAGES:
        raise SuiteError(f"--huge-pages: {options.huge_pages!r} is not one of {', '.join(HUGE_PAGES)}")
    if options.device not in DEVICES:
        raise SuiteError(f"{flag_of('device')}: unknown device {options.device!r}; valid names: {', '.join(DEVICES)}")
