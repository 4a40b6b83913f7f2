"""What a session checks and prepares once, before its first cell starts: every place it writes,
the data its loaders read, the baseline and history files it extends, the rank counts and the
cores each CPU rank owns. Each check raises :class:`harness.config.options.SuiteError` naming the option
or file, so a bad input launches nothing and changes no file."""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Callable, Iterable, Mapping

from harness.config.cells import (DEFAULT_MATRIX, PROFILES, AccuracyCell, DatasetShape, Matrix, check_name,
                                  parse_cell_id, parse_dtypes, parse_names, parse_ranks)
from harness.config.options import SuiteError, SuiteOptions
from harness.data.dataset import DatasetError, ensure, validate_image_folder
from harness.data.tfrecord import TFRecordError, convert, open_tfrecord_set
from harness.launch.launchers import LAUNCHERS, Launcher, gpus_a_job_step_sees
from harness.launch.runner import RunLimits, worker_options
from harness.machine import allocation, huge_pages
from harness.machine.package_sets import import_error
from harness.machine.references import Environment
from harness.rank.cell import Cell
from harness.rank.instructions import missing_tools
from harness.rank.frameworks import FRAMEWORKS, has_servers, numerics_unsupported, training_ranks
from harness.rank.loaders import FILE_LOADERS, LOADERS, TFRECORD_LOADERS
from harness.rank.models import MODELS
from harness.rank.runtime import unavailable as runtime_unavailable
from harness.rank.spec import RankOptions, options_unknown_to
from harness.store.baselines import BaselineFile
from harness.store.history import read as read_history

DATA_CACHE = Path(os.environ.get("DLSCALE_CACHE", Path.home() / ".cache" / "dlscale"))
"""Where the generated datasets are kept, one directory per :class:`DatasetShape`."""


def matrix_of(options: SuiteOptions) -> Matrix:
    """The cells the options ask for: each name checked against its registry."""
    try:
        matrix = Matrix(
            frameworks=parse_names("--frameworks", options.frameworks, FRAMEWORKS) if options.frameworks
            else DEFAULT_MATRIX.frameworks,
            loaders=parse_names("--loaders", options.loaders, LOADERS) if options.loaders else DEFAULT_MATRIX.loaders,
            models=parse_names("--models", options.models, MODELS) if options.models else default_models(options),
            ranks=parse_ranks(options.gpus) if options.gpus else DEFAULT_MATRIX.ranks,
            dtypes=parse_dtypes(options.dtypes) if options.dtypes else DEFAULT_MATRIX.dtypes,
            channels_last=options.channels_last, compiled=options.compile)
        if options.launcher:
            check_name("--launcher", options.launcher, LAUNCHERS)
    except ValueError as error:
        raise SuiteError(str(error)) from None
    if not matrix.cells():
        raise SuiteError(f"the matrix holds no cell: no framework's runtime implements "
                         f"{', '.join(matrix.unimplemented())} (see --help for each option's names)")
    return matrix


def check_numerics(cells: list[Cell], gpus: bool) -> None:
    """A GPU-only arithmetic asked of a session whose ranks run on CPUs is refused before any launch."""
    for cell in cells:
        if reason := numerics_unsupported(cell.framework, cell.numerics, gpu=gpus):
            raise SuiteError(f"--dtypes {cell.dtype}: {reason}")


def default_models(options: SuiteOptions) -> tuple[str, ...]:
    """The models of the profile named, or the default matrix's where it is chosen by the device."""
    return PROFILES[options.profile].models if options.profile in PROFILES else DEFAULT_MATRIX.models


def skip_reason(cell: Cell | AccuracyCell, gpus: bool, capacity: int, where: str, ps_servers: int = 1) -> str | None:
    """Why a cell of the matrix cannot run here (its package missing, no GPU, too few ranks), or None.
    The matrix holds no cell whose framework's runtime lacks its loader or model (``Matrix.cells``)."""
    runtime = FRAMEWORKS.entry(cell.framework).runtime
    if isinstance(cell, AccuracyCell) and runtime != "torch":
        return f"the accuracy task runs in the torch runtime only; {cell.framework} runs in {runtime}'s"
    if isinstance(cell, Cell) and has_servers(cell.framework):
        if cell.ranks <= ps_servers:
            return (f"{cell.id}: {cell.ranks} rank(s) leave no worker beside {ps_servers} parameter server(s) "
                    f"(--ps-servers); a parameter-server cell needs more ranks than servers")
    missing = (runtime_unavailable(runtime, FRAMEWORKS.entry(cell.framework))
               or (isinstance(cell, Cell) and runtime == "torch" and LOADERS.missing(cell.loader)))
    if missing:
        return missing
    if isinstance(cell, Cell) and LOADERS.entry(cell.loader).needs_gpu and not gpus:
        return f"loader {cell.loader} decodes on the GPU and this machine has none"
    training = training_ranks(cell.framework, cell.ranks, ps_servers) if isinstance(cell, Cell) else cell.training_ranks
    if training > capacity:
        return f"{cell.id} needs {training} {'training ' if training != cell.ranks else ''}ranks but {where}"
    return None


