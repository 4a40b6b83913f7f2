"""The scaling suite's command-line options, declared once: flag, setting, help and kind. The default
an option shows is read where its setting is declared (:class:`SuiteOptions`, :class:`RunLimits`,
the registries, the tunables), never restated. ``pytest --help`` and the table in docs/usage.md are
both made from here; the table is regenerated with

    python -m harness.session.cli docs/usage.md
"""
from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

from harness.config.cells import DEFAULT_MATRIX
from harness.config.options import SPENDING_RULES, SuiteOptions
from harness.config.renames import Renamed, renamed
from harness.config.site_settings import environment_variable, ini_key
from harness.judging.tunables import DEFAULT_TUNABLES
from harness.launch.launchers import LAUNCHERS
from harness.launch.runner import RunLimits
from harness.machine.huge_pages import MODES as HUGE_PAGES
from harness.machine.huge_pages import POOL_PAGES_PER_RANK
from harness.machine.references import FORMS
from harness.rank.frameworks import FRAMEWORKS, has_servers
from harness.rank.loaders import LOADERS
from harness.rank.models import MODELS
from harness.session.deadline import CUT_FOR_TIME_EXIT_STATUS

SWITCH, REPEATABLE = "switch", "repeatable"


@dataclasses.dataclass(frozen=True, slots=True)
class Option:
    flag: str
    dest: str
    """The option's name on pytest's config: ``dlscale_<dest>``."""
    help: str
    kind: type | str = str
    """The value's type, or :data:`SWITCH` (present or not) or :data:`REPEATABLE` (a string, given
    as often as needed)."""
    metavar: str | None = None
    site: bool = False
    """A site's setting: also read from the ini file and the environment (harness.config.site_settings)."""
    environment: str | None = None
    """A site setting's environment variable where it is not ``DLSCALE_<DEST>`` (one older than the rule)."""

    @property
    def value_name(self) -> str:
        return self.metavar or self.dest.upper()

    @property
    def ini_key(self) -> str | None:
        return ini_key(self.dest) if self.site else None

    @property
    def environment_variable(self) -> str | None:
        return (self.environment or environment_variable(self.dest)) if self.site else None

    @property
    def renamed(self) -> Renamed | None:
        """Its renaming, where it had another name (harness.config.renames)."""
        return renamed(self.dest)

    @property
    def alias(self) -> str | None:
        """Its old name, where that still works (deprecated)."""
        return self.renamed.old if self.renamed and self.renamed.kept_as_alias else None

    @property
    def default(self) -> object:
        """The default where the setting is declared (SuiteOptions, RunLimits), or None."""
        owner, name = (RunLimits, LIMITS[self.dest]) if self.dest in LIMITS else (SuiteOptions, self.dest)
        field = owner.__dataclass_fields__.get(name)
        return None if field is None or field.default in (None, dataclasses.MISSING) else field.default

    def full_help(self) -> str:
        """The help with the declared default, unless the help says its own (a default that is not
        a value, such as ``$DLSCALE_SYSTEM``)."""
        default, help_text = self.default, self.help
        if not (self.kind in (SWITCH, REPEATABLE) or default is None or "(default" in self.help):
            help_text += f" (default {default:g})" if isinstance(default, float) else f" (default {default})"
        return f"{help_text}; {self.renamed.note()}" if self.renamed else help_text

    def site_help(self) -> str:
        """Where else a site setting may be given, for pytest's help."""
        return (f"; also ini {self.ini_key} or ${self.environment_variable} (the command line over the ini file over "
                "the environment)") if self.site else ""


LIMITS = {"cell_timeout": "timeout_s", "hang_timeout": "heartbeat_s"}
"""Options whose default is a :class:`RunLimits` field's."""


def _names(registry, default) -> str:
    return f"of {', '.join(registry.names())} (default {', '.join(default)}); an unknown name is an error listing these"


