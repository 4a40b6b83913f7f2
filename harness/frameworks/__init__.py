"""Framework adapters, one module each, registered by name and imported on first use."""
from __future__ import annotations

from ..registry import Entry, Registry

_FRAMEWORKS_SCRIPT = "bash ci/install_frameworks.sh .venv"
_HOROVOD = {"requires": "horovod", "install": f"{_FRAMEWORKS_SCRIPT} (builds Horovod against your torch)",
            "stack": {"horovod": "horovod"}, "uses_mpi": True}
_DEEPSPEED = {"requires": "deepspeed", "install": f"pip install 'dlscale[deepspeed]' or {_FRAMEWORKS_SCRIPT}",
              "stack": {"deepspeed": "deepspeed"}}

FRAMEWORKS = Registry("framework", {
    "ddp": Entry("harness.frameworks.ddp:DDPAdapter"),
    "horovod": Entry("harness.frameworks.horovod:HorovodAdapter", **_HOROVOD),
    "deepspeed": Entry("harness.frameworks.deepspeed:DeepSpeedAdapter", **_DEEPSPEED),
    "deepspeed_zero1": Entry("harness.frameworks.deepspeed:DeepSpeedAdapter", {"zero_stage": 1}, **_DEEPSPEED),
    "deepspeed_zero2": Entry("harness.frameworks.deepspeed:DeepSpeedAdapter", {"zero_stage": 2}, **_DEEPSPEED),
})
