"""What Horovod's adapters share, for torch and for TensorFlow: its tuning knobs, the controller a
launch needs, the checks at start-up and the settings a record keeps. Imports neither framework."""
from __future__ import annotations

import importlib
import os
from typing import Any, Mapping

from harness.rank.rankenv import RankInfo

# Horovod 0.28's values when the environment sets none (horovod/common/operations.cc).
DEFAULT_FUSION_THRESHOLD_BYTES = 128 * 1024 * 1024
DEFAULT_CYCLE_TIME_MS = 1.0


def import_horovod(module: str, install: str) -> Any:
    """Horovod's binding for one framework (``horovod.torch``, ``horovod.tensorflow``), or an
    ImportError that says how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"{module} does not import here: run `bash {install}` (builds horovod 0.28.1 against "
                          f"the installed framework, then caches the wheel); import failed with: {error}") from error


def controller_wanted(env: Mapping[str, str]) -> str:
    """The controller this launch needs: horovodrun --gloo leaves a rendezvous address, others need MPI."""
    return "gloo" if "HOROVOD_GLOO_RENDEZVOUS_ADDR" in env else "mpi"


class HorovodKnobs:
    """The fusion threshold and cycle time an adapter sets; ``None`` keeps Horovod's own default (or
    what the launcher exported)."""

    def __init__(self, *, fusion_threshold_mb: float | None = None, cycle_time_ms: float | None = None):
        if fusion_threshold_mb is not None and fusion_threshold_mb < 0:
            raise ValueError(f"fusion_threshold_mb must be >= 0, got {fusion_threshold_mb}")
        if cycle_time_ms is not None and cycle_time_ms <= 0:
            raise ValueError(f"cycle_time_ms must be > 0, got {cycle_time_ms}")
        self.fusion_threshold_mb = fusion_threshold_mb
        self.cycle_time_ms = cycle_time_ms

    def export(self) -> None:
        """Horovod reads its tuning knobs from the environment once, in hvd.init()."""
        if self.fusion_threshold_mb is not None:
            os.environ["HOROVOD_FUSION_THRESHOLD"] = str(int(self.fusion_threshold_mb * 1024 * 1024))
        if self.cycle_time_ms is not None:
            os.environ["HOROVOD_CYCLE_TIME"] = str(self.cycle_time_ms)


def init_checked(hvd, rank: RankInfo, install: str) -> None:
    """``hvd.init()`` after checking that Horovod was built with the controller this launch needs,
    then that it sees the launcher's rank and world; each failure says how to mend it."""
    wanted = controller_wanted(os.environ)
    label = {"mpi": "MPI", "gloo": "Gloo"}[wanted]
    built = {"mpi": hvd.mpi_built(), "gloo": hvd.gloo_built()}
    if not built[wanted]:
        raise RuntimeError(
            f"this launch ({rank.source}) needs Horovod's {label} controller but Horovod was built "
            f"without {label}; rebuild it with HOROVOD_WITH_{wanted.upper()}=1 ({install} does) or launch with "
            f"{'mpirun or srun' if wanted == 'gloo' else 'horovodrun --gloo'}")
    if wanted == "mpi" and rank.source == "torchrun" and rank.world_size > 1:
        # (a world of one is fine: MPI starts as a singleton)
        raise RuntimeError("Horovod cannot start under torchrun (no MPI and no Gloo rendezvous): "
                           "launch Horovod cells with mpirun, srun or horovodrun")
    hvd.init()
    if (hvd.rank(), hvd.size()) != (rank.rank, rank.world_size):
        raise RuntimeError(
            f"Horovod's {label} controller sees rank {hvd.rank()} of {hvd.size()} but the "
            f"launcher ({rank.source}) started rank {rank.rank} of {rank.world_size}")


def horovod_settings(hvd) -> dict[str, Any]:
    import horovod

    env = os.environ  # what hvd.init() read, whether an adapter or the launcher set it
    return {
        "version": horovod.__version__,
        "controller": "mpi" if hvd.mpi_enabled() else "gloo" if hvd.gloo_enabled() else None,
        "built": {"mpi": hvd.mpi_built(), "gloo": hvd.gloo_built(), "nccl": bool(hvd.nccl_built())},
        "fusion_threshold_bytes": int(env.get("HOROVOD_FUSION_THRESHOLD", DEFAULT_FUSION_THRESHOLD_BYTES)),
        "cycle_time_ms": float(env.get("HOROVOD_CYCLE_TIME", DEFAULT_CYCLE_TIME_MS)),
        "autotune": env.get("HOROVOD_AUTOTUNE", "0") not in ("", "0"),
    }