OPTIONS = (
    Option("--launcher", "launcher", f"how ranks start: {', '.join(LAUNCHERS.names())} (default: srun inside an "
           "allocation or when a Slurm cluster answers, else torchrun); inside an allocation torchrun starts one "
           "agent per node through srun, horovodrun starts Horovod with its Gloo controller, deepspeed is "
           "DeepSpeed's own launcher (one node)", site=True),
    Option("--gpus", "gpus", "comma-separated rank (GPU) counts, e.g. 1,2,4 (default "
           f"{','.join(map(str, DEFAULT_MATRIX.ranks))}); a count larger than the allocation or machine offers is an "
           "error saying what it offers, a default count that does not fit is skipped with the reason", site=True),
    Option("--frameworks", "frameworks", f"comma-separated frameworks {_names(FRAMEWORKS, DEFAULT_MATRIX.frameworks)}", site=True),
    Option("--loaders", "loaders", f"comma-separated loaders {_names(LOADERS, DEFAULT_MATRIX.loaders)}", site=True),
    Option("--models", "models", f"comma-separated models {_names(MODELS, DEFAULT_MATRIX.models)}", site=True),
    Option("--dtypes", "dtypes", "comma-separated arithmetic the cells train in, each a cell of its own: fp32 (TF32 "
           "off), tf32 (GPU), bf16 (autocast; DeepSpeed's own bf16), fp16 (GPU: autocast and a gradient scaler; "
           "DeepSpeed's own fp16); torch's frameworks only (default fp32)"),
    Option("--channels-last", "channels_last", "torch's cells train on channels-last tensors (NHWC), each a cell "
           "of its own", SWITCH),
    Option("--torch-compile", "compile", "torch's cells train a model compiled by torch.compile, each a cell of its own",
           SWITCH),
    Option("--system", "system", "baseline file name (default: the Slurm cluster name or the host, with "
           ":<partition> where one is known)", site=True),
    Option("--partition", "partition", "Slurm partition srun starts the cells in; the baselines are then "
           "<system>:<partition>.json (default: the allocation's, else none)", site=True),
    Option("--baselines-dir", "baselines_dir", "directory of <system>.json baseline files (default: baselines/)",
           Path, site=True),
    Option("--dlscale-data", "data", "ImageFolder dataset for file-reading loaders (default: the generated dataset)",
           Path, site=True),
    Option("--dlscale-data-tfrecord", "data_tfrecord", "indexed TFRecord shards for the -tfrecord loaders (default: the "
           "generated dataset's, converted once)", Path, site=True),
    Option("--workload-profile", "profile", "workload preset: auto, study (224 px, 64/GPU, ResNet50), cpu-small (32 px, "
           "16/rank, ResNet50) or cpu-cifar (ResNet44 on 32 px CIFAR-shaped data, 10 classes, 32/rank) (default "
           "auto: study with a GPU, cpu-small without)"),
    Option("--rank-device", "device", "auto, cpu or cuda (default auto: inside a Slurm allocation its GPU variables, else "
           "a one-task probe job step asking torch on the job's node, else this machine)"),
    Option("--image-size", "image_size", "image side in pixels (overrides the profile)", int),
    Option("--batch-size", "batch_size", "images per rank per step (overrides the profile)", int),
    Option("--steps", "steps", "timed steps per cell (overrides the profile)", int),
    Option("--warmup-steps", "warmup_steps", "untimed warm-up steps per cell (overrides the profile)", int),
    Option("--num-workers", "num_workers", "DataLoader workers per rank (overrides the profile)", int),
    Option("--ps-servers", "ps_servers", "parameter-server cells ("
           f"{', '.join(name for name in FRAMEWORKS.names() if has_servers(name))}): how many of a cell's ranks "
           "serve, the last ones (default 1); the others train", int),
    Option("--cores-per-rank", "cores_per_rank", "CPU cells: cores each rank owns, bound by the launcher or the "
           "rank (default: the node's cores over the most ranks a cell puts on it)", int),
    Option("--huge-pages", "huge_pages", f"{', '.join(HUGE_PAGES)}: the ranks' heaps in huge pages through glibc's "
           "tunable, GLIBC_TUNABLES=glibc.malloc.hugetlb=N in every launch's environment; auto: for CPU ranks the "
           f"node's reserved pool of 2 MiB pages (N=2) where it has {POOL_PAGES_PER_RANK} free for each rank a cell "
           "puts on it, else transparent huge pages (N=1) where the kernel offers them, else none, and none for GPU "
           "ranks; thp or pool ask for one (pool is refused where no pool is reserved), off for none; a "
           "GLIBC_TUNABLES of your own that sets the tunable wins", str, "MODE"),
    Option("--results-dir", "results_dir", "where each session gets its own directory <start time>-<job or pid> "
           "(cells' files, results.json); <dir>/latest points at the newest (default: results/)", Path, site=True),
    Option("--results-json", "results_json", "write every cell's full record (all ranks' per-step samples) to this "
           "JSON file, rewritten after each cell; {session} stands for the session's name (default: <session "
           "dir>/results.json)", Path),
    Option("--dlscale-report", "report", "write an HTML report (summary, plots, each cell's history trend, breakdown, "
           "time-to-train, fingerprints) into this directory; {session} stands for the session's name "
           "(python -m harness.report.html RESULTS --out DIR for a results file)", Path),
    Option("--history-dir", "history_dir", "append each measured cell to <dir>/<system>.jsonl (default: history/); "
           "python -m harness.report.history <dir>/<system>.jsonl reports change points", Path, site=True),
    Option("--no-history", "no_history", "do not append this session's cells to the history store", SWITCH),
    Option("--update-baselines", "update_baselines", "record the completed cells' figures as the system's new "
           "baselines, this machine type's entries (other types' are kept), and accept each recorded cell's level in "
           "the history; a cell judged fail keeps its old baseline and fails, and says so", SWITCH),
    Option("--accept-regressions", "accept_regressions", "a slowdown you accept: a cell judged fail passes, and "
           "with --update-baselines is recorded", SWITCH),
    Option("--precision", "precision", "target relative half-width of each cell's 95% throughput interval; a cell "
           "is launched again until it gets there", float),
    Option("--measure-budget", "measure_budget", "seconds a cell may spend in further launches for precision or a "
           "clear verdict", float),
    Option("--cell-repeats", "repeat", "independent measurements per cell, each judged; with --update-baselines the band "
           "is derived from their spread", int),
    Option("--widest-baseline", "widest_baseline", "relative half-width of a cell's 95% interval beyond which "
           "--update-baselines keeps its old baseline, and says why: a burst of other work on the node is not "
           "recorded as the reference", float),
    Option("--no-count-work", "no_count_work", "launch without counting each rank's work after its timed window "
           "(operators, FLOPs, collectives, memory, data: one more step, untimed); a cell's results and an A/B "
           "then say the work was not counted", SWITCH),
    Option("--count-instructions", "count_instructions", "with --against: before the pairs, launch each side once "
           "with its ranks under valgrind's callgrind (one compute thread; every thread counted, by kind) and compare the host instructions of two steps, "
           "naming the functions whose counts moved most; CPU ranks only, a launch takes minutes", SWITCH),
    Option("--no-yardstick", "no_yardstick", "judge CPU cells' throughput as measured, not normalised to the "
           "baseline's machine speed by the machine yardstick (e.g. to check the machine itself)", SWITCH),
    Option("--strict-verdicts", "strict", "fail a cell that could not be judged: no baseline, a stale one, or "
           "another machine's (the nightly recipe sets it)", SWITCH),
    Option("--launch-env", "launch_env", "a variable every rank of every cell gets, over --launch-env-file; each "
           "rank records what it saw", REPEATABLE, "NAME=VALUE"),
    Option("--launch-env-file", "launch_env_file", "NAME=VALUE lines every rank of every cell gets, e.g. the fast "
           "network's NCCL_SOCKET_IFNAME; see ci/examples/site.env", Path, site=True,
           environment="DLSCALE_ENV_FILE"),
    Option("--cell-timeout", "cell_timeout", "seconds a cell may take in all", float),
    Option("--hang-timeout", "hang_timeout", "seconds without progress from any rank before a cell counts as hung",
           float),
    Option("--deadline", "deadline", "when the session must be over: @EPOCH (Unix seconds), a duration from now "
           "(seconds, MM:SS, H:MM:SS, D-HH:MM:SS), auto (inside a Slurm job its end, by squeue's time left) or none; "
           "a cell is started only where its last duration (history's, else an earlier results file's; unknown: the "
           "median of the known) fits before it, the others are skipped as left unmeasured for time and the session "
           f"exits {CUT_FOR_TIME_EXIT_STATUS} unless a cell failed (default: $DLSCALE_DEADLINE, else auto)", str, "WHEN"),
    Option("--deadline-reserve", "deadline_reserve", "seconds before the deadline kept for the session's end "
           "(summary, report, the nightly's history check); keep it above a batch system's signal lead", float),
    Option("--against", "against", "measure each cell as pairs of launches against a reference environment in "
           f"this session and judge their ratio; REF: {FORMS} (the parts of one reference)", REPEATABLE, "REF"),
    Option("--pairs", "pairs", "with --against: pairs of launches in a cell's first round, doubled while the "
           "verdict is inconclusive", int),
    Option("--max-pairs", "max_pairs", "with --against: the most pairs a cell gets", int),
    Option("--min-effect", "min_effect", "with --against: smallest relative change in throughput called regressed "
           f"or improved (default: the system's min_effect tunable, else {DEFAULT_TUNABLES.min_effect:g})", float),
    Option("--pairs-budget", "pairs_budget", "with --against: seconds a cell's pairs may take", float),
    Option("--spending", "spending", "with --against or --confirm: how the looks at the pairs spend the A/B's 5% "
           f"error ({', '.join(SPENDING_RULES)}: Lan-DeMets spending functions of those types)"),
    Option("--duet", "duet", "with --against or --confirm: run the two launches of each pair at once, each on "
           "half of the node's cores (or GPUs), which side gets which half random and balanced (only the duet's "
           "launches take half the cores per rank: the cells' own launches, judged against their stored baselines, "
           "keep the whole node's); for cells that fit in half a node twice; not with the srun launcher (its two "
           "job steps at once would each take the node's CPUs, Slurm's GPU binding would override the halves', and "
           "the halves would be this process's cores, not the compute node's)", SWITCH),
    Option("--confirm", "confirm", "confirm a cell judged fail, inconclusive, machine-differs or stale by an A/B "
           "(as --against) against the environment its baseline was recorded with, rebuilt: a software or a system "
           "change (system only where the rebuild is exact and reproduces the stored figure's move), else unknown "
           "(the nightly recipe sets it)", SWITCH),
    Option("--system-changes", "system_changes", "with --confirm: fail or pass a cell whose throughput fail the A/B "
           "puts on the node, not the software"),
)

