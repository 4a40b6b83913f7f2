"""The scaling model out of sample (harness.report.scaling_other_studies): other studies' published
scaling, each predicted from its own stated hardware and workload with nothing refitted."""
import copy
import json

import pytest

from harness.report import scaling_other_studies, scaling_validation
from harness.report.stragglers import RankDelay

INPUT_SOURCES = ("efficiency_quote", "efficiency_where", "batch_quote", "gpu_quote", "gpus_per_node_source",
                 "inter_node_quote", "intra_node_source", "gradient_bytes_source", "bucket_source")


def studies():
    return scaling_other_studies.load()


def test_every_study_states_where_each_input_and_its_published_figure_stand():
    published = studies()
    assert len(published["studies"]) >= 3
    for study in published["studies"]:
        for key in INPUT_SOURCES:
            assert isinstance(study.get(key), str) and len(study[key]) > 20, (study["id"], key)
        assert 64 <= study["gpus"] and 0 < study["published_efficiency"] <= 1
        assert (f"{study['reference_gpus']} to {study['gpus']}" in study["efficiency_quote"]
                or "hypothesis" in study.get("reference_source", "")), study["id"]  # the reference: stated or marked
    for item in published["not_predicted"]:
        assert item["why"] and item["published"]  # a study not predicted says why, rather than guessing


def test_a_study_is_predicted_from_its_inputs_and_its_published_figure_moves_nothing_but_the_error():
    delay = RankDelay(mean_s=scaling_validation.fit(json.loads(scaling_validation.PUBLISHED.read_text())).delay_mean_s)
    study = studies()["studies"][0]
    moved = copy.deepcopy(study)
    moved["published_efficiency"] = 0.5
    first, second = (scaling_other_studies.predict_study(s, delay) for s in (study, moved))
    assert first.prediction == second.prediction and second.error == pytest.approx(first.error + 0.40)
    slower = dict(study, inter_node_bytes_per_s=study["inter_node_bytes_per_s"] / 10)
    assert scaling_other_studies.predict_study(slower, delay).prediction.efficiency_range[0] \
        < first.prediction.efficiency_range[0]  # the stated link reaches the band


def test_the_wait_is_carried_over_from_the_study_unrefitted_and_the_band_spans_none_of_it():
    fitted = scaling_validation.fit(json.loads(scaling_validation.PUBLISHED.read_text()))
    for item in scaling_validation.predict_other_studies(fitted):
        cell, _ = scaling_other_studies.study_cell(item.study, RankDelay(mean_s=fitted.delay_mean_s))
        assert cell.delay.mean_s == fitted.delay_mean_s
        assert item.prediction.efficiency <= item.without_wait.efficiency <= item.prediction.efficiency_range[1] + 1e-9
        assert item.prediction.efficiency_range[0] <= item.prediction.efficiency <= item.prediction.efficiency_range[1]


def test_the_docs_quote_the_errors_the_model_gives_now():
    from pathlib import Path

    published = json.loads(scaling_validation.PUBLISHED.read_text())
    fitted = scaling_validation.fit(published)
    others = scaling_validation.predict_other_studies(fitted)
    tally = scaling_validation.validate(published, fitted)
    summary = scaling_validation.summarise(tally, scaling_validation.leave_one_out(published), others)
    docs = (Path(scaling_validation.__file__).parents[2] / "docs" / "scaling-model.md").read_text()
    for item in others:
        p = item.prediction
        assert f"{p.efficiency:.3f} [{p.efficiency_range[0]:.3f}, {p.efficiency_range[1]:.3f}] | {item.error:+.3f}" in docs
    assert f"median |error| of {summary.median_error:.3f}" in docs and f"worst of {max(summary.independent_errors):.3f}" in docs
    assert ("**Not met.**" in docs) == (not summary.goal_met)
