"""Data loaders, one module each, registered by name and imported on first use."""
from __future__ import annotations

from harness.common.registry import Entry, Registry

_DALI = "harness.rank.loaders.dali:DaliLoader"
_NEEDS_DALI = {"requires": "nvidia.dali", "install": "pip install 'dlscale[dali]' or bash ci/install_dali.sh .venv",
               "stack": {"dali": "nvidia-dali-*"}}

LOADERS = Registry("loader", {
    "synthetic": Entry("harness.rank.loaders.synthetic:SyntheticLoader"),
    "native": Entry("harness.rank.loaders.native:NativeLoader"),
    "dali-cpu": Entry(_DALI, {"decode_device": "cpu"}, **_NEEDS_DALI),
    "dali-cpu-tfrecord": Entry(_DALI, {"decode_device": "cpu", "reader": "tfrecord"}, **_NEEDS_DALI),
    "dali-gpu": Entry(_DALI, {"decode_device": "mixed"}, needs_gpu=True, **_NEEDS_DALI),
    "dali-gpu-tfrecord": Entry(_DALI, {"decode_device": "mixed", "reader": "tfrecord"}, needs_gpu=True, **_NEEDS_DALI),
})

# Loaders that read the ImageFolder tree given by --data (or the generated dataset).
FILE_LOADERS = frozenset({"native", "dali-cpu", "dali-gpu"})
# Loaders that read the TFRecord shards given by --data-tfrecord (or the generated dataset's).
TFRECORD_LOADERS = frozenset({"dali-cpu-tfrecord", "dali-gpu-tfrecord"})
