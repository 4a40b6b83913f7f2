"""What one launch tells each of its ranks: the spec file the runner writes and every worker reads.

    WorkerSpec(cell=..., workload=..., output_dir=..., options=RankOptions(device="cpu")).to_json()
    WorkerSpec.from_json(json.loads(path.read_text()))   # a key it does not know is an error
"""
from __future__ import annotations

import ast
import dataclasses
from typing import Any, Collection, Mapping

from harness.rank.faults import Fault


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataDelay:
    """A slow loader on purpose: ``seconds`` before each batch, on ``rank`` (every rank if None)."""
    seconds: float
    rank: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RankOptions:
    """How every rank of a launch runs, beyond its cell and workload."""
    device: str = "auto"
    """``auto`` (a GPU per rank where there are GPUs), ``cpu`` or ``cuda``."""
    cores_per_rank: int | None = None
    """Cores each rank binds to (harness.machine.binding); None: no binding on CPU, near its GPU on GPU."""
    threads_per_rank: int | None = None
    """torch threads per rank where the rank binds to no cores; None: the node's cores shared."""
    framework_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the framework adapter, beyond its registry preset."""
    yardstick: bool = True
    """Time the machine yardstick before and after training (CPU cells)."""
    core_set: tuple[int, ...] | None = None
    """The node's cores this launch's ranks take their blocks of ``cores_per_rank`` from, whatever
    the launcher bound them to: a duet's half of the node (harness.session.duet). None: the cores
    the rank was started with."""
    window_gate: str | None = None
    """A directory where this launch's first rank meets the other launches of a duet before its
    timed window, so that their windows start together (harness.rank.gate)."""
    compute_probe: bool = True
    """Time the compute probe (a private model copy's forward and backward) around the window: the
    breakdown's reading, which an A/B's or a bisect's figure does not use."""
    count_work: bool = True
    """Count the work of steps after the timed window (harness.rank.work): operators, FLOPs,
    collectives, memory and data."""
    count_instructions: bool = False
    """Run under valgrind's callgrind and count the host instructions of steps after a one-step
    window, on one compute thread (harness.rank.instructions); the launch's times say nothing."""
    fault: Fault | None = None
    data_delay: DataDelay | None = None
    accuracy: Mapping[str, Any] | None = None
    """The accuracy task's settings (harness.config.cells.AccuracySettings): run it instead of a
    scaling cell's training."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerSpec:
    cell: Mapping[str, Any]
    """The cell's fields: a scaling cell's (harness.rank.cell.Cell) or an accuracy cell's."""
    workload: Mapping[str, Any] | None
    """The workload's fields (harness.rank.workload.Workload); None for the accuracy task."""
    output_dir: str
    launch_environment: tuple[str, ...] = ()
    """The site's launch settings by name, and those a reference unsets (``--against env:NAME``),
    which each rank reports as it sees them (None: unset)."""
    options: RankOptions = RankOptions()
    silent_dump_s: float | None = None
    """Seconds without progress after which a rank dumps its threads' stacks (harness.rank.stacks)."""

    def to_json(self, known_options: Collection[str] | None = None) -> dict:
        """The spec as the worker reads it. Options at their defaults are left out: a worker of an
        older commit (an A/B's reference) then reads a spec that uses no option it lacks; one it does
        not know (``known_options``, where given) is left out too, so such a worker runs as it
        always did (:func:`option_names_of`; an A/B asks first whether it may:
        :func:`options_unknown_to`)."""
        options = {name: value for name, value in _set_options(self.options).items()
                   if known_options is None or name in known_options}
        return {"cell": dict(self.cell), "workload": dict(self.workload) if self.workload is not None else None,
                "output_dir": self.output_dir, "launch_environment": list(self.launch_environment),
                "silent_dump_s": self.silent_dump_s, **options}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkerSpec:
        own = {"cell", "workload", "output_dir", "launch_environment", "silent_dump_s"}
        option_names = {field.name for field in dataclasses.fields(RankOptions)}
        if unknown := set(data) - own - option_names:
            raise ValueError(f"unknown worker spec keys: {', '.join(sorted(unknown))}")
        options = {name: data[name] for name in option_names & set(data)}
        if options.get("fault") is not None:
            options["fault"] = Fault(**options["fault"])
        if options.get("data_delay") is not None:
            options["data_delay"] = DataDelay(**options["data_delay"])
        if options.get("core_set") is not None:
            options["core_set"] = tuple(options["core_set"])
        return cls(cell=data["cell"], workload=data.get("workload"), output_dir=data["output_dir"],
                   launch_environment=tuple(data.get("launch_environment", ())), options=RankOptions(**options),
                   silent_dump_s=data.get("silent_dump_s"))


MAY_RUN_WITHOUT = frozenset({"count_work"})
"""The options a worker that does not know them (an older commit's) may run without on one side of
an A/B: counting the work of steps after the timed window, whose absence the A/B says ("the
reference counted no work"). Every other option set away from its default changes what a launch
measures or how it runs (its cores, its device, the probe and the yardstick around its window, a
duet's half and gate, a drill's fault), so a side that ignores it would not run as the other
(:func:`options_unknown_to`)."""


def options_unknown_to(known_options: Collection[str] | None, options: RankOptions) -> list[str]:
    """The options ``options`` sets away from their defaults that a worker knowing only
    ``known_options`` (:func:`option_names_of`; None: this checkout's, which knows them all) would
    silently run without, :data:`MAY_RUN_WITHOUT` aside."""
    if known_options is None:
        return []
    return [name for name in _set_options(options) if name not in known_options and name not in MAY_RUN_WITHOUT]


def option_names_of(spec_source: str) -> frozenset[str]:
    """The fields of :class:`RankOptions` as the source of a ``harness/rank/spec.py`` declares them:
    what another checkout's worker (an A/B's reference, a bisect's commit) accepts."""
    tree = ast.parse(spec_source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "RankOptions":
            return frozenset(statement.target.id for statement in node.body
                             if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name))
    return frozenset()


def _set_options(options: RankOptions) -> dict[str, Any]:
    """The options set away from their defaults, as JSON values."""
    defaults = {field.name: _default(field) for field in dataclasses.fields(options)}
    return {name: value for name, value in dataclasses.asdict(options).items() if value != defaults[name]}


def _default(field: dataclasses.Field) -> Any:
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
