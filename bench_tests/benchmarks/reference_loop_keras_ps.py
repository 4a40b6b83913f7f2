"""One process of TensorFlow's own parameter-server loop, as its tutorial "Parameter server training
with ParameterServerStrategy" writes the custom training loop: a ``ClusterCoordinator`` over the
strategy, a Keras model and optimizer made in the strategy's scope, a per-worker dataset, and a
``tf.function`` step (``strategy.run`` of a replica function that computes the loss with
``tf.nn.compute_average_loss`` and applies the gradients) scheduled step after step, then
``coordinator.join()``. Two settings follow the harness's instead of the tutorial's, so that the
loops differ in their loop only: the optimizer's variables are built in the scope, and the
processes take ``--threads`` kernel threads. The reference the harness's ``tensorflow_ps_async``
cells are checked against (test_reference_loops.py); it imports nothing from the harness.

Of ``W + S + 1`` processes (mpirun's ranks) the first ``W`` are the workers, the next ``--servers``
the parameter servers, the last the coordinator (the tutorial's "chief"), which writes
``coordinator.json``: every worker's images over the timed window, from the first step scheduled to
``join()``. The servers' processes end when the coordinator is done (the tutorial's never do).

    mpirun -np 4 --oversubscribe .venv-tensorflow/bin/python -m bench_tests.benchmarks.reference_loop_keras_ps \
        --framework tensorflow_ps_async --servers 1 --batch 16 ... --out DIR
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench_tests.benchmarks.reference_common import parse  # noqa: E402


def main(argv: list[str]) -> int:
    args = parse(argv, frameworks=("tensorflow_ps_async",))
    rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    workers = world - args.servers - 1
    base = int(os.environ.get("MASTER_PORT", "29500")) + 1  # one host: the ports after the launch's
    addresses = [f"localhost:{base + r}" for r in range(world)]
    cluster = {"worker": addresses[:workers], "ps": addresses[workers:-1], "chief": addresses[-1:]}
    done = args.out / "coordinator.json"
    import keras
    import tensorflow as tf

    spec = tf.train.ClusterSpec(cluster)
    if rank < world - 1:
        job, index = ("worker", rank) if rank < workers else ("ps", rank - workers)
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=args.threads)  # as the tutorial passes one
        tf.distribute.Server(spec, job_name=job, task_index=index, protocol="grpc", config=config, start=True)
        while not done.exists():
            time.sleep(0.2)
        os._exit(0)

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    keras.utils.set_random_seed(1234)
    strategy = tf.distribute.ParameterServerStrategy(
        tf.distribute.cluster_resolver.SimpleClusterResolver(spec, task_type="chief", task_id=0, rpc_layer="grpc"))
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = keras.applications.ResNet50(weights=None, input_shape=(args.image_size, args.image_size, 3),
                                            classes=args.classes, classifier_activation=None)
        optimizer = keras.optimizers.SGD(learning_rate=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
        # built here, in the scope, as the harness's runtime builds it; the tutorial leaves it to the
        # first step, and so built the same loop ran 32 img/s against 47 at one worker on 2 cores
        optimizer.build(model.trainable_variables)
    loss_object = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=args.label_smoothing,
                                                       reduction=None)

    def dataset_fn():
        images = tf.random.normal((args.batch, args.image_size, args.image_size, 3), seed=1)
        labels = tf.one_hot(tf.random.uniform((args.batch,), maxval=args.classes, dtype=tf.int32, seed=1), args.classes)
        return tf.data.Dataset.from_tensors((images, labels)).repeat()

    @tf.function
    def step_fn(iterator):
        def replica_fn(images, labels):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_object(labels, model(images, training=True)))
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            return loss
        images, labels = next(iterator)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_fn, args=(images, labels)), axis=None)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    for _ in range(args.warmup * workers):
        coordinator.schedule(step_fn, args=(iterator,))
    coordinator.join()
    started = time.perf_counter()
    for _ in range(args.steps * workers):
        last = coordinator.schedule(step_fn, args=(iterator,))
    coordinator.join()
    window = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps({
        "framework": args.framework, "host": socket.gethostname(), "pid": os.getpid(), "workers": workers,
        "servers": args.servers, "images": args.batch * args.steps * workers, "window_s": window,
        "final_loss": float(last.fetch()),
    }))
    os._exit(0)  # the coordinator's threads would keep the interpreter from ending


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
