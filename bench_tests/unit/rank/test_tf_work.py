"""A TensorFlow step's work counted from its graphs (harness.rank.tf_work), in TensorFlow's own
environment: FLOPs by phase of a layer whose FLOPs are known, the branch a constant conditional
takes, and what cannot be counted from a graph (a branch or a loop decided at run time)."""
import json
import subprocess

import pytest

from harness.launch.launchers import with_harness_importable
from harness.rank.runtime import interpreter, unavailable
from harness.rank.frameworks import FRAMEWORKS

from bench_tests.components import framework_component, needs

SCRIPT = r"""
import json, os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
from harness.rank.frameworks.traced import TracedCalls
from harness.rank.runtime import Device
from harness.rank.tf_work import TFWorkCounter, Uncountable, graph_operations

kernel = tf.Variable(tf.ones((4, 3)))
optimizer_matrix = tf.ones((3, 3))

@tf.function(autograph=False)
def forward_backward(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.matmul(x, kernel))
    return tape.gradient(loss, kernel)

@tf.function(autograph=False)
def apply(gradient):
    kernel.assign_sub(tf.matmul(gradient, optimizer_matrix))  # an update with a matrix product: 4x3 by 3x3

class Adapter(TracedCalls):
    pass

adapter, x = Adapter(), tf.ones((2, 4))
counter = TFWorkCounter(adapter, Device("cpu"))
apply(forward_backward(x))
counter.start()
apply(adapter.traced("forward_backward", forward_backward, x))  # the optimizer's call is not traced: not counted
adapter.traced("optimizer", apply, forward_backward(x))
work = counter.stop()

@tf.function(autograph=False)
def constant_branch(x):
    return tf.cond(tf.constant(True), lambda: tf.matmul(x, kernel), lambda: tf.zeros((2, 3)))

@tf.function(autograph=False)
def runtime_branch(x):
    return tf.cond(tf.reduce_sum(x) > 0, lambda: tf.matmul(x, kernel), lambda: tf.zeros((2, 3)))

@tf.function(autograph=False)
def loop(x):
    return tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2.0), (0, x))

def said(function):
    try:
        return sorted(op.type for op in graph_operations(function.get_concrete_function(x).graph))
    except Uncountable as why:
        return str(why)

print(json.dumps({"work": work, "constant": said(constant_branch), "runtime": said(runtime_branch), "loop": said(loop)}))
"""


