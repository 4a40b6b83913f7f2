"""The scaling model out of sample: other studies' data-parallel CNN training at 256 to 1,024 GPUs,
each predicted from its own stated hardware and workload with nothing refitted
(``published-other-studies.json``).

A study's step on one reference is its batch per GPU over its GPU's stated speed, all of it
compute; its links are the ones it states (between nodes the network each server has, 70-100% of
it reached, as for the study's HDR); its gradient is its model's parameters in fp32 in its
framework's buckets. The wait for the slowest rank is carried over as fitted to Aach et al. 2023
(fixed-duration delays of the same mean per rank and step on another machine: a hypothesis), and
the band spans no wait at all to it, with the overlap from none to all of backward.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Mapping, Sequence

from harness.report.collectives import gradient_bytes
from harness.report.network import Link
from harness.report.scaling_model import CellModel, Network, Prediction, lost_efficiency, predict
from harness.report.stragglers import RankDelay

OTHER_STUDIES = Path(__file__).resolve().with_name("published-other-studies.json")
LINK_SHARE_REACHED = (0.70, 1.0)
"""The share of a stated link's speed an all-reduce reaches: the ends of the band (most likely 85%)."""


def stated_link(bytes_per_s: float | Sequence[float], source: str, *, latency_s: float = 5e-6) -> Link:
    """A link as a study states it: one speed (reached 70-100%) or a range (its middle most likely)."""
    if isinstance(bytes_per_s, (int, float)):
        low, high = bytes_per_s * LINK_SHARE_REACHED[0], bytes_per_s * LINK_SHARE_REACHED[1]
        value = bytes_per_s * sum(LINK_SHARE_REACHED) / 2
    else:
        low, high = bytes_per_s
        value = (low + high) / 2
    return Link(latency_s=latency_s, bandwidth=value, latency_range=(2e-6, 10e-6), bandwidth_range=(low, high),
                source=source)


def study_cell(study: Mapping, delay: RankDelay) -> tuple[CellModel, Network]:
    """One study's reference as the model sees it, and its network."""
    cell = CellModel(name=study["id"], reference_gpus=study["reference_gpus"], batch_per_gpu=study["batch_per_gpu"],
                     compute_s=study["batch_per_gpu"] / study["gpu_images_per_s"], optimizer_s=0.0, data_s=0.0,
                     exposed_s=0.0, gradient_bytes=gradient_bytes(study["model"]), bucket_bytes=study["bucket_bytes"],
                     delay=delay, other_delays=(RankDelay(),) if delay.mean_s else ())
    network = Network(intra=stated_link(study["intra_node_bytes_per_s"], study["intra_node_source"]),
                      inter=stated_link(study["inter_node_bytes_per_s"], study["inter_node_quote"]),
                      gpus_per_node=study["gpus_per_node"])
    return cell, network


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class OutOfSample:
    study: Mapping
    prediction: Prediction
    without_wait: Prediction
    """The same with no wait for the slowest rank: what the carried-over wait buys."""
    parts: Mapping[str, float]
    """Each term's part of 1 - E_G (most likely assumptions)."""

    @property
    def error(self) -> float:
        return self.prediction.efficiency - self.study["published_efficiency"]

    @property
    def inside(self) -> bool:
        low, high = self.prediction.efficiency_range
        return low <= self.study["published_efficiency"] <= high


def predict_study(study: Mapping, delay: RankDelay) -> OutOfSample:
    cell, network = study_cell(study, delay)
    bare, _ = study_cell(study, RankDelay())
    at = [study["gpus"]]
    return OutOfSample(study=study, prediction=predict(cell, network, at, base_gpus=study["reference_gpus"])[0],
                       without_wait=predict(bare, network, at, base_gpus=study["reference_gpus"])[0],
                       parts=lost_efficiency(cell, network, study["gpus"], base_gpus=study["reference_gpus"]))


def predict_all(published: Mapping, delay: RankDelay) -> list[OutOfSample]:
    return [predict_study(study, delay) for study in published["studies"]]


def load() -> dict:
    return json.loads(OTHER_STUDIES.read_text())


def out_of_sample_rows(results: Sequence[OutOfSample]) -> list[list[str]]:
    rows = [["study", "model", "GPUs (ref)", "published E_G", "predicted E_G [band]", "error", "inside the band",
             "without the wait", "exposed communication's part", "wait's part", "where the figure stands"]]
    for item in results:
        study, p = item.study, item.prediction
        rows.append([f"{study['short']} ({study['framework']})", study["model"],
                     f"{study['gpus']} ({study['reference_gpus']})", f"{study['published_efficiency']:.2f}",
                     f"{p.efficiency:.3f} [{p.efficiency_range[0]:.3f}, {p.efficiency_range[1]:.3f}]",
                     f"{item.error:+.3f}", "yes" if item.inside else "no", f"{item.without_wait.efficiency:.3f}",
                     f"{item.parts['exposed communication']:.3f}", f"{item.parts['wait for the slowest rank']:.3f}",
                     study["efficiency_where"]])
    return rows


def not_predicted_rows(published: Mapping) -> list[list[str]]:
    return [["study", "published", "why not predicted"],
            *([item["cite"], item["published"], item["why"]] for item in published.get("not_predicted", []))]
