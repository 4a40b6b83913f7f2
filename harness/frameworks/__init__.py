"""Framework adapters, one module each, registered by name and imported on first use."""
from __future__ import annotations

from ..registry import Entry, Registry

FRAMEWORKS = Registry("framework", {
    "ddp": Entry("harness.frameworks.ddp:DDPAdapter"),
})
