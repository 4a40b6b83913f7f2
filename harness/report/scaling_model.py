"""E_G beyond the machine: a step-time model of a cell, calibrated from what dlscale measures on
one or two nodes, predicting its parallel efficiency and time to train at G = 4 ... 1,024 GPUs.

    step(G)    = compute + optimizer + data + exposed(G) + jitter x (z(G) - z(G_ref))
    exposed(G) = max(0, allreduce(G) - hidden)
    z(G)       = the expected largest of G standard normal draws (0 for one rank): every step
               waits for the slowest of G ranks, whose own step times scatter by ``jitter``;
               counted beyond the z(G_ref) the measured reference step already holds
    allreduce(G): the gradient in fusion buckets, each a ring or a tree all-reduce (whichever is
               faster, as NCCL chooses) over the slowest link the G ranks span: within a node up to
               ``gpus_per_node`` ranks, between nodes beyond (:mod:`harness.report.network`)
    E_G(G)     = step(G_ref) / step(G)     (batch per GPU fixed: the study's eqs. 3 and 4)

``compute``, ``optimizer``, ``data`` and the exposed communication come from the cell's measured
breakdown (:mod:`harness.judging.breakdown`, its slowest rank), ``jitter`` from its ranks' step
times (their standard deviation over the timed steps, averaged over ranks). ``hidden`` is the communication
backward compute hid: measured as ``allreduce(G_ref) - exposed(G_ref)`` on a cell of 2+ ranks, and
unknown on a 1-rank cell, where the prediction spans no overlap to full overlap of the backward
pass (two thirds of forward+backward). Every prediction is a band over those and the links'
fitted intervals. The data term stays per rank (each node decodes its own batches) unless a shared
file system's bandwidth is given, which all G ranks then share.

    python -m harness.report.scaling_model RESULTS --cell ID --intra FILE [--inter FILE]
        [--gpus-per-node 4] [--gpus 4,8,...,1024] [--network-speedup 2] [--batch-per-gpu 128]
        [--bucket-mb 25] [--fs-bandwidth-gbps 100 --image-kb 110]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Mapping, Sequence

from harness.config.cells import scaling_cell
from harness.judging.breakdown import cell_breakdown
from harness.report.collectives import bus_factor, gradient_bytes
from harness.report.network import Link, read_link
from harness.report.projection import format_duration, time_to_train_s
from harness.report.tables import format_table

STUDY_GPUS = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
BACKWARD_SHARE = 2 / 3
"""Backward's share of forward+backward (about twice the forward's work): the most compute that
can hide communication when the overlap was not measured."""
DEFAULT_BUCKET_BYTES = 25 * 2**20  # torch DDP's bucket_cap_mb default


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Network:
    intra: Link
    inter: Link
    gpus_per_node: int

    def link(self, gpus: int) -> Link:
        return self.intra if gpus <= self.gpus_per_node else self.inter


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CellModel:
    """One cell's measured step, per rank, at ``reference_gpus`` ranks."""

    name: str
    reference_gpus: int
    batch_per_gpu: int
    compute_s: float
    optimizer_s: float
    data_s: float
    exposed_s: float
    gradient_bytes: int
    bucket_bytes: int
    jitter_s: float = 0.0
    """Standard deviation of a rank's step time."""

    @property
    def overhead_s(self) -> float:
        """The framework's own per-step work beside compute (hooks, bucket copies): what a 1-rank
        cell books as communication with nothing to communicate. From 2 ranks on it cannot be
        told apart from the communication backward did not hide, and counts as that."""
        return self.exposed_s if self.reference_gpus == 1 else 0.0

    @property
    def buckets(self) -> int:
        return max(1, math.ceil(self.gradient_bytes / self.bucket_bytes))

    def with_batch(self, batch_per_gpu: int) -> "CellModel":
        """What-if: compute and data grow with the batch, the gradient does not."""
        scale = batch_per_gpu / self.batch_per_gpu
        return dataclasses.replace(self, batch_per_gpu=batch_per_gpu, compute_s=self.compute_s * scale,
                                   data_s=self.data_s * scale, jitter_s=self.jitter_s * scale)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Assumptions:
    """One corner of the band: a link speed, a latency and an overlap."""

    bandwidth: str = "value"
    """"value", "low" or "high": which of each link's bandwidths."""
    latency: str = "value"
    hidden_s: float | None = None
    """Communication backward hides; None: measured at the reference."""


def allreduce_s(nbytes: float, gpus: int, link: Link, *, buckets: int = 1, bandwidth: str = "value",
                latency: str = "value") -> float:
    """Seconds to all-reduce ``nbytes`` in ``buckets`` equal buckets over ``gpus`` ranks."""
    if gpus <= 1:
        return 0.0
    speed = {"value": link.bandwidth, "low": link.bandwidth_range[0], "high": link.bandwidth_range[1]}[bandwidth]
    alpha = {"value": link.latency_s, "low": link.latency_range[0], "high": link.latency_range[1]}[latency]
    bucket = nbytes / buckets
    ring = 2 * (gpus - 1) * alpha + bus_factor(gpus) * bucket / speed
    tree = 2 * math.ceil(math.log2(gpus)) * alpha + 2 * bucket / speed
    return buckets * min(ring, tree)


