"""A rank runtime: the framework family a rank trains in (torch, TensorFlow, MXNet), behind one small
interface, so that the worker, the training loop and the record are the same for every framework.

A framework's registry entry names its runtime (:attr:`harness.common.registry.Entry.runtime`); a
loader's and a model's entry name their implementation in each runtime. A runtime other than
torch's may live in a virtual environment of its own (MXNet 1.9 needs numpy<1.24): its ranks start
in that environment's interpreter (:func:`interpreter`), found without importing anything.
"""
from __future__ import annotations

import abc
import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.common.registry import Entry, Registry
from harness.rank.clocks import HostClock, StepClock, Sync
from harness.rank.numerics import Numerics
from harness.rank.work import NotCounted, WorkCounter

RUNTIMES = Registry("runtime", {
    "torch": Entry("harness.rank.torch_runtime:TorchRuntime", requires="torch"),
    "tensorflow": Entry("harness.rank.tfkeras.runtime:TensorFlowRuntime", requires="tensorflow",
                        install="bash ci/install_runtimes.sh (a virtual environment .venv-tensorflow)"),
    "mxnet": Entry("harness.rank.gluon.runtime:MXNetRuntime", requires="mxnet",
                   install="bash ci/install_runtimes.sh (a virtual environment .venv-mxnet: MXNet 1.9 needs "
                           "numpy<1.24)"),
})


def rank_interpreter(runtime: str, env=os.environ) -> str | None:
    """The Python a runtime's ranks start in where it is not this one, else None."""
    python = interpreter(runtime, env)
    return None if python == sys.executable else python


def interpreter(runtime: str, env=os.environ) -> str:
    """The Python a runtime's ranks start in: ``$DLSCALE_PYTHON_<RUNTIME>`` when set, else the
    virtual environment beside this one named after it (``.venv`` -> ``.venv-tensorflow``) when it
    exists, else this interpreter."""
    RUNTIMES.check(runtime)
    if runtime == "torch":
        return sys.executable
    if given := env.get(f"DLSCALE_PYTHON_{runtime.upper()}"):
        return given
    beside = Path(f"{sys.prefix}-{runtime}") / "bin" / "python"
    return str(beside) if beside.is_file() else sys.executable


def unavailable(runtime: str, backend: Entry | None = None, env=os.environ) -> str | None:
    """Why ``runtime``'s ranks cannot start here: its interpreter lacks its framework, or the module
    ``backend`` requires (asked of that interpreter, not this one); None when they can."""
    python = interpreter(runtime, env)
    for entry, what in ((RUNTIMES.entry(runtime), f"the {runtime} runtime"), (backend, "the framework")):
        module = entry.requires if entry else None
        if module is None:
            continue
        found = importlib.util.find_spec(module) is not None if python == sys.executable else \
            _importable_in(python, module)
        if not found:
            elsewhere = "" if runtime == "torch" else \
                f" or point DLSCALE_PYTHON_{runtime.upper()} at a Python that has it"
            return f"{what} needs {module}, which {python} cannot import; install: {entry.install}{elsewhere}"
    return None


@functools.lru_cache(maxsize=None)
def _importable_in(python: str, module: str | None) -> bool:
    if not Path(python).is_file():
        return False
    check = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    try:
        return subprocess.run([python, "-c", check], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


class Device:
    """A training device as the record names it (``cpu``, ``cuda:1``), for runtimes without torch's."""

    def __init__(self, type: str, index: int | None = None):
        self.type = type
        self.index = index

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


class RankRuntime(abc.ABC):
    """What one rank needs of its framework family beyond the framework adapter."""

    name: str

    @abc.abstractmethod
    def pick_device(self, requested: str, local_rank: int) -> Any:
        """``cpu`` or this rank's GPU, for ``requested`` ``auto``, ``cpu`` or ``cuda``."""

    @abc.abstractmethod
    def set_threads(self, threads: int) -> None:
        """Compute threads of this rank (its cores)."""

    @abc.abstractmethod
    def seed(self, seed: int) -> None: ...

    @abc.abstractmethod
    def build(self, adapter, model: str, workload, world_size: int, device,
              numerics: Numerics = Numerics()) -> tuple[Any, Any, Any]:
        """The model (randomly initialised, run in ``numerics``), an SGD optimizer with the workload's
        momentum and weight decay at the linearly scaled learning rate, and the label-smoothed
        cross-entropy loss; built where ``adapter`` wants its variables (:meth:`FrameworkAdapter.scope`).
        A runtime whose frameworks train in fp32 alone is never given other numerics (the registry
        says which: :func:`harness.rank.frameworks.numerics_unsupported`)."""

    @abc.abstractmethod
    def probe(self, model, loss_fn, device):
        """A compute probe (:class:`harness.rank.trainloop.ComputeProbe`'s interface): forward and
        backward of a private copy of the unwrapped model, no communication."""

    @abc.abstractmethod
    def sync(self, device) -> Sync:
        """Wait until the device has finished the work queued so far."""

    def clock(self, device) -> StepClock:
        """How the training loop times a step's parts (:mod:`harness.rank.clocks`)."""
        return HostClock(self.sync(device))

    def work_counter(self, adapter, device) -> WorkCounter:
        """What counts the work of ``adapter``'s steps on ``device`` (:mod:`harness.rank.work`);
        raises :class:`~harness.rank.work.NotCounted` saying why where none can."""
        raise NotCounted(f"the {self.name} runtime does not count its steps' work")

    @abc.abstractmethod
    def loader(self, name: str, workload, rank, device):
        """The loader ``name``'s implementation in this runtime (:class:`harness.rank.loaders.base.Loader`'s
        interface: endless batches, ``settings()``, ``close()``)."""
