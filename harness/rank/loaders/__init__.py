"""Data loaders, one module each, registered by name and imported on first use."""
from __future__ import annotations

from harness.common.registry import Entry, Registry

_DALI = "harness.rank.loaders.dali:DaliLoader"
_NEEDS_DALI = {"requires": "nvidia.dali", "install": "pip install 'dlscale[dali]' or bash ci/install_dali.sh .venv",
               "stack": {"dali": "nvidia-dali-*"}, "knobs": ("data_format", "dali_threads", "prefetch")}


def _style(marker: str, linestyle: str) -> dict[str, str]:
    return {"marker": marker, "linestyle": linestyle}


_TF = "harness.rank.tfkeras.loaders"
_MX = "harness.rank.gluon.loaders"

LOADERS = Registry("loader", {
    "synthetic": Entry("harness.rank.loaders.synthetic:SyntheticLoader", plot_style=_style("o", "-"),
                       runtimes={"tensorflow": "harness.rank.tfkeras.synthetic:SyntheticLoader",
                                 "mxnet": "harness.rank.gluon.synthetic:SyntheticLoader"}),
    # each framework's own pipeline: torch's DataLoader, tf.data, Gluon's DataLoader
    "native": Entry("harness.rank.loaders.native:NativeLoader", knobs=("num_workers",), reads="folder",
                    plot_style=_style("s", "--"),
                    runtimes={"tensorflow": f"{_TF}:FolderLoader", "mxnet": f"{_MX}:FolderLoader"}),
    # TensorFlow's own reader of the TFRecord shards (torch has none: its cells read them through DALI)
    "native-tfrecord": Entry("", knobs=("num_workers",), reads="tfrecord", plot_style=_style("X", "--"),
                             runtimes={"tensorflow": f"{_TF}:TFRecordLoader"}),
    "dali-cpu": Entry(_DALI, {"decode_device": "cpu"}, reads="folder", plot_style=_style("^", "-."), **_NEEDS_DALI),
    "dali-cpu-tfrecord": Entry(_DALI, {"decode_device": "cpu", "reader": "tfrecord"}, reads="tfrecord",
                               plot_style=_style("v", "-."), **_NEEDS_DALI),
    "dali-gpu": Entry(_DALI, {"decode_device": "mixed"}, needs_gpu=True, reads="folder", plot_style=_style("D", ":"),
                      **_NEEDS_DALI),
    "dali-gpu-tfrecord": Entry(_DALI, {"decode_device": "mixed", "reader": "tfrecord"}, needs_gpu=True,
                               reads="tfrecord", plot_style=_style("P", ":"), **_NEEDS_DALI),
})

FILE_LOADERS = frozenset(name for name in LOADERS.names() if LOADERS.entry(name).reads == "folder")
"""Loaders that read the ImageFolder tree given by --data (or the generated dataset)."""
TFRECORD_LOADERS = frozenset(name for name in LOADERS.names() if LOADERS.entry(name).reads == "tfrecord")
"""Loaders that read the TFRecord shards given by --data-tfrecord (or the generated dataset's)."""