@pytest.fixture(scope="module")
def counted():
    needs(framework_component("tensorflow"), unavailable("tensorflow", FRAMEWORKS.entry("tensorflow")))
    done = subprocess.run([interpreter("tensorflow"), "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                          env=with_harness_importable(__import__("os").environ))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_known_layers_flops_are_counted_by_phase(counted):
    """Forward: a 2x4 by 4x3 product, 24 multiply-adds, and the sum of its 6 outputs, 5 additions;
    backward: the kernel's gradient, 4x2 by 2x3, 24 (the sum's gradient is a fill: none); the
    update: 4x3 by 3x3, 36 (the subtraction in place has no statistic: none)."""
    flops = counted["work"]["flops"]
    assert flops["by_phase"] == {"forward": 2 * 24 + 5, "backward": 2 * 24, "optimizer": 2 * 36}
    assert flops["by_operator"]["MatMul"] == 2 * (24 + 24 + 36)
    assert counted["work"]["operators"]["MatMul"] == 3
    assert counted["work"]["collectives"] == {}
    assert counted["work"]["not_counted"]["memory"].startswith("TensorFlow gives its allocator's peak on a GPU only")


def test_a_constant_conditional_is_followed_into_its_branch_and_one_decided_at_run_time_is_not_counted(counted):
    assert counted["constant"].count("MatMul") == 1 and "StatelessIf" in counted["constant"] + ["StatelessIf"]
    assert "conditional decided at run time" in counted["runtime"]
    assert "While" in counted["loop"] and "decided at run time" in counted["loop"]


PARAMETER_SERVER_SCRIPT = r"""
import json, os, socket
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import keras
import tensorflow as tf
from harness.rank.tfkeras.coordinator import counted_step, step_closure

def address():
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{free.getsockname()[1]}"

jobs = {"chief": [address()], "worker": [address()], "ps": [address(), address()]}
cluster = tf.train.ClusterSpec(jobs)
for job in ("worker", "ps"):  # every task in this process: the strategy cannot tell
    for index in range(len(jobs[job])):
        tf.distribute.Server(cluster, job_name=job, task_index=index, protocol="grpc", start=True)
strategy = tf.distribute.ParameterServerStrategy(
    tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, task_type="chief", task_id=0, rpc_layer="grpc"))
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(4)])
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
def loss_fn(logits, labels):  # the harness's order (harness.rank.tfkeras.runtime)
    return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
dataset = coordinator.create_per_worker_dataset(
    lambda: tf.data.Dataset.from_tensors((tf.ones((2, 8)), tf.zeros((2,), tf.int32))).repeat())
iterator = iter(dataset)
step = step_closure(strategy, model, optimizer, loss_fn, global_batch=2)
coordinator.schedule(step, args=(iterator,))
coordinator.join()
work, served = counted_step(step, workers=3, servers=2, batch_size=2, gpu=False)
step.get_concrete_function(iterator)  # a second trace: which one the workers ran is no longer known
retraced, retraced_served = counted_step(step, workers=3, servers=2, batch_size=2, gpu=False)
print(json.dumps({"work": work, "served": served, "retraced": retraced, "retraced_served": retraced_served}))
os._exit(0)  # the strategy's threads would keep the interpreter from ending
"""


@pytest.fixture(scope="module")
def parameter_server_step():
    needs(framework_component("tensorflow_ps_async"), unavailable("tensorflow", FRAMEWORKS.entry("tensorflow")))
    done = subprocess.run([interpreter("tensorflow"), "-c", PARAMETER_SERVER_SCRIPT], capture_output=True, text=True,
                          timeout=300, env=with_harness_importable(__import__("os").environ))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


DENSE_BYTES = 4 * (8 * 16 + 16 + 16 * 4 + 4)
"""The two dense layers' kernels and biases, float32."""
STEP_COUNT_BYTES = 8
"""The optimizer's step count, an int64 the update reads, adds one to and writes back."""


def test_a_parameter_server_step_pulls_every_variable_once_and_pushes_its_gradient_once(parameter_server_step):
    """The coordinator's own step (step_closure) counted from its graph: each of the 4 variables
    and the step count pulled once and their gradients (and the new count) pushed once, whichever
    server keeps each; the learning rate one server reads for the other's update is theirs."""
    collectives = parameter_server_step["work"]["collectives"]
    assert collectives == {"pull": {"calls": 5, "bytes": DENSE_BYTES + STEP_COUNT_BYTES},
                           "push": {"calls": 5, "bytes": DENSE_BYTES + STEP_COUNT_BYTES}}
    served = parameter_server_step["served"]
    assert set(served) == {"0", "1"} and all(set(server["by_worker"]) == {"0", "1", "2"} for server in served.values())
    for kind in ("push", "pull"):  # the servers' shares add up to the worker's
        shares = [server["by_worker"]["0"][kind] for server in served.values()]
        assert [sum(share[field] for share in shares) for field in ("calls", "bytes")] == \
            [collectives[kind]["calls"], collectives[kind]["bytes"]]
        assert all(share["calls"] for share in shares)  # the strategy spreads the variables over both


def test_a_parameter_server_steps_harness_clocks_are_not_counted_and_its_update_is_the_optimizers(
        parameter_server_step):
    work = parameter_server_step["work"]
    assert not {"Timestamp", "ReadFile", "StringSplit", "IteratorGetNextAsOptional", "IteratorGetNext"} & \
        set(work["operators"])
    phases = work["flops"]["by_phase"]
    assert phases["forward"] >= 2 * 2 * (8 * 16 + 16 * 4)  # two matrix products of a batch of 2
    assert phases["backward"] > 0 and phases["optimizer"] > 0  # the update's products by the learning rate
    assert work["data"] == {"images": 2}
    assert set(work["not_counted"]) == {"gpu", "memory", "data"}


def test_a_parameter_server_step_that_cannot_be_counted_says_why_and_fails_nothing(parameter_server_step):
    said = parameter_server_step["retraced"]["not_counted"]
    assert set(said) >= {"flops", "operators", "collectives"} and "traced 2 times" in said["collectives"]
    assert "collectives" not in parameter_server_step["retraced"]
    assert "traced 2 times" in parameter_server_step["retraced_served"]["not_counted"]
