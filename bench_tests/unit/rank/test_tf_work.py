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
