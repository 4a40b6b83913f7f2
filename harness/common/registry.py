"""Name -> implementation tables whose entries are imported only when their name is asked for."""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from typing import Any, Mapping


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    target: str
    """``"package.module:attribute"``; the module is imported on first use. For a loader or a model:
    its implementation in the torch runtime, ``""`` where torch has none."""
    preset: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments this name fixes (variants are entries, not subclasses)."""
    requires: str | None = None
    """Top-level module that must be importable; checked without importing it."""
    install: str | None = None
    """How to get ``requires``, quoted in the skip reason."""
    needs_gpu: bool = False
    stack: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """The software a cell using this backend runs beyond torch, as the fingerprint names it:
    fact -> the distribution whose version it is (a trailing ``*``: whichever installed
    distribution has that prefix, as DALI's per-CUDA wheels). Its upgrade is named in the verdict."""
    uses_mpi: bool = False
    """The ranks talk through MPI: the MPI library and mpi4py are part of the stack too."""
    knobs: tuple[str, ...] = ()
    """Workload fields only this backend reads: part of its cells' configuration hash, and of no
    other cell's, so that changing one makes only its cells' baselines stale."""
    plot_style: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """How the scaling plots draw this backend's series: matplotlib ``marker`` and ``linestyle``."""
    reads: str | None = None
    """The data a loader reads: ``"folder"`` (an ImageFolder tree), ``"tfrecord"`` (indexed shards)
    or nothing."""
    runtime: str = "torch"
    """A framework's rank runtime (:data:`harness.rank.runtime.RUNTIMES`): the interpreter its ranks
    start in, and which implementation of each loader and model they use."""
    runtimes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """A loader's or model's implementations in runtimes other than torch's, ``"module:attribute"``
    by runtime name."""
    dtypes: tuple[str, ...] = ("fp32",)
    """The arithmetic a framework's adapter trains in (:mod:`harness.rank.numerics`)."""
    model_forms: tuple[str, ...] = ()
    """What a framework's cells may make of the model beyond its dtype: ``channels_last`` tensors, a
    ``compiled`` model (:mod:`harness.rank.numerics`). Only what has been run is claimed: Horovod
    and DeepSpeed send their tensors as contiguous memory, which channels-last weights are not."""
    published_speed: float | None = None
    """A framework's throughput over PyTorch DDP's (synchronous all-reduce) as seed 004 measured image
    classification on CPU clusters, shown beside the measured ratio (:mod:`harness.report.framework_comparison`)."""
    fused_all_reduce_bytes: int | None = None
    """A framework's gradient exchange as the scaling model (:mod:`harness.report.scaling_model`)
    describes it: ring all-reduces of this many bytes each (DDP's buckets, Horovod's fusion buffer);
    None where its collectives are not that (ZeRO's reduce-scatter and gather, parameter servers)."""


class Registry:
    def __init__(self, kind: str, entries: Mapping[str, Entry]):
        self.kind = kind
        self._entries = dict(entries)

    def names(self) -> list[str]:
        return list(self._entries)

    def entry(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; valid names: {', '.join(self._entries)}") from None

    def check(self, name: str) -> None:
        self.entry(name)

    def distributions(self) -> set[str]:
        """Every distribution some entry's stack names (``*`` patterns as written)."""
        return {distribution for entry in self._entries.values() for distribution in entry.stack.values()}

    def missing(self, name: str) -> str | None:
        """Why ``name`` cannot run here (its package is not installed), or None."""
        entry = self.entry(name)
        if entry.requires and importlib.util.find_spec(entry.requires) is None:
            return f"{self.kind} {name} needs {entry.requires}, not installed here; install: {entry.install}"
        return None

    def target(self, name: str, runtime: str = "torch") -> str | None:
        """Where ``name`` is implemented for ``runtime``, or None where it is not."""
        entry = self.entry(name)
        return (entry.target if runtime == "torch" else entry.runtimes.get(runtime)) or None

    def runtimes_of(self, name: str) -> list[str]:
        """The runtimes that implement ``name``."""
        entry = self.entry(name)
        return (["torch"] if entry.target else []) + list(entry.runtimes)

    def resolve(self, name: str, runtime: str = "torch") -> Any:
        target = self.target(name, runtime)
        if target is None:
            raise ValueError(f"{self.kind} {name} has no {runtime} implementation; "
                             f"it has: {', '.join(self.runtimes_of(name)) or 'none'}")
        module, _, attribute = target.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def create(self, name: str, /, **kwargs: Any) -> Any:
        return self.create_in("torch", name, **kwargs)

    def create_in(self, runtime: str, name: str, /, **kwargs: Any) -> Any:
        """``name``'s implementation for ``runtime``, made with its preset and ``kwargs``."""
        return self.resolve(name, runtime)(**{**self.entry(name).preset, **kwargs})
