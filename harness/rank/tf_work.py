"""Counted work of a TensorFlow rank's step (:mod:`harness.rank.work`), read from the graphs the step
runs: the training step's traced functions (forward and backward, then the update), once each.

TensorFlow runs each as one graph, so what the step does is the graph: its operations by type
(``operators``), their FLOPs by TensorFlow's own registered statistics, the ones
``tf.compat.v1.profiler`` with ``float_operation()`` sums (``flops``, forward and backward told
apart by the gradient tape's name scope, the update's graph the optimizer's phase), and its
collective operations with the bytes of their inputs (``collectives``: the strategy's
``CollectiveReduceV2``, Horovod's ``HorovodAllreduce``...). A conditional whose predicate is a
constant (Horovod's "more than one rank?") is followed into the branch it takes; one decided at
run time, or a loop, cannot be counted from the graph and is said so.

What this misses: the graph is the traced one, before Grappler's rewrites and oneDNN's fusions
(operations it fuses or removes are counted as traced); operations without a registered statistic
(``Relu``, ``FusedBatchNormV3``, a pad or a copy) count no FLOPs; TensorFlow
counts some elementwise operations (``Mul``, ``AddN``, ``Mean``) that torch's counter does not.
"""
from __future__ import annotations

import collections
import re
from typing import Iterable

import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops

from harness.rank.work import COUNTED_STEPS, CollectiveTally, NotCounted, WorkCounter, kernels_not_counted

COLLECTIVE_OPS = {
    "CollectiveReduce": "all_reduce", "CollectiveReduceV2": "all_reduce", "CollectiveReduceV3": "all_reduce",
    "NcclAllReduce": "all_reduce", "CollectiveGather": "all_gather", "CollectiveGatherV2": "all_gather",
    "CollectiveBcastSend": "broadcast", "CollectiveBcastSendV2": "broadcast",
    "CollectiveAllToAllV2": "all_to_all", "CollectiveAllToAllV3": "all_to_all",
    "HorovodAllreduce": "all_reduce", "HorovodGroupedAllreduce": "all_reduce",
    "HorovodAllgather": "all_gather", "HorovodGroupedAllgather": "all_gather", "HorovodBroadcast": "broadcast",
    "HorovodAlltoall": "all_to_all", "HorovodReducescatter": "reduce_scatter",
    "HorovodGroupedReducescatter": "reduce_scatter",
}
"""TensorFlow's and Horovod's collective operations by the kind of collective they are."""

DATA_INPUTS = {"CollectiveReduce": 1, "CollectiveReduceV2": 1, "CollectiveReduceV3": 1, "CollectiveGather": 1,
               "CollectiveGatherV2": 1, "CollectiveBcastSend": 1, "CollectiveBcastSendV2": 1,
               "CollectiveAllToAllV2": 1, "CollectiveAllToAllV3": 1}
"""How many of a collective's first inputs are the data (the rest: group size, keys, tokens); a
Horovod operation's inputs are all data, one tensor each (a grouped one, several)."""

CONDITIONALS = {"If", "StatelessIf"}
FUNCTION_CALLS = {"PartitionedCall", "StatefulPartitionedCall"}
LOOPS = {"While", "StatelessWhile", "Case", "StatelessCase"}
BACKWARD_SCOPE = "gradient_tape/"
"""Where a ``tf.GradientTape`` puts the backward's operations."""
SERVER_TASK = re.compile(r"/job:ps/replica:\d+/task:(\d+)/")


class Uncountable(Exception):
    """A graph whose operations cannot all be counted from it (a loop, a branch decided at run time)."""


def graph_operations(graph) -> Iterable:
    """Every operation the graph runs once per call: its own, and those of the functions it calls
    and of the branch a constant predicate takes, recursively."""
    for op in graph.get_operations():
        if op.type in LOOPS:
            raise Uncountable(f"the step's graph holds a {op.type} ({op.name}): how often its body runs is decided "
                              "at run time")
        yield op
        if op.type in CONDITIONALS:
            taken = tf.get_static_value(op.inputs[0])
            if taken is None:
                raise Uncountable(f"the step's graph holds a conditional decided at run time ({op.name})")
            yield from graph_operations(_body(graph, op.get_attr("then_branch" if taken else "else_branch").name))
        elif op.type in FUNCTION_CALLS:
            yield from graph_operations(_body(graph, op.get_attr("f").name))


def _body(graph, name: str):
    return graph._functions[name].graph  # noqa: SLF001 - a FuncGraph keeps the functions it calls here


def operation_flops(op) -> int | None:
    """The FLOPs TensorFlow's registered statistic gives ``op`` (None: it has none)."""
    try:
        value = tf_ops.get_stats_for_node_def(op.graph, op.node_def, "flops").value
    except ValueError:
        return None
    return None if value is None else int(value)