def slowest_of(gpus: int) -> float:
    """The expected largest of ``gpus`` standard normal draws (Blom's approximation; 0 for one)."""
    return statistics.NormalDist().inv_cdf((gpus - 0.375) / (gpus + 0.25)) if gpus > 1 else 0.0


def hidden_at_reference(cell: CellModel, network: Network) -> float | None:
    """Communication the cell's backward hid at its reference, or None where it ran alone."""
    if cell.reference_gpus < 2:
        return None
    comm = allreduce_s(cell.gradient_bytes, cell.reference_gpus, network.link(cell.reference_gpus),
                       buckets=cell.buckets)
    return min(max(0.0, comm - cell.exposed_s), BACKWARD_SHARE * cell.compute_s)


def step_s(cell: CellModel, network: Network, gpus: int, assumptions: Assumptions = Assumptions(), *,
           fs_bandwidth: float | None = None, image_bytes: float = 0.0) -> float:
    hidden = assumptions.hidden_s
    if hidden is None:
        hidden = hidden_at_reference(cell, network) or 0.0
    comm = allreduce_s(cell.gradient_bytes, gpus, network.link(gpus), buckets=cell.buckets,
                       bandwidth=assumptions.bandwidth, latency=assumptions.latency)
    data = cell.data_s
    if fs_bandwidth:
        data = max(data, gpus * cell.batch_per_gpu * image_bytes / fs_bandwidth)
    return (cell.compute_s + cell.optimizer_s + data + cell.overhead_s + max(0.0, comm - hidden)
            + cell.jitter_s * (slowest_of(gpus) - slowest_of(cell.reference_gpus)))


def corners(cell: CellModel, network: Network) -> tuple[Assumptions, Assumptions, Assumptions]:
    """(most likely, worst, best) assumptions: the links' fitted values and interval ends, and the
    measured overlap; where it was not measured, half, none and all of backward."""
    measured = hidden_at_reference(cell, network)
    worst_hidden = 0.0 if measured is None else measured
    best_hidden = BACKWARD_SHARE * cell.compute_s if measured is None else measured
    return (Assumptions(hidden_s=measured if measured is not None else BACKWARD_SHARE * cell.compute_s / 2),
            Assumptions(bandwidth="low", latency="high", hidden_s=worst_hidden),
            Assumptions(bandwidth="high", latency="low", hidden_s=best_hidden))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Prediction:
    gpus: int
    efficiency: float
    efficiency_range: tuple[float, float]
    step_s: float
    throughput: float
    """Images per second of all G GPUs."""


def predict(cell: CellModel, network: Network, gpus: Sequence[int], *, base_gpus: int | None = None,
            fs_bandwidth: float | None = None, image_bytes: float = 0.0) -> list[Prediction]:
    """E_G at each of ``gpus`` relative to ``base_gpus`` (default: one node, as the study's G_ref = 4)."""
    base = base_gpus or network.gpus_per_node
    likely, worst, best = corners(cell, network)
    extra = {"fs_bandwidth": fs_bandwidth, "image_bytes": image_bytes}

    def efficiency(count: int, assumptions: Assumptions) -> float:
        return step_s(cell, network, base, assumptions, **extra) / step_s(cell, network, count, assumptions, **extra)

    out = []
    for count in gpus:
        step = step_s(cell, network, count, likely, **extra)
        values = [efficiency(count, assumptions) for assumptions in (likely, worst, best)]
        out.append(Prediction(gpus=count, efficiency=values[0], efficiency_range=(min(values), max(values)),
                              step_s=step, throughput=count * cell.batch_per_gpu / step))
    return out


def bucket_bytes_of(framework_settings: Mapping) -> int:
    """The fusion bucket a framework's recorded settings say it all-reduces gradients in."""
    if framework_settings.get("bucket_cap_mb"):
        return int(float(framework_settings["bucket_cap_mb"]) * 2**20)
    if framework_settings.get("fusion_threshold_bytes"):
        return int(framework_settings["fusion_threshold_bytes"])
    zero = ((framework_settings.get("config") or {}).get("zero_optimization") or {})
    if zero.get("reduce_bucket_size"):
        return int(float(zero["reduce_bucket_size"])) * 4  # elements of fp32
    return DEFAULT_BUCKET_BYTES


def cell_model(results: Mapping, cell_id: str) -> CellModel:
    """The model of ``cell_id`` from a dlscale results file."""
    cell = next((c for c in results.get("cells", []) if c.get("cell") == cell_id), None)
    if cell is None:
        raise ValueError(f"no cell {cell_id!r} in the results; it has: "
                         f"{', '.join(c.get('cell', '?') for c in results.get('cells', []))}")
    workload = results.get("workload") or {}
    return model_of_records(cell_id, cell.get("records") or [], batch_per_gpu=int(workload["batch_size"]),
                            num_classes=int(workload.get("num_classes") or 1000))