def cannot_start_in(reference: Environment, framework: str) -> str | None:
    """Why a framework's ranks cannot start in a reference's package set (``--against pkg:``), asked
    of its interpreter before any launch: the pins apply to the torch runtime's interpreter only, and
    an extension built against another torch (Horovod's) fails to import. None where they can."""
    if reference.python is None:
        return None
    entry = FRAMEWORKS.entry(framework)
    if entry.runtime != "torch":
        return (f"the reference's packages ({', '.join(reference.packages)}) are set over the torch runtime's "
                f"interpreter; {framework}'s ranks run in the {entry.runtime} runtime's")
    for module in dict.fromkeys(["torch", entry.requires or "torch"]):
        failed = import_error(reference.python, module)
        if failed:
            return f"the reference environment ({reference.python}) cannot import {module}: {failed}"
    return None


def worker_cannot_pair(reference: Environment, options: RankOptions) -> str | None:
    """Why ``reference``'s ranks cannot take one side of pairs launched with ``options``, asked
    before any launch: its harness (an older commit's) does not know an option the pairs set, and
    would run without it where the current side runs with it (harness.rank.spec.MAY_RUN_WITHOUT
    names those it may). None where it knows them."""
    if lacking := options_unknown_to(worker_options(reference.source), options):
        return (f"the {reference.label}'s harness predates the rank option(s) {', '.join(lacking)} that both sides "
                "of each pair run with: its ranks would run without them, unlike the current side's; compare "
                "against a commit that has them")
    return None


def usable_launcher(name: str, environment: dict, partition: str | None = None, unset: tuple[str, ...] = ()
                    ) -> Launcher:
    launcher = LAUNCHERS.create(name, environment=environment, unset=unset, partition=partition)
    if partition and not launcher.takes_partition and not os.environ.get("SLURM_JOB_PARTITION"):
        raise SuiteError(f"--partition {partition}: launcher {name} cannot start ranks in a partition; use "
                         "--launcher srun, or run inside an allocation of that partition")
    reason = launcher.unavailable_reason()
    if reason:
        raise SuiteError(f"launcher {name} is not usable: {reason}. Choose another with --launcher "
                         f"({', '.join(LAUNCHERS.names())})")
    return launcher


def check_duet(options: SuiteOptions, launcher: str) -> None:
    """``--duet`` with the srun launcher is refused before any launch: its two launches would be two
    job steps at once, each of which takes the node's CPUs without ``--overlap`` (the second waits, the
    first dies at the gate), Slurm's GPU binding overrides each half's ``CUDA_VISIBLE_DEVICES``, and
    the core halves come from this process's affinity, not the compute node's."""
    if options.duet and launcher == "srun":
        raise SuiteError("--duet cannot run with the srun launcher: two job steps at once without --overlap each "
                         "take the node's CPUs, Slurm's GPU binding overrides each half's CUDA_VISIBLE_DEVICES, and "
                         "the core halves come from this process's affinity, not the compute node's; measure the "
                         "pairs back to back (without --duet)")


def check_instructions(options: SuiteOptions, uses_gpus: bool) -> None:
    """``--count-instructions`` is refused before any launch where it could count nothing: on GPU
    ranks (callgrind sees the host's instructions only), or without valgrind and a C compiler on
    this node."""
    if not options.count_instructions:
        return
    if uses_gpus:
        raise SuiteError("--count-instructions counts CPU ranks' host instructions under callgrind; a GPU rank's "
                         "work is in its kernels (counted work, --rank-device cpu for instructions)")
    if reason := missing_tools():
        raise SuiteError(f"--count-instructions: {reason}")


