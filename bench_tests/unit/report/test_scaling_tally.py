"""The honest tally of the scaling model against the study (harness.report.scaling_tally): each
stated value's role, bounds judged on the band, the null models beside the full one."""
import copy
import json

import pytest

from harness.report import scaling_validation
from harness.report.scaling_tally import (FAILS, FITTED, HOLDS, IN_SAMPLE, INDEPENDENT, STRADDLES, Row, Tally,
                                          judge_bound, role_of)


def study():
    return json.loads(scaling_validation.PUBLISHED.read_text())


@pytest.fixture(scope="module")
def tally():
    published = study()
    return scaling_validation.validate(published, scaling_validation.fit(published))


def test_a_bound_is_judged_on_the_band_not_on_the_most_likely_value():
    assert judge_bound(">", 0.85, [(0.75, 0.93)]) == STRADDLES  # the point 0.93 would say it holds
    assert judge_bound(">", 0.85, [(0.86, 0.93)]) == HOLDS
    assert judge_bound("<", 0.44, [(0.45, 0.50)]) == FAILS
    assert judge_bound(">", 0.65, [(0.90, 1.0), (0.60, 0.64)]) == FAILS  # a range at its worst point
    with pytest.raises(ValueError, match="at least one band"):
        judge_bound(">", 0.5, [])


def test_the_studys_bound_at_256_gpus_straddles_the_band(tally):
    row = next(r for r in tally.rows if r.point.get("gpus_range") == [4, 256])
    assert row.efficiency > row.point["value"] and row.outcome == STRADDLES, row


def test_a_fitted_point_is_never_counted_as_independent(tally):
    published = study()
    fitted = scaling_validation.fit(published)
    nulls = [scaling_validation.fit(published, terms=terms) for terms in scaling_validation.NULL_MODELS]
    for row in tally.rows:
        fit_to = (scaling_validation.DELAY_POINT, scaling_validation.FILE_SYSTEM_POINT)
        if any(scaling_validation._matches(row.point, where) for where in fit_to):
            assert row.role == FITTED
        if row.role != INDEPENDENT:
            continue
        assert not row.point.get("in_sample")
        moved = copy.deepcopy(published)  # an independent value moves no fit, the full model's or a null's
        next(p for p in moved["efficiency"] if p == row.point)["value"] = 0.3
        assert scaling_validation.fit(moved) == fitted
        assert [scaling_validation.fit(moved, terms=n.terms) for n in nulls] == nulls
    assert role_of({"model": "m", "gpus": 8}, [{"model": "m", "gpus": 8}])[0] == FITTED
    assert role_of({"model": "m", "gpus": 8, "in_sample": "restates it"}, [{"gpus": 16}]) == (IN_SAMPLE, "restates it")


def test_the_study_has_one_independent_value_and_the_values_that_chose_the_form_are_in_sample(tally):
    roles = {(r.point["model"], r.point["loader"], r.point["relation"], r.point["value"]): r.role for r in tally.rows}
    assert [key for key, role in roles.items() if role == INDEPENDENT] == [("resnet50", "dali-gpu", "=", 0.68)]
    assert roles[("resnet152", "dali-cpu", "=", 0.81)] == IN_SAMPLE  # chose fixed seconds over a share of the step
    assert roles[("resnet50", "dali", ">", 0.85)] == IN_SAMPLE  # chose rare delays over a spread
    assert tally.errors(INDEPENDENT) == [pytest.approx(0.06, abs=0.01)]


def test_bounds_the_null_models_hold_too_tell_nothing_and_the_tally_says_so(tally):
    bounds = tally.bounds()
    assert len(bounds) == 6
    assert tally.held_by_null("null: file system only") == 6  # no wait, no decoding, no communication: all hold
    assert not any(row.tells_apart for row in bounds)
    assert "holds 6 of them" in str(tally) and "0 tell the full model from a null model" in str(tally)
    row = Row(point={"relation": ">", "value": 0.5}, role=INDEPENDENT, why="", efficiency=0.6, band=(0.55, 0.6),
              nulls={"null": (0.4, (0.4, 0.4))}, outcome=HOLDS, null_outcomes={"null": FAILS})
    assert row.tells_apart and "1 tell the full model from a null model" in str(Tally(rows=(row,)))


def test_each_physical_term_is_seen_by_a_value_or_the_tally_shows_it_is_not(tally):
    gpu = next(r for r in tally.rows if r.point["loader"] == "dali-gpu")
    # the null without GPU decoding misses the one independent value by more: decoding is what it tests
    assert abs(gpu.null_error("null: fitted terms only")) > abs(gpu.error) + 0.01
    # communication is in the full model's band only: its band reaches lower than the null's
    fitted_row = next(r for r in tally.rows if r.role == FITTED and r.point["loader"] == "dali-cpu")
    assert fitted_row.band[0] < fitted_row.nulls["null: fitted terms only"][1][0] - 0.03
    # without the wait the DALI points are not reproduced: the file-system-only null misses the fitted 0.76
    assert fitted_row.null_error("null: file system only") > 0.2


def test_the_summary_counts_only_independent_errors_against_the_goal(tally):
    published = study()
    fitted = scaling_validation.fit(published)
    others = scaling_validation.predict_other_studies(fitted)
    summary = scaling_validation.summarise(tally, scaling_validation.leave_one_out(published), others)
    assert len(others) >= 3
    assert sorted(summary.independent_errors) == sorted(tally.errors(INDEPENDENT) + [abs(o.error) for o in others])
    in_sample, left_out = tally.errors(IN_SAMPLE), summary.left_out_errors
    assert in_sample and left_out and not set(in_sample + left_out) & set(summary.independent_errors)
    text = str(summary)
    assert ("not met" in text) == (not summary.goal_met) and "in-sample |error|" in text