def collective_bytes(op) -> int:
    inputs = list(op.inputs)[:DATA_INPUTS.get(op.type, len(op.inputs))]
    total = 0
    for tensor in inputs:
        if not tensor.shape.is_fully_defined():
            raise Uncountable(f"{op.type} {op.name} has an input of unknown shape {tensor.shape}")
        total += tensor.shape.num_elements() * tensor.dtype.size
    return total


def count_graph(graph, phase_of, counts: GraphCounts, servers: ServerTraffic | None = None) -> None:
    """Count ``graph``'s operations into ``counts``; ``phase_of`` gives an operation's phase, or
    None for one of the harness's own (its clocks) that is not counted. ``servers``: a parameter
    server's step, whose pushes and pulls are counted too."""
    for op in graph_operations(graph):
        phase = phase_of(op)
        if phase is None:
            continue
        if servers:
            servers.count(op, counts)
        counts.operators[op.type] += 1
        if (flops := operation_flops(op)) is not None:
            counts.flops_by_type[op.type] += flops
            counts.flops_by_phase[phase] += flops
        if op.type in COLLECTIVE_OPS:
            for tensor_bytes in ([collective_bytes(op)] if op.type in DATA_INPUTS else
                                 [collective_bytes_of(tensor, op) for tensor in op.inputs]):
                counts.tally.add(COLLECTIVE_OPS[op.type], tensor_bytes)


def server_variables(graph) -> dict[str, int]:
    """The tensors ``graph`` holds for variables a parameter server keeps, by name, and the server
    (its ``ps`` task) that keeps each: the resource handles the traced step captured."""
    held = {}
    for external, internal in graph.captures:
        if internal.dtype == tf.resource and (task := SERVER_TASK.search(getattr(external, "device", "") or "")):
            held[internal.name] = int(task.group(1))
    return held


class ServerTraffic:
    """What a worker's step sends to parameter servers and takes from them, from where the step's
    operations run: a tensor made on the worker that an operation on a server takes is pushed to
    that server, a tensor a server makes that an operation on the worker takes is pulled from it;
    once per tensor and device, as TensorFlow sends it where it partitions the graph (a Send and
    a Recv). An operation runs on a server where it is placed there (the optimizer's update, by
    the strategy), takes a server's variable (TensorFlow colocates it with the variable) or is
    colocated with one that does; every other one on the worker. A tensor one server sends another
    (the learning rate for another server's update) is neither a push nor a pull: not counted."""

    def __init__(self, graph):
        self.servers = server_variables(graph)
        self.placed: dict[str, int | None] = {}
        self.sent: set[tuple[str, int | None]] = set()

    def server_of(self, op) -> int | None:
        """The server ``op`` runs on; None for the worker."""
        if op.name not in self.placed:
            self.placed[op.name] = self._placement(op)
        return self.placed[op.name]

    def _placement(self, op) -> int | None:
        if task := SERVER_TASK.search(op.device or ""):
            return int(task.group(1))
        held = [self.servers[tensor.name] for tensor in [*op.inputs, *op.outputs] if tensor.name in self.servers]
        if held:
            return held[0]
        for group in op.colocation_groups():
            other = group.decode().removeprefix("loc:@")
            if other != op.name:
                return self.server_of(op.graph.get_operation_by_name(other))
        return None

    def count(self, op, counts: GraphCounts) -> None:
        if op.type in FUNCTION_CALLS | CONDITIONALS | LOOPS and any(t.name in self.servers for t in op.inputs):
            raise Uncountable(f"{op.type} {op.name} takes a parameter server's variable into a function: what its "
                              "body sends and takes is not counted from the step's graph")
        here = self.server_of(op)
        for tensor in op.inputs:
            there = self.server_of(tensor.op)
            if there == here or tensor.dtype == tf.resource or (tensor.name, here) in self.sent:
                continue
            self.sent.add((tensor.name, here))
            if here is not None and there is not None:
                continue  # between servers: not the worker's
            server, kind = (here, "push") if there is None else (there, "pull")
            nbytes = collective_bytes_of(tensor, op)
            counts.tally.add(kind, nbytes)
            counts.served[server].add(kind, nbytes)


def collective_bytes_of(tensor, op) -> int:
    if not tensor.shape.is_fully_defined():
        raise Uncountable(f"{op.type} {op.name} has an input of unknown shape {tensor.shape}")
    return tensor.shape.num_elements() * tensor.dtype.size


class GraphCounts:
    def __init__(self):
        self.operators: collections.Counter = collections.Counter()
        self.flops_by_type: collections.Counter = collections.Counter()
        self.flops_by_phase: collections.Counter = collections.Counter()
        self.tally = CollectiveTally()
        self.served: collections.defaultdict = collections.defaultdict(CollectiveTally)
        """A parameter server's share of :attr:`tally`, by server."""

    def to_json(self) -> dict:
        phases = {"forward": self.flops_by_phase["forward"], "backward": self.flops_by_phase["backward"],
                  **({"optimizer": self.flops_by_phase["optimizer"]} if self.flops_by_phase["optimizer"] else {})}
        return {"operators": dict(sorted(self.operators.items())),
                "flops": {"total": sum(self.flops_by_type.values()), "by_operator": dict(sorted(self.flops_by_type.items())),
                          "by_phase": phases},
                "collectives": self.tally.to_json()}


