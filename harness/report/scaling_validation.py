"""The scaling model (:mod:`harness.report.scaling_model`) against the study's own figures: fitted
on what the study states for one node of 4 GPUs and on the published speeds of its network, it
predicts E_G on 8 ... 1,024 GPUs, beside every E_G the study's text gives
(``published-aach2023.json``).

    python -m harness.report.scaling_validation

The study as the model sees it (each an input, none fitted to a multi-node figure but one):

- **the step on one node**: 64 images per GPU at the throughput the runtimes imply ("≈ 13 h on 4
  GPUs" for ResNet50, "≈ 17 h" for ResNet152, Summary section), all of it compute: DALI hides
  the data, and the all-reduce within a node over NVLink is a millisecond. The overlap of
  communication with backward was not measured there, so the band spans none to all of backward.
- **the links**: within a node NVLink 3 (A100: 12 links of 25 GB/s each way, NVIDIA's datasheet;
  a ring all-reduce reaches 100 to 300 GB/s of it); between nodes one HDR InfiniBand adapter
  per GPU (the study: "four HDR host channel adapters" per node; HDR: 200 Gb/s = 25 GB/s per
  port, of which NCCL reaches 70 to 100%), latency 2 to 10 us per hop.
- **the fusion**: PyTorch DDP's 25 MB buckets, Horovod's 64 MB fusion buffer.
- **two fitted figures**, each to one published point, all other points being predictions:
  the step-time jitter (every step waits for the slowest of G GPUs; the text gives no per-step
  spread), as a share of the step, to ResNet50 with DALI on the CPU at 1,024 GPUs (E_G 0.76);
  and the images per second the shared GPFS serves the native loader (the text gives no speed
  for it) to Horovod with the native loader at 128 GPUs (E_G 0.5).
"""
from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Mapping

from harness.rank.frameworks import FRAMEWORKS
from harness.report.collectives import gradient_bytes
from harness.report.network import Link
from harness.report.projection import STUDY_RUNTIMES, throughput_for
from harness.report.scaling_model import CellModel, Network, predict
from harness.report.tables import format_table

PUBLISHED = Path(__file__).resolve().with_name("published-aach2023.json")
BATCH_PER_GPU = 64
GPUS_PER_NODE = 4
NVLINK = Link(latency_s=2e-6, bandwidth=200e9, latency_range=(1e-6, 5e-6), bandwidth_range=(100e9, 300e9),
              source="NVLink 3 on A100 (NVIDIA datasheet): 100-300 GB/s bus bandwidth")
HDR_PER_GPU = Link(latency_s=5e-6, bandwidth=0.85 * 25e9, latency_range=(2e-6, 10e-6),
                   bandwidth_range=(0.70 * 25e9, 25e9),
                   source="one HDR InfiniBand adapter (200 Gb/s) per GPU, 70-100% reached")
NETWORK = Network(intra=NVLINK, inter=HDR_PER_GPU, gpus_per_node=GPUS_PER_NODE)
JITTER_POINT = {"model": "resnet50", "loader": "dali-cpu", "frameworks": ["ddp", "horovod"], "gpus": 1024}
FILE_SYSTEM_POINT = {"model": "resnet50", "loader": "native", "frameworks": ["horovod"], "gpus": 128}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Fitted:
    jitter_share: float
    """Standard deviation of a GPU's step time over the step."""
    images_per_s: float
    """What the shared file system serves all GPUs of a native-loader run."""


def study_cell(model: str, framework: str, jitter_share: float = 0.0) -> CellModel:
    """ResNet ``model`` on one node of the study, from its stated 4-GPU runtime."""
    runtime = next(r for r in STUDY_RUNTIMES if r.model == model and r.gpus == GPUS_PER_NODE and r.relation == "~")
    step = BATCH_PER_GPU * GPUS_PER_NODE / throughput_for(runtime.seconds)
    return CellModel(name=f"{framework}-{model} (study)", reference_gpus=1, batch_per_gpu=BATCH_PER_GPU,
                     compute_s=step, optimizer_s=0.0, data_s=0.0, exposed_s=0.0, jitter_s=jitter_share * step,
                     gradient_bytes=gradient_bytes(model),
                     bucket_bytes=FRAMEWORKS.entry(framework).fused_all_reduce_bytes)


def _point(published: Mapping, where: Mapping) -> Mapping:
    return next(p for p in published["efficiency"] if all(p.get(key) == value for key, value in where.items()))


def _solve(efficiency_at, target: float, low: float, high: float, *, rising: bool) -> float:
    """The parameter in [low, high] whose predicted E_G is ``target`` (bisection, geometric)."""
    for _ in range(100):
        middle = (low * high) ** 0.5
        if (efficiency_at(middle) < target) == rising:
            low = middle
        else:
            high = middle
    return (low * high) ** 0.5


