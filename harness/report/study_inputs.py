"""The study's cells as the scaling model (:mod:`harness.report.scaling_model`) sees them: every
input with its source, none of them fitted (the two fitted figures are
:mod:`harness.report.scaling_validation`'s).

- **the step on one node** (published): 64 images per GPU at the throughput the runtimes imply
  ("≈ 13 h on 4 GPUs" for ResNet50, "≈ 17 h" for ResNet152, Summary section), all of it compute:
  DALI keeps ahead of training (the study: CPU usage below 40%), and the all-reduce within a node
  over NVLink is a millisecond. The overlap of communication with backward was not measured
  there, so the band spans none to all of backward.
- **the links** (published): within a node NVLink 3 (A100: 12 links of 25 GB/s each way, NVIDIA's
  datasheet; a ring all-reduce reaches 100 to 300 GB/s of it); between nodes one HDR InfiniBand
  adapter per GPU (the study: "four HDR host channel adapters" per node; HDR: 200 Gb/s = 25 GB/s
  per port, of which NCCL reaches 70 to 100%), latency 2 to 10 us per hop.
- **the fusion** (published defaults): PyTorch DDP's 25 MB buckets, Horovod's 64 MB fusion buffer.
- **GPU decoding** (published): DALI's decoding on the GPU takes GPU time from training at every
  G. Its cost per image is at most the inverse of what DALI's ResNet-50 pipeline reaches alone on
  one A100 (:data:`GPU_DECODE`).
- **the file system** (the rate fitted; the mechanism a hypothesis): the native loader reads the
  raw JPEG files (over a million of them) from the SCRATCH partition of the GPFS all nodes share
  (the study's "JUWELS HPC system" section); PyTorch's DataLoader with its 8 workers prefetches,
  so the step is the larger of the rest of the step and the file system's serving time.
- **the overlap** (a hypothesis within a stated band): the study says DDP's buckets and Horovod's
  tensor fusion overlap computation and communication, not how much: the band spans none to all
  of backward, half most likely.
"""
from __future__ import annotations

import dataclasses

from harness.rank.frameworks import FRAMEWORKS
from harness.report.collectives import gradient_bytes
from harness.report.network import Link
from harness.report.projection import STUDY_RUNTIMES, throughput_for
from harness.report.scaling_model import CellModel, Network
from harness.report.stragglers import RankDelay

BATCH_PER_GPU = 64
GPUS_PER_NODE = 4
NVLINK = Link(latency_s=2e-6, bandwidth=200e9, latency_range=(1e-6, 5e-6), bandwidth_range=(100e9, 300e9),
              source="NVLink 3 on A100 (NVIDIA datasheet): 100-300 GB/s bus bandwidth")
HDR_PER_GPU = Link(latency_s=5e-6, bandwidth=0.85 * 25e9, latency_range=(2e-6, 10e-6),
                   bandwidth_range=(0.70 * 25e9, 25e9),
                   source="one HDR InfiniBand adapter (200 Gb/s) per GPU, 70-100% reached")
NETWORK = Network(intra=NVLINK, inter=HDR_PER_GPU, gpus_per_node=GPUS_PER_NODE)
FREE_LINK = Link(latency_s=0.0, bandwidth=float("inf"), latency_range=(0.0, 0.0),
                 bandwidth_range=(float("inf"), float("inf")), source="none: communication left out (a null model)")
NO_COMMUNICATION = Network(intra=FREE_LINK, inter=FREE_LINK, gpus_per_node=GPUS_PER_NODE)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PublishedFigure:
    value: float
    unit: str
    what: str
    source: str
    url: str

    def describe(self) -> str:
        return f"{self.value:,.0f} {self.unit}: {self.what} ({self.source}, {self.url})"


GPU_DECODE = PublishedFigure(
    value=7000, unit="images/s",
    what="DALI's ResNet-50 pipeline (decode, random crop, resize) on one A100 with 75% of the ImageNet JPEGs "
         "on its hardware JPEG decoder and the rest on CUDA (all on the hardware decoder: about 5,000; all on "
         "CUDA: about 6,000); DALI 1.12, the study's, sends 65% to the hardware decoder by default",
    source="NVIDIA Technical Blog, 'Loading Data Fast with DALI and the New Hardware JPEG Decoder in NVIDIA A100 "
           "GPUs', its throughput figure as read in NVIDIA/DALI issue #5362",
    url="https://developer.nvidia.com/blog/loading-data-fast-with-dali-and-new-jpeg-decoder-in-a100/")
"""What a GPU decoding pipeline costs training per image: at most 1 / this many GPU-seconds (a
pipeline alone on the GPU at X images/s occupies it at most 1/X s per image; the hardware decoder
runs beside the SMs, so the cost to training may be lower)."""

TERM_SOURCES = {
    "compute": "published: the study's one-node runtime (Summary: ≈ 13 h ResNet50, ≈ 17 h ResNet152, 4 GPUs)",
    "data": "published: DALI keeps ahead of training (the study: CPU usage below 40%), 0 s",
    "file system": "fitted: the images/s the shared file system serves the native loader, to one point; "
                   "hypothesis: that the shared GPFS (the study: the datasets are on its SCRATCH partition) "
                   "is what serves them; the loader prefetches (8 workers): the step is the larger of the rest "
                   "and the serving time",
    "GPU decoding": f"published: {GPU_DECODE.value:,.0f} images/s of DALI on one A100 ({GPU_DECODE.url})",
    "exposed communication": "published: NVLink 3 and HDR InfiniBand speeds, DDP's/Horovod's fusion sizes; "
                             "the overlap: the study says computation and communication overlap (its DDP and "
                             "Horovod sections), not how much: none to all of backward, half a hypothesis",
    "wait for the slowest rank": "fitted: the mean a rank loses to fixed-duration delays per step, to one point; "
                                 "hypothesis: rare delays of fixed seconds (chosen by two in-sample values)",
}
"""Where each term of the study's step comes from (measured / published / fitted)."""


def study_step_s(model: str) -> float:
    """One GPU's step on one node of the study, from its stated 4-GPU runtime of ``model``."""
    runtime = next(r for r in STUDY_RUNTIMES if r.model == model and r.gpus == GPUS_PER_NODE and r.relation == "~")
    return BATCH_PER_GPU * GPUS_PER_NODE / throughput_for(runtime.seconds)


def study_cell(model: str, framework: str, loader: str, delay: RankDelay = RankDelay(),
               other_delays: tuple[RankDelay, ...] = (), *, decoding: bool = True) -> CellModel:
    """ResNet ``model`` on one node of the study, trained by ``framework`` from ``loader``
    ("dali-gpu" decodes on the GPU; every other loader on the CPU); ``decoding`` False leaves the GPU
    decoding's cost out (a null model)."""
    decode = BATCH_PER_GPU / GPU_DECODE.value if loader == "dali-gpu" and decoding else 0.0
    return CellModel(name=f"{framework}-{loader}-{model} (study)", reference_gpus=GPUS_PER_NODE,
                     batch_per_gpu=BATCH_PER_GPU, compute_s=study_step_s(model), optimizer_s=0.0, data_s=0.0,
                     exposed_s=0.0, decode_s=decode, delay=delay, other_delays=other_delays, data_prefetched=True,
                     gradient_bytes=gradient_bytes(model),
                     bucket_bytes=FRAMEWORKS.entry(framework).fused_all_reduce_bytes)