def step_phase(function_phase: str):
    """The phase of an operation of a function the step calls as ``function_phase``: the update's
    are the optimizer's; forward and backward's, backward where the gradient tape made them."""
    if function_phase == "optimizer":
        return lambda op: "optimizer"
    return lambda op: "backward" if BACKWARD_SCOPE in op.name else "forward"


class TFWorkCounter(WorkCounter):
    """Counts a TensorFlow rank's step from the graphs of the traced functions its adapter calls
    (``adapter``: a :class:`~harness.rank.frameworks.traced.TracedCalls`), and the allocator's peak where TensorFlow gives one."""

    def __init__(self, adapter: TracedCalls, device):
        self.adapter, self.device = adapter, device

    def start(self) -> None:
        self.memory = AllocatorPeak(self.device)
        self.memory.start()
        self.adapter.calls = []

    def stop(self) -> dict:
        calls, self.adapter.calls = self.adapter.calls, None
        memory = self.memory.stop()
        if not calls:
            raise NotCounted("the adapter called no traced function in the counted step")
        counts = GraphCounts()
        not_counted = {"gpu": kernels_not_counted("TensorFlow", self.device.type == "cuda")}
        try:
            for phase, function, args in calls:
                count_graph(function.get_concrete_function(*args).graph, step_phase(phase), counts)
        except Uncountable as why:
            work = {}
            not_counted.update({part: str(why) for part in ("operators", "flops", "collectives")})
        else:
            work = counts.to_json()
        return {**work, **memory, "not_counted": {**not_counted, **memory.get("not_counted", {})}}


class AllocatorPeak:
    """The peak of TensorFlow's allocator over the step, on a GPU (``get_memory_info``, reset
    before the step); a CPU's allocator keeps no peak TensorFlow gives out, which is said."""

    def __init__(self, device):
        self.device = device

    def start(self) -> None:
        if self.device.type == "cuda":
            tf.config.experimental.reset_memory_stats("GPU:0")

    def stop(self) -> dict:
        if self.device.type != "cuda":
            return {"not_counted": {"memory": "TensorFlow gives its allocator's peak on a GPU only "
                                              "(tf.config.experimental.get_memory_info)"}}
        info = tf.config.experimental.get_memory_info("GPU:0")
        return {"memory": {"allocator_peak_bytes": int(info["peak"])}}


UPDATE_SCOPE = "update/"
"""Where a parameter server's step (harness.rank.tfkeras.coordinator) puts the optimizer's update."""
HARNESS_SCOPE = "dlscale/"
"""Where it puts what the harness adds to the step (its clocks, the batch's taking): not counted."""


def parameter_server_phase(op) -> str | None:
    """The phase of an operation of a parameter server's one-function step: the harness's own are
    not counted, the update is the optimizer's, the gradient tape's the backward."""
    if op.name.startswith(HARNESS_SCOPE):
        return None
    return "optimizer" if op.name.startswith(UPDATE_SCOPE) else "backward" if BACKWARD_SCOPE in op.name else "forward"


def parameter_server_work(graph, *, workers: int, servers: int, batch_size: int, gpu: bool) -> tuple[dict, dict]:
    """A parameter-server worker's ``work`` a step, from the graph of the step the coordinator
    sends every worker (the same for each), and each server's share of it by worker (as the
    harness's own servers count it, harness.rank.frameworks.torch_ps.served_work).

    Every worker runs this graph each step: its operations, FLOPs, and what it pushes to the
    servers and pulls from them with the bytes (:class:`ServerTraffic`), counted from the graph
    rather than in a step after the window, since the coordinator runs none. The batch's images are
    the workload's; what TensorFlow's worker reads to make them is not counted, nor its memory."""
    counts = GraphCounts()
    not_counted = {"gpu": kernels_not_counted("TensorFlow", gpu),
                   "memory": "a parameter-server worker's steps run in TensorFlow's worker, whose allocator's peak "
                             "is not read",
                   "data": "TensorFlow's worker makes the batch from the per-worker dataset: what it read is not counted"}
    try:
        count_graph(graph, parameter_server_phase, counts, servers=ServerTraffic(graph))
    except Uncountable as why:
        reason = str(why)
        work = {"not_counted": {**not_counted, **{part: reason for part in ("operators", "flops", "collectives")}}}
        return work, {"not_counted": reason}
    work = {**counts.to_json(), "data": {"images": batch_size}, "not_counted": not_counted, "steps": COUNTED_STEPS}
    served = {str(server): {"by_worker": {str(worker): counts.served[server].to_json() for worker in range(workers)},
                            "steps": COUNTED_STEPS}
              for server in range(servers)}
    return work, served