def model_of_records(cell_id: str, records: Sequence[Mapping], *, batch_per_gpu: int,
                     num_classes: int = 1000) -> CellModel:
    """The model of a cell from its ranks' records of one launch."""
    parsed = scaling_cell(cell_id)
    if parsed is None or not records:
        raise ValueError(f"{cell_id}: a scaling cell with its records is needed")
    slowest = cell_breakdown(records).slowest
    jitter = statistics.fmean(statistics.stdev(r["step_times"]) if len(r["step_times"]) > 1 else 0.0 for r in records)
    return CellModel(name=cell_id, reference_gpus=parsed.ranks, batch_per_gpu=batch_per_gpu,
                     compute_s=slowest.compute, optimizer_s=slowest.optimizer, data_s=slowest.data,
                     exposed_s=slowest.communication, jitter_s=jitter,
                     gradient_bytes=gradient_bytes(parsed.model, num_classes),
                     bucket_bytes=bucket_bytes_of(records[0].get("framework_settings") or {}))


def prediction_rows(predictions: Sequence[Prediction], *, reference_note: str = "") -> list[list[str]]:
    rows = [["GPUs", "E_G", "E_G band", "step s", "img/s", "90 epochs of ImageNet-1k" + reference_note]]
    for p in predictions:
        rows.append([str(p.gpus), f"{p.efficiency:.2f}", f"[{p.efficiency_range[0]:.2f}, {p.efficiency_range[1]:.2f}]",
                     f"{p.step_s:.4f}", f"{p.throughput:,.0f}", format_duration(time_to_train_s(p.throughput))])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report.scaling_model",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a dlscale results.json")
    parser.add_argument("--cell", required=True, help="the cell to model, e.g. ddp-synthetic-resnet50-g2")
    parser.add_argument("--intra", type=Path, required=True,
                        help="all-reduce timings within a node: dlscale collectives JSON, nccl-tests or OSU output")
    parser.add_argument("--inter", type=Path, help="all-reduce timings across nodes (default: as --intra)")
    parser.add_argument("--ranks", type=int, help="ranks of an OSU timings file (it does not say)")
    parser.add_argument("--gpus-per-node", type=int, default=4, help="ranks per node (default 4, as the study's)")
    parser.add_argument("--gpus", default=",".join(map(str, STUDY_GPUS)), help="GPU counts to predict")
    parser.add_argument("--network-speedup", type=float, default=1.0, help="what if every link were this much faster")
    parser.add_argument("--batch-per-gpu", type=int, help="what if each GPU took this batch")
    parser.add_argument("--bucket-mb", type=float, help="what if gradients were fused in buckets of this size")
    parser.add_argument("--fs-bandwidth-gbps", type=float, help="a shared file system all ranks read from, GB/s")
    parser.add_argument("--image-kb", type=float, default=110.0,
                        help="bytes read per image, KB (default 110, ImageNet's mean JPEG)")
    args = parser.parse_args(argv)
    try:
        results = json.loads(args.results.read_text())
        cell = cell_model(results, args.cell)
        intra = read_link(args.intra, args.ranks)
        inter = read_link(args.inter, args.ranks) if args.inter else intra
        if args.network_speedup != 1:
            intra, inter = intra.scaled(args.network_speedup), inter.scaled(args.network_speedup)
        gpus = [int(part) for part in args.gpus.split(",")]
    except (OSError, ValueError, KeyError) as error:
        print(f"scaling_model: {error}", file=sys.stderr)
        return 2
    if args.batch_per_gpu:
        cell = cell.with_batch(args.batch_per_gpu)
    if args.bucket_mb:
        cell = dataclasses.replace(cell, bucket_bytes=int(args.bucket_mb * 2**20))
    network = Network(intra=intra, inter=inter, gpus_per_node=args.gpus_per_node)
    hidden = hidden_at_reference(cell, network)
    print(f"cell {cell.name}: per step compute {cell.compute_s:.4f} s, data {cell.data_s:.4f} s, optimizer "
          f"{cell.optimizer_s:.4f} s, exposed communication {cell.exposed_s:.4f} s, jitter {cell.jitter_s:.4f} s "
          f"at {cell.reference_gpus} rank(s); "
          f"gradient {cell.gradient_bytes / 1e6:.1f} MB in {cell.buckets} bucket(s)")
    print("overlap: " + (f"backward hid {hidden:.4f} s of communication at the reference" if hidden is not None else
                         "not measured (a 1-rank reference): the band spans none to all of backward"))
    print(f"within a node: {intra.describe()}\nbetween nodes: {inter.describe()}")
    fs = args.fs_bandwidth_gbps * 1e9 if args.fs_bandwidth_gbps else None
    predictions = predict(cell, network, gpus, fs_bandwidth=fs, image_bytes=args.image_kb * 1e3)
    print(f"E_G relative to one node of {network.gpus_per_node} rank(s), as the study's to one node of 4 GPUs")
    print(format_table(prediction_rows(predictions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
