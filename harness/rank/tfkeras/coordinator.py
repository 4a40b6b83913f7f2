"""The coordinator of a ``tensorflow_ps`` cell (:mod:`harness.rank.frameworks.tensorflow_ps`):
rank 0's child, the strategy's ``chief``, its only client.

    python -m harness.rank.tfkeras.coordinator SPEC.json

Once every worker rank has timed its compute probes, it builds the model in the strategy's scope
(its variables on the servers), gives each worker the cell's loader as a per-worker dataset, and
schedules steps, a worker's worth ahead of the ones it waits for so that no worker waits for the
next, until every worker has run ``warmup_steps + steps`` (a faster one runs more). Each step
returns the worker's clock readings, its loss and its process id; the coordinator writes each
worker's steps for that rank, then the servers' figures. A failure is written to the launch's
directory for the ranks to raise.
"""
from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from collections import deque
from pathlib import Path

from harness.common.jsonio import write_json_atomic
from harness.rank.frameworks import training_ranks
from harness.rank.frameworks.tensorflow import gather_published
from harness.rank.frameworks.tensorflow_ps import (COORDINATOR_ERROR, COORDINATOR_PROGRESS, DONE, PUBLISHED,
                                                   cluster_spec, probed_path, schedule_another, server_stats,
                                                   steps_path)
from harness.rank.spec import WorkerSpec
from harness.rank.worker import ProgressFile, not_counting

CORES_OF_ITS_OWN = 1
"""The coordinator only traces and dispatches: one kernel thread, beside the ranks' cores. Its
inter-op threads stay TensorFlow's: with one, it sent the workers one step at a time (36.7 img/s
against 46.4 at one worker, 2 cores)."""
SCHEDULED_AT_MOST = 4
"""Steps scheduled, at most, per step the cell asks of its workers before one still short fails it."""


def step_closure(strategy, model, optimizer, loss_fn, global_batch: int):
    """One training step of one worker, as a function the coordinator schedules: the clock readings
    of :data:`~harness.rank.frameworks.tensorflow_ps.STAMP_FIELDS`, its loss and its process id.
    What the harness adds (the clocks, the batch's taking) is under its own name scope, the update
    under another, so that counting the step's graph (harness.rank.tf_work) tells them apart."""
    import tensorflow as tf

    from harness.rank.tf_work import HARNESS_SCOPE, UPDATE_SCOPE

    variables = model.trainable_variables

    def replica(images, labels):
        with tf.name_scope(HARNESS_SCOPE), tf.control_dependencies([images, labels]):
            batch_read = tf.timestamp()
        with tf.GradientTape() as tape:
            per_image = loss_fn(model(images, training=True), labels)
            loss = tf.nn.compute_average_loss(per_image, global_batch_size=global_batch)
        gradients = tape.gradient(loss, variables)
        with tf.name_scope(HARNESS_SCOPE), tf.control_dependencies(gradients):
            computed = tf.timestamp()
        # not held back until every gradient is computed: a variable's update leaves for its server
        # as soon as its gradient is, beside the rest of backward, as without the clock
        with tf.name_scope(UPDATE_SCOPE):
            optimizer.apply(gradients, variables)
        # Keras counts the step once it has issued the updates, which may still be under way: their
        # rest lands in the next step's time, which starts once this one has ended
        with tf.name_scope(HARNESS_SCOPE):
            with tf.control_dependencies([tf.convert_to_tensor(optimizer.iterations)]):
                applied = tf.timestamp()
            return batch_read, computed, applied, tf.cast(tf.reduce_mean(per_image), tf.float64)

    @tf.function
    def step(iterator):
        with tf.name_scope(HARNESS_SCOPE):
            started = tf.timestamp()
            with tf.control_dependencies([started]):
                images, labels = next(iterator)
        batch_read, computed, applied, loss = strategy.run(replica, args=(images, labels))
        with tf.name_scope(HARNESS_SCOPE):
            # the ops run in the worker's process: its id tells the coordinator which worker rank ran it
            pid = tf.strings.to_number(tf.strings.split(tf.io.read_file("/proc/self/stat"))[0], tf.float64)
            return tf.stack([started, batch_read, computed, applied, loss, pid])
    return step