def fit(published: Mapping) -> Fitted:
    """The two figures the text does not give, each from the one published point named above."""
    point = _point(published, JITTER_POINT)
    jitter = _solve(lambda share: predict(study_cell(point["model"], "ddp", share), NETWORK,
                                          [point["gpus"]])[0].efficiency, point["value"], 1e-6, 10.0, rising=False)
    point = _point(published, FILE_SYSTEM_POINT)
    cell = study_cell(point["model"], "horovod", jitter)
    served = _solve(lambda rate: predict(cell, NETWORK, [point["gpus"]], fs_bandwidth=rate, image_bytes=1.0)[0]
                    .efficiency, point["value"], 1e3, 1e8, rising=True)
    return Fitted(jitter_share=jitter, images_per_s=served)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Check:
    point: Mapping
    framework: str
    efficiency: float
    band: tuple[float, float]
    fitted: bool

    @property
    def error(self) -> float | None:
        """Predicted minus published E_G, for a point the text states as a value."""
        return self.efficiency - self.point["value"] if self.point["relation"] == "=" else None

    @property
    def holds(self) -> bool | None:
        """Whether the prediction satisfies a bound the text states (``<``, ``>``)."""
        relation, value = self.point["relation"], self.point["value"]
        return {"<": self.efficiency < value, ">": self.efficiency > value}.get(relation)


def validate(published: Mapping, fitted: Fitted) -> list[Check]:
    checks = []
    for point in published["efficiency"]:
        if point["model"] not in {r.model for r in STUDY_RUNTIMES} or point.get("conflicts"):
            continue  # no runtime of that model on one node is published to fit it on
        framework = (point.get("frameworks") or ["ddp"])[0]
        if FRAMEWORKS.entry(framework).fused_all_reduce_bytes is None:
            continue  # its collectives are not the ring all-reduces this model describes
        gpus = point.get("gpus") or point["gpus_range"][1]
        native = point["loader"] == "native"
        prediction = predict(study_cell(point["model"], framework, fitted.jitter_share), NETWORK, [gpus],
                             fs_bandwidth=fitted.images_per_s if native else None, image_bytes=1.0)[0]
        fitted_here = any(all(point.get(key) == value for key, value in where.items())
                          for where in (JITTER_POINT, FILE_SYSTEM_POINT))
        checks.append(Check(point=point, framework=framework, efficiency=prediction.efficiency,
                            band=prediction.efficiency_range, fitted=fitted_here))
    return checks


def validation_rows(checks: list[Check]) -> list[list[str]]:
    rows = [["model", "loader", "framework(s)", "GPUs", "published E_G", "predicted E_G", "band", "error / holds",
             "where"]]
    for check in checks:
        point = check.point
        gpus = point.get("gpus") or f"{point['gpus_range'][0]}-{point['gpus_range'][1]}"
        outcome = ("fitted" if check.fitted else f"{check.error:+.2f}" if check.error is not None
                   else "holds" if check.holds else "does not hold")
        rows.append([point["model"], point["loader"], ", ".join(point.get("frameworks") or ["-"]), str(gpus),
                     f"{point['relation']} {point['value']}", f"{check.efficiency:.2f}",
                     f"[{check.band[0]:.2f}, {check.band[1]:.2f}]", outcome, point.get("where", "")])
    return rows


def summary(checks: list[Check]) -> str:
    errors = [abs(c.error) for c in checks if c.error is not None and not c.fitted]
    bounds = [c.holds for c in checks if c.holds is not None]
    return (f"{len(errors)} stated value(s): median |error| {statistics.median(errors):.2f}, worst {max(errors):.2f} "
            f"(E_G units); {sum(bounds)} of {len(bounds)} stated bound(s) hold")


def main(argv: list[str] | None = None) -> int:
    published = json.loads(PUBLISHED.read_text())
    fitted = fit(published)
    checks = validate(published, fitted)
    print(__doc__.split("\n\n")[0].replace("\n", " "))
    print(f"within a node: {NVLINK.describe()}\nbetween nodes: {HDR_PER_GPU.describe()}")
    print(f"fitted: step jitter {fitted.jitter_share:.1%} of the step (to {JITTER_POINT['loader']} at "
          f"{JITTER_POINT['gpus']} GPUs); the shared file system serves {fitted.images_per_s:,.0f} images/s "
          f"(to {FILE_SYSTEM_POINT['loader']} at {FILE_SYSTEM_POINT['gpus']} GPUs)")
    print(format_table(validation_rows(checks)))
    print(summary(checks))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