GPU_DEVICE_FILES = ("/proc/driver/nvidia/gpus", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")
"""Where a kernel shows a GPU torch could use: NVIDIA's driver, AMD's (ROCm), WSL2's. Where none
exists, ``torch.cuda.is_available()`` is False, and this process need not import torch (3-4 s on a
2-core CPU machine, the most of a session that stops at a usage error) to hear it."""


def machine_may_have_gpus() -> bool:
    return any(os.path.exists(path) for path in GPU_DEVICE_FILES)


def uses_gpus(device: str, env: Mapping[str, str] = os.environ) -> bool:
    """Whether the cells run on GPUs. ``--rank-device cpu`` or ``cuda`` says; ``auto`` asks where the
    ranks will run: inside a Slurm allocation the allocation (its GPU variables, else a one-task
    probe job step: after ``salloc`` on a login node this process's own node is not the job's),
    elsewhere this machine."""
    if device == "cpu":
        return False
    if device == "cuda":
        return True
    job = allocation.from_env(env)
    if job is None:
        if not machine_may_have_gpus():
            return False
        import torch

        return torch.cuda.is_available()
    if job.gpus_per_node:
        return True
    try:
        seen = gpus_a_job_step_sees(job)
    except RuntimeError as error:
        raise SuiteError(f"--rank-device auto: whether the Slurm allocation {job.job_id} has GPUs could not be asked "
                         f"({error}); say it with --rank-device cpu or --rank-device cuda") from None
    if seen and env is os.environ:
        # The allocation's variables do not say what the step saw: record it as a site would, so
        # that the rank capacity and srun's one-rank-per-GPU layout count these GPUs too.
        os.environ[allocation.GPU_OVERRIDE] = str(seen)
    return seen > 0


def check_rank_counts(options: SuiteOptions, cells: Iterable[Cell], ps_servers: int, capacity: int,
                      where: str) -> None:
    """Counts asked for with --gpus must fit; default counts that do not are skipped (skip_reason).
    A count fits where one of its cells' training ranks fit (three ranks are two workers and a
    parameter server); its other cells are skipped."""
    fewest: dict[int, int] = {}
    for cell in cells:
        training = training_ranks(cell.framework, cell.ranks, ps_servers)
        fewest[cell.ranks] = min(training, fewest.get(cell.ranks, training))
    too_many = [ranks for ranks, training in sorted(fewest.items()) if training > capacity]
    if options.gpus and too_many:
        raise SuiteError(f"--gpus {options.gpus}: {too_many[-1]} ranks asked for, but {where}")
    served = sorted({cell.ranks for cell in cells if has_servers(cell.framework)})
    if options.ps_servers is not None and served and max(served) <= ps_servers:
        raise SuiteError(f"--ps-servers {ps_servers}: the parameter-server cells have {', '.join(map(str, served))} "
                         f"rank(s), which leaves no worker beside {ps_servers} server(s); ask for fewer servers or "
                         "more ranks (--gpus)")


def processes(cells: Iterable[Cell], ps_servers: int, capacity: int) -> list[int]:
    """The processes (ranks) of each cell whose training ranks fit the capacity."""
    return [cell.ranks for cell in cells if training_ranks(cell.framework, cell.ranks, ps_servers) <= capacity]


def reference_cell(cell: Cell, counts: Iterable[int], ps_servers: int) -> Cell:
    """The cell of ``cell``'s series its E_G is relative to: the fewest ranks that train at all."""
    fewest = min(count for count in counts if training_ranks(cell.framework, count, ps_servers) >= 1)
    return dataclasses.replace(cell, ranks=fewest)


def cores_per_rank(options: SuiteOptions, processes: Iterable[int], gpus: bool, halves: bool = False) -> int | None:
    """Cores each rank of a CPU cell owns: ``--cores-per-rank``, else the node's cores over the
    most processes a cell of this session puts on one node (``processes``: each runnable cell's
    rank count, its parameter servers included); None for GPU cells (a rank owns its GPU) and where
    the processes outnumber the cores (then they share them, and say so). ``halves``: a duet's
    launches, which have half the node's cores each."""
    if gpus:
        return None
    job = allocation.from_env(os.environ)
    node_cores = min(job.cpus_per_node) if job and job.cpus_per_node else len(os.sched_getaffinity(0))
    cores = node_cores // 2 if halves else node_cores
    largest = max(processes, default=1)
    per_node = math.ceil(largest / (job.nodes if job else 1))
    asked = options.cores_per_rank
    if asked is not None:
        if asked * per_node > cores:
            where = (f"each half of a node for --duet, {cores} of its {node_cores} core(s)" if halves else
                     f"a node of {node_cores} core(s)")
            raise SuiteError(f"--cores-per-rank {asked}: the largest cell puts {per_node} rank(s) on {where}, "
                             f"which holds at most {cores // per_node} per rank")
        return asked
    return cores // per_node if per_node <= cores else None


def ranks_per_node(processes: Iterable[int]) -> int:
    """The most ranks a cell of the session puts on one node (``processes``: each runnable cell's
    rank count), spread over the allocation's nodes where there is one."""
    job = allocation.from_env(os.environ)
    return math.ceil(max(processes, default=1) / (job.nodes if job else 1))


def decide_huge_pages(options: SuiteOptions, processes: Iterable[int], gpus: bool,
                      launch_environment: Mapping[str, str], shell: Mapping[str, str] = os.environ
                      ) -> huge_pages.HugePages:
    """The huge pages the session's ranks run with (``--huge-pages``, :func:`harness.machine.huge_pages.decide`),
    read from this node, over the ``GLIBC_TUNABLES`` the ranks would otherwise get (the launch
    environment's, else the shell's)."""
    tunables = launch_environment.get(huge_pages.VARIABLE, shell.get(huge_pages.VARIABLE))
    try:
        return huge_pages.decide(options.huge_pages, gpus=gpus, ranks=ranks_per_node(processes), tunables=tunables,
                                 **huge_pages.read_node())
    except huge_pages.HugePagesError as error:
        raise SuiteError(str(error)) from None


def run_limits(options: SuiteOptions) -> RunLimits:
    """How long a launch may run and stay silent: the options' where given, else the defaults."""
    return RunLimits(**{name: value for name, value in (("timeout_s", options.cell_timeout),
                                                        ("heartbeat_s", options.hang_timeout)) if value is not None})


def unwritable(directory: Path) -> str | None:
    """Why files cannot be made in ``directory`` (created with its parents if missing), or None."""
    existing = Path(os.path.abspath(directory))
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def check_writable_places(o: SuiteOptions) -> None:
    """Everything the session will write must be writable before the first cell, not after it."""
    places = [("--results-dir", o.workdir, o.workdir),
              ("--results-json", o.results_json, o.results_json.parent if o.results_json else None),
              ("--dlscale-report", o.report, o.report), ("--history-dir", o.history_dir, o.history_dir),
              ("--baselines-dir", o.baselines_dir, o.baselines_dir if o.update_baselines else None)]
    for option, given, directory in places:
        why = unwritable(directory) if directory is not None else None
        if why:
            raise SuiteError(f"{option}: cannot write {given}: {why}")


def check_baseline_cells(baselines: BaselineFile) -> None:
    """A baseline entry for no cell this dlscale knows (a typo, a renamed model) would silently
    never be judged: refuse the file until it is corrected."""
    for cell_id in baselines.data["cells"]:
        try:
            parse_cell_id(cell_id)
        except ValueError as error:
            raise SuiteError(f"baseline file {baselines.path}: {error}; correct or remove that entry") from None


def check_history(path: Path) -> None:
    """Refuse to append to a history file holding a line dlscale does not write: something else
    writes there. A line an interrupted run cut short is expected (history/README.md, "Damage")."""
    try:
        _, problems = read_history(path)
    except OSError as error:
        raise SuiteError(f"history file {path} cannot be read: {error.strerror}") from None
    foreign = [problem for problem in problems if not problem.torn]
    if foreign:
        others = f", nor are {len(foreign) - 1} other line(s)" if len(foreign) > 1 else ""
        raise SuiteError(f"history file {path} line {foreign[0].line} is not a line dlscale writes "
                         f"({foreign[0].why}){others}; delete it, or pass another --history-dir or --no-history")


def prepare_data(options: SuiteOptions, loaders: set[str], shape: DatasetShape) -> tuple[Path | None, Path | None]:
    """The ImageFolder tree and the TFRecord shards the ``loaders`` read: the user's, checked, or
    the profile's generated ``shape``."""
    needs_folder = bool(loaders & FILE_LOADERS)
    needs_tfrecord = bool(loaders & TFRECORD_LOADERS)
    folder = tfrecord = None
    try:
        if options.data is not None and (needs_folder or needs_tfrecord):
            folder = _given_data("--dlscale-data", options.data, validate_image_folder)
        elif needs_folder or (needs_tfrecord and options.data_tfrecord is None):
            folder = ensure(DATA_CACHE / shape.name, classes=shape.classes, per_class=shape.per_class, size=shape.size)
        if needs_tfrecord and options.data_tfrecord is not None:
            tfrecord = _given_data("--dlscale-data-tfrecord", options.data_tfrecord, open_tfrecord_set)
        elif needs_tfrecord and options.data is not None:
            raise SuiteError("the -tfrecord loaders read TFRecord shards: pass --dlscale-data-tfrecord DIR (make one "
                             f"from your ImageFolder with: python -m harness.data.tfrecord --from {options.data} "
                             "--to DIR)")
        elif needs_tfrecord:
            tfrecord = convert(folder, DATA_CACHE / f"{shape.name}-tfrecord")
    except (DatasetError, TFRecordError) as error:
        raise SuiteError(str(error)) from None
    return folder, tfrecord


def _given_data(option: str, path: Path, check: Callable[[Path], object]) -> Path:
    try:
        check(Path(path))
    except (DatasetError, TFRecordError) as error:
        raise SuiteError(f"{option}: {error}") from None
    return Path(path).resolve()
