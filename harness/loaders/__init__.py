"""Data loaders, one module each, registered by name and imported on first use."""
from __future__ import annotations

from ..registry import Entry, Registry

LOADERS = Registry("loader", {
    "synthetic": Entry("harness.loaders.synthetic:SyntheticLoader"),
    "native": Entry("harness.loaders.native:NativeLoader"),
})

# Loaders that read the ImageFolder tree given by --data (or the generated dataset).
FILE_LOADERS = frozenset({"native"})
