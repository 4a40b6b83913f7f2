"""One rank of TensorFlow's own multi-worker loop, as its tutorial "Custom training loop with Keras and
MultiWorkerMirroredStrategy" writes it: ``TF_CONFIG``, ``tf.distribute.MultiWorkerMirroredStrategy``,
a Keras model and optimizer made in the strategy's scope, and a ``tf.function`` that runs
``strategy.run(step)``, each step computing the loss with ``tf.nn.compute_average_loss`` and
applying the gradients with ``optimizer.apply_gradients`` (which all-reduces them). Its
``model.fit`` tutorial fails with Keras 3 at two workers ("Attempt to convert a value (PerReplica
...)", keras-team/keras#20585, open). The reference the harness's TensorFlow cells are checked
against (test_reference_loops.py); it imports nothing from the harness and writes the same
``rank<R>.json`` as reference_loops.py.

    mpirun -np 2 --map-by slot:PE=1 --bind-to core .venv-tensorflow/bin/python \
        -m bench_tests.benchmarks.reference_loop_keras --framework tensorflow --batch 16 ... --out DIR
"""
from __future__ import annotations

import json
import os
import socket
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench_tests.benchmarks.reference_common import parse, timed_window  # noqa: E402


def main(argv: list[str]) -> int:
    args = parse(argv, frameworks=("tensorflow",))
    rank, world = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0)), int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
    if world > 1:  # one host: the workers listen on the ports after the launch's
        base = int(os.environ.get("MASTER_PORT", "29500")) + 1
        os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{base + r}" for r in range(world)]},
                                              "task": {"type": "worker", "index": rank}})
    import keras
    import tensorflow as tf

    cores = sorted(os.sched_getaffinity(0))
    tf.config.threading.set_intra_op_parallelism_threads(len(cores))
    tf.config.threading.set_inter_op_parallelism_threads(len(cores))
    keras.utils.set_random_seed(1234)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras.applications.ResNet50(weights=None, input_shape=(args.image_size, args.image_size, 3),
                                            classes=args.classes, classifier_activation=None)
        optimizer = keras.optimizers.SGD(learning_rate=args.lr * world, momentum=args.momentum,
                                         weight_decay=args.weight_decay)
    loss_object = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=args.label_smoothing,
                                                       reduction=None)
    images = tf.random.normal((args.batch, args.image_size, args.image_size, 3), seed=rank)
    labels = tf.one_hot(tf.random.uniform((args.batch,), maxval=args.classes, dtype=tf.int32, seed=rank),
                        args.classes)

    def step(images, labels):
        with tf.GradientTape() as tape:
            per_example = loss_object(labels, model(images, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=args.batch * world)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    @tf.function
    def train_step(images, labels):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step, args=(images, labels)), axis=None)

    for _ in range(args.warmup):
        train_step(images, labels)
    float(strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None))  # barrier
    step_times, window, threads, loss = timed_window(lambda: train_step(images, labels), args.steps)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{rank}.json").write_text(json.dumps({
        "framework": args.framework, "rank": rank, "host": socket.gethostname(), "pid": os.getpid(),
        "cores": cores, "threads": len(cores), "step_times": step_times, "images": args.batch * args.steps,
        "window_s": window, "final_loss": float(loss), "window_threads": threads,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
