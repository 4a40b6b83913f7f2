"""Counted work of an MXNet rank's step (:mod:`harness.rank.work`).

- ``operators``: what MXNet's profiler counts in its aggregate statistics over the step, by the name
  it gives: the hybridised graph runs in bulked segments, each named by the operators it holds
  (cut at 128 characters), and the update's operators one by one (``multi_sgd_mom_update``);
- ``flops``: the forward pass's, from the hybridised model's graph: each convolution's and fully
  connected layer's multiply-adds from the shapes MXNet infers for it, two FLOPs each. MXNet counts
  no FLOPs itself, and its graph holds no backward, so the backward's and the update's are not said;
- ``collectives``: the kvstore's pushes and pulls with their bytes, counted where the Trainer calls
  the store (:meth:`harness.rank.frameworks.mxnet.MXNetAdapter.counting_collectives`);
- ``memory``: not counted: MXNet 1.9 gives a GPU's free and total memory, no allocator's peak.
"""
from __future__ import annotations

import json
import math
import os
import tempfile

import mxnet as mx

from harness.rank.work import CollectiveTally, NotCounted, WorkCounter, kernels_not_counted

FLOP_LAYERS = ("Convolution", "FullyConnected")


def forward_flops(model, data_shape: tuple) -> dict:
    """FLOPs of one forward pass of the hybridised ``model`` on a batch of ``data_shape``, by
    operator: output elements times the multiply-adds each takes (its weight's shape past the first
    axis: input channels per group times the kernel), two FLOPs each."""
    cached = getattr(model, "_cached_graph", None)
    if not cached:
        raise NotCounted("the model has no hybridised graph to read its layers from")
    inputs, symbol = cached
    internals = symbol.get_internals()
    _, shapes, _ = internals.infer_shape(**{inputs[0].name: tuple(data_shape)})
    shape_of = dict(zip(internals.list_outputs(), shapes))
    nodes = json.loads(symbol.tojson())["nodes"]
    by_operator: dict[str, int] = {}
    for node in nodes:
        if node["op"] not in FLOP_LAYERS:
            continue
        weight = shape_of[nodes[node["inputs"][1][0]]["name"]]
        output = shape_of[node["name"] + "_output"]
        flops = 2 * math.prod(output) * math.prod(weight[1:])
        by_operator[node["op"]] = by_operator.get(node["op"], 0) + flops
    return by_operator


class MXWorkCounter(WorkCounter):
    """Counts an MXNet rank's step: MXNet's profiler around it, the kvstore's calls through the
    adapter, the forward's FLOPs from the model's graph and the batch the adapter was given."""

    def __init__(self, adapter, device):
        self.adapter, self.device = adapter, device
        self.profile = os.path.join(tempfile.gettempdir(), f"dlscale-mxnet-profile-{os.getpid()}.json")

    def start(self) -> None:
        mx.nd.waitall()
        mx.profiler.set_config(profile_symbolic=True, profile_imperative=True, aggregate_stats=True,
                               filename=self.profile)
        mx.profiler.dumps(reset=True)  # nothing from before the step
        self.tally = CollectiveTally()
        self.collectives = self.adapter.counting_collectives(self.tally)
        self.collectives.__enter__()
        self.adapter.calls = []
        mx.profiler.set_state("run")

    def stop(self) -> dict:
        mx.nd.waitall()
        mx.profiler.set_state("stop")
        self.collectives.__exit__(None, None, None)
        calls, self.adapter.calls = self.adapter.calls, None
        stats = json.loads(mx.profiler.dumps(reset=True, format="json"))
        operators = {name: int(entry["Count"]) for name, entry in stats.get("Time", {}).get("operator", {}).items()}
        batches = [args[0].shape for phase, _, args in calls if phase == "forward_backward"]
        if len(batches) != 1:
            raise NotCounted(f"the counted step called its forward {len(batches)} times through the adapter")
        by_operator = forward_flops(self.adapter.model, batches[0])
        return {"operators": dict(sorted(operators.items())),
                "flops": {"total": sum(by_operator.values()), "by_operator": by_operator,
                          "by_phase": {"forward": sum(by_operator.values())},
                          "phases_not_counted": {
                              "backward": "MXNet counts no FLOPs and its hybridised graph holds no backward",
                              "optimizer": "MXNet counts no FLOPs"}},
                "collectives": self.tally.to_json(),
                "not_counted": {"memory": "MXNet 1.9 gives a GPU's free and total memory, no allocator's peak",
                                "gpu": kernels_not_counted("MXNet", self.device.type == "cuda")}}
