"""Framework adapters, one module each, registered by name and imported on first use."""
from __future__ import annotations

from harness.common.registry import Entry, Registry
from harness.rank.numerics import CHANNELS_LAST, COMPILED, DTYPES, GPU_ONLY, Numerics

_FRAMEWORKS_SCRIPT = "bash ci/install_frameworks.sh .venv"
# DDP, Horovod and DeepSpeed train in every dtype: autocast, and for fp16 a gradient scaler their
# adapters step with (DeepSpeed: its own bf16 and fp16)
_HOROVOD = {"requires": "horovod.torch", "install": f"{_FRAMEWORKS_SCRIPT} (builds Horovod against your torch)",
            "stack": {"horovod": "horovod"}, "uses_mpi": True, "dtypes": DTYPES,
            "fused_all_reduce_bytes": 64 * 2**20}
"""The fusion buffer the scaling model was validated with; the adapter leaves Horovod's own (128 MB
in the releases here, :mod:`harness.rank.frameworks.horovod_common`), so one of the two is stale."""
_DEEPSPEED = {"requires": "deepspeed", "install": f"pip install 'dlscale[deepspeed]' or {_FRAMEWORKS_SCRIPT}",
              "stack": {"deepspeed": "deepspeed"}, "dtypes": DTYPES}
_TORCH_PS_DTYPES = ("fp32", "tf32", "bf16")
"""No gradient scaler: fp16 gradients would underflow before they reach a server."""

_TENSORFLOW = {"runtime": "tensorflow", "stack": {"tensorflow": "tensorflow", "keras": "keras"}}
_MXNET = {"runtime": "mxnet", "stack": {"mxnet": "mxnet"}}
# Seed 004's synchronous ratios over PyTorch (quoted in harness.report.framework_comparison). MXNet
# trains distributed through its kvstore, a parameter server either way here: the mxnet cell's one
# server beside rank 0, or mxnet_ps_sync's serving ranks.
_TENSORFLOW_OVER_TORCH, _MXNET_OVER_TORCH = 1 / 2.65, 1.38
_TORCH_PS = "harness.rank.frameworks.torch_ps:TorchPSAdapter"
_MXNET_PS = "harness.rank.frameworks.mxnet_ps:MXNetPSAdapter"

FRAMEWORKS = Registry("framework", {
    "ddp": Entry("harness.rank.frameworks.ddp:DDPAdapter", dtypes=DTYPES, model_forms=(CHANNELS_LAST, COMPILED),
                 fused_all_reduce_bytes=25 * 2**20),  # torch's default bucket, which the adapter keeps
    "horovod": Entry("harness.rank.frameworks.horovod:HorovodAdapter", **_HOROVOD),
    "deepspeed": Entry("harness.rank.frameworks.deepspeed:DeepSpeedAdapter", **_DEEPSPEED),
    "deepspeed_zero1": Entry("harness.rank.frameworks.deepspeed:DeepSpeedAdapter", {"zero_stage": 1}, **_DEEPSPEED),
    "deepspeed_zero2": Entry("harness.rank.frameworks.deepspeed:DeepSpeedAdapter", {"zero_stage": 2}, **_DEEPSPEED),
    "tensorflow": Entry("harness.rank.frameworks.tensorflow:TensorFlowAdapter", **_TENSORFLOW,
                        published_speed=_TENSORFLOW_OVER_TORCH),
    "horovod_tf": Entry("harness.rank.frameworks.horovod_tf:HorovodTFAdapter", requires="horovod",
                        install="bash ci/install_horovod_tf.sh (builds Horovod against TensorFlow)", uses_mpi=True,
                        runtime="tensorflow", stack={**_TENSORFLOW["stack"], "horovod": "horovod"}),
    "mxnet": Entry("harness.rank.frameworks.mxnet:MXNetAdapter", **_MXNET, published_speed=_MXNET_OVER_TORCH),
    "torch_ps_sync": Entry(_TORCH_PS, {"mode": "sync"}, knobs=("ps_servers",), dtypes=_TORCH_PS_DTYPES),
    "torch_ps_async": Entry(_TORCH_PS, {"mode": "async"}, knobs=("ps_servers",), dtypes=_TORCH_PS_DTYPES),
    "mxnet_ps_sync": Entry(_MXNET_PS, {"mode": "sync"}, knobs=("ps_servers",), **_MXNET,
                           published_speed=_MXNET_OVER_TORCH),
    "mxnet_ps_async": Entry(_MXNET_PS, {"mode": "async"}, knobs=("ps_servers",), **_MXNET),
    "tensorflow_ps_async": Entry("harness.rank.frameworks.tensorflow_ps:TensorFlowPSAdapter", {"mode": "async"},
                                 knobs=("ps_servers",), **_TENSORFLOW),
})


def has_servers(framework: str) -> bool:
    """Whether the framework's cells hold parameter servers beside their workers (``--ps-servers``)."""
    return "ps_servers" in FRAMEWORKS.entry(framework).knobs


def training_ranks(framework: str, ranks: int, ps_servers: int) -> int:
    """How many of a cell's ranks train, each needing a GPU or cores of its own: all but its servers."""
    return ranks - ps_servers if has_servers(framework) else ranks


def serves(framework: str, rank: int, world_size: int, ps_servers: int) -> bool:
    """Whether ``rank`` is one of the cell's parameter servers (the last ranks): it needs no GPU."""
    return rank >= training_ranks(framework, world_size, ps_servers)


def numerics_unsupported(framework: str, numerics: Numerics, *, gpu: bool | None) -> str | None:
    """Why the framework (the dtypes and model forms its registry entry claims) cannot train in
    ``numerics``, on a GPU or not (``gpu`` None: not known yet), or None."""
    entry = FRAMEWORKS.entry(framework)
    if numerics.dtype not in entry.dtypes:
        return f"{framework} trains in {', '.join(entry.dtypes)} here, not {numerics.dtype}"
    forms = [word for word in numerics.words if word != numerics.dtype]
    if lacking := [form for form in forms if form not in entry.model_forms]:
        return f"{framework} cells have no {lacking[0]} model here" + \
            (f" (only {', '.join(entry.model_forms)})" if entry.model_forms else "")
    if gpu is False and numerics.dtype in GPU_ONLY:
        return f"{numerics.dtype} is a GPU arithmetic; these ranks run on CPUs (use fp32 or bf16)"
    return None