TABLE_START = "<!-- options: generated from harness/session/cli.py by `python -m harness.session.cli docs/usage.md`; do not edit -->"
TABLE_END = "<!-- end of the generated options -->"


def markdown_table() -> str:
    """Every option with its help and declared default, and a site setting's ini key and environment
    variable, as docs/usage.md shows them."""
    lines = ["| option | ini key, environment variable | meaning |", "|---|---|---|"]
    for option in OPTIONS:
        value = "" if option.kind == SWITCH else f" {option.value_name}"
        site = f"`{option.ini_key}`, `${option.environment_variable}`" if option.site else ""
        meaning = option.full_help().replace("|", "\\|")
        lines.append(f"| `{option.flag}{value}` | {site} | {meaning} |")
    return "\n".join(lines)


def with_table(document: str) -> str:
    """``document`` with the generated table between its markers; ValueError where it has none."""
    pattern = re.compile(re.escape(TABLE_START) + r".*?" + re.escape(TABLE_END), re.DOTALL)
    if not pattern.search(document):
        raise ValueError(f"no generated options table: the document lacks the line {TABLE_START}")
    return pattern.sub(lambda _: f"{TABLE_START}\n{markdown_table()}\n{TABLE_END}", document)


def main(argv: list[str] | None = None) -> int:
    """Rewrite the options table of each document named, or print it."""
    paths = [Path(arg) for arg in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print(markdown_table())
    for path in paths:
        path.write_text(with_table(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