def coordinate(spec: WorkerSpec) -> None:
    from harness.rank.cell import Cell
    from harness.rank.rankenv import RankInfo
    from harness.rank.tfkeras.runtime import TensorFlowRuntime
    from harness.rank.workload import Workload

    import tensorflow as tf

    workdir, cell, workload = Path(spec.output_dir), Cell(**spec.cell), Workload(**spec.workload)
    progress = ProgressFile(workdir / COORDINATOR_PROGRESS, rank="coordinator", interval=0.2)  # the ranks relay it
    progress("setup", 0, 1)
    published = gather_published(workdir, PUBLISHED, cell.ranks)
    workers = training_ranks(cell.framework, cell.ranks, workload.ps_servers)
    for rank in range(workers):  # no step runs beside a worker's compute probe
        wait_for(probed_path(workdir, rank))
    runtime = TensorFlowRuntime()
    device = runtime.pick_device("cpu", 0)
    tf.config.threading.set_intra_op_parallelism_threads(CORES_OF_ITS_OWN)
    runtime.seed(workload.seed)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster_spec(published, workers)), task_type="chief", task_id=0, rpc_layer="grpc")
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model, optimizer, loss_fn = runtime.build(None, cell.model, workload, workers, device)
    # one worker's view of the data: the strategy gives every worker the same dataset function
    whole = RankInfo(rank=0, world_size=1, local_rank=0, local_world_size=1, master_addr="", master_port=0,
                     source="coordinator")
    dataset = coordinator.create_per_worker_dataset(tf.autograph.experimental.do_not_convert(
        lambda: runtime.loader(cell.loader, workload, whole, device).source))  # plain Python: it imports the loader
    step = step_closure(strategy, model, optimizer, loss_fn, workload.batch_size * workers)
    iterator = iter(dataset)

    per_worker = workload.warmup_steps + workload.steps
    by_pid = {entry["pid"]: rank for rank, entry in enumerate(published[:workers])}
    steps_by_worker = [[] for _ in range(workers)]
    pending = deque(coordinator.schedule(step, args=(iterator,)) for _ in range(2 * workers))
    scheduled = len(pending)
    while pending:
        row = [float(value) for value in pending.popleft().fetch()]
        pid = int(row[-1])
        if pid not in by_pid:
            raise RuntimeError(f"a step ran in process {pid}, which no worker rank published ({sorted(by_pid)})")
        steps_by_worker[by_pid[pid]].append(row)
        counts = [len(steps) for steps in steps_by_worker]
        if schedule_another(counts, per_worker, scheduled, limit=SCHEDULED_AT_MOST * per_worker * workers):
            pending.append(coordinator.schedule(step, args=(iterator,)))
            scheduled += 1
        done = min(min(counts), per_worker)
        progress(*(("warmup", done, workload.warmup_steps) if done <= workload.warmup_steps
                   else ("timed", done - workload.warmup_steps, workload.steps)))
    coordinator.join()

    work, served = ({}, {}) if not_counting(spec.options) else \
        counted_step(step, workers=workers, servers=workload.ps_servers, batch_size=workload.batch_size,
                     gpu=any(entry.get("device") == "cuda" for entry in published[:workers]))
    for rank, steps in enumerate(steps_by_worker):
        steps.sort(key=lambda row: row[0])  # as they started: the coordinator fetches them as it scheduled them
        write_json_atomic(steps_path(workdir, rank), {"steps": steps, "warmup": workload.warmup_steps,
                                                      "timed": workload.steps, **({"work": work} if work else {})})
    stats = server_stats(steps_by_worker, workload.warmup_steps)
    write_json_atomic(workdir / DONE, {"servers": stats.to_json(), **({"work": served} if served else {})})


def counted_step(step, **facts) -> tuple[dict, dict]:
    """The work of the step every worker runs, counted from its graph once they are done (the
    coordinator runs no step after the window), with what the counting took. A count that fails
    is said, never fails the launch."""
    from harness.rank.tf_work import parameter_server_work
    from harness.rank.work import NotCounted, counting_failure, uncounted

    started = time.perf_counter()
    try:
        # the trace the steps ran (tracing anew would take a second, beside the ranks' last probes)
        traced = step._list_all_concrete_functions()  # noqa: SLF001 - tf.function lists them only here
        if len(traced) != 1:
            raise NotCounted(f"the step was traced {len(traced)} times: which trace the workers ran is not known")
        work, served = parameter_server_work(traced[0].graph, **facts)
    except Exception as error:  # noqa: BLE001 - a failed count never fails the launch
        why = counting_failure(error)
        work, served = uncounted(why), {"not_counted": why}
    return {**work, "cost_s": round(time.perf_counter() - started, 3)}, served


def wait_for(path: Path, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path.name} did not appear within {timeout_s:.0f} s")
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    import json

    spec = WorkerSpec.from_json(json.loads(Path(argv[1]).read_text()))
    try:
        coordinate(spec)
    except BaseException as error:  # noqa: BLE001 - the ranks raise it
        write_json_atomic(Path(spec.output_dir) / COORDINATOR_ERROR, {
            "host": socket.gethostname(), "pid": os.getpid(), "error": f"{type(error).__name__}: {error}",
            "traceback": traceback.format_exc()[-4000:]})
        sys.stderr.write(f"[dlscale tensorflow_ps coordinator] {type(error).__name__}: {error}\n")
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)  # the strategy's threads would keep the interpreter from ending


if __name__ == "__main__":
    sys.exit(main(sys.argv))
