import json
import math

import pytest

from harness.judging.stats import Estimate
from harness.judging.verdicts import Reference, judge
from harness.store.baselines import BaselineError, BaselineFile


def write(path, data):
    path.write_text(json.dumps(data))
    return path


def entry(value=100.0, lower=-0.1, upper=0.1, **extra):
    return {"throughput": {"value": value, "lower": lower, "upper": upper, "unit": "img/s"}, **extra}


def baseline(tmp_path, cells):
    return write(tmp_path / "sys.json", {"schema_version": 1, "system": "sys", "cells": cells})


def test_missing_file_is_an_empty_baseline(tmp_path):
    file = BaselineFile.load(tmp_path / "none.json", "sys")
    assert file.entry("ddp-synthetic-resnet50-g1") is None


def test_corrupt_json_names_the_file(tmp_path):
    path = tmp_path / "sys.json"
    path.write_text('{"schema_version": 1, "cells": {')
    with pytest.raises(BaselineError, match=f"{path} is not valid JSON"):
        BaselineFile.load(path, "sys")


@pytest.mark.parametrize("data, why", [
    ([], "top level must be an object"),
    ({"schema_version": 9, "cells": {}}, "schema_version must be one of 1, 2, found 9"),
    ({"schema_version": 1, "cells": []}, '"cells" must be an object keyed by cell id, found a list'),
    ({"schema_version": 1, "cells": {"c": {"config_hash": "x"}}}, "none of the metrics"),
    ({"schema_version": 1, "cells": {"c": entry(value=-3)}}, 'positive numeric "value", found -3'),
    ({"schema_version": 1, "cells": {"c": entry(value=math.nan)}}, "found NaN"),
    ({"schema_version": 1, "cells": {"c": entry(value="30")}}, 'found "30"'),
    ({"schema_version": 1, "cells": {"c": {"throughput": 30}}}, "needs an object with a positive numeric"),
    ({"schema_version": 1, "cells": {"c": entry(config="cpu-small")}}, "config: must be an object or null, found a string"),
    ({"schema_version": 1, "cells": {"c": entry(config_hash=12)}}, "config_hash: must be a string or null"),
    ({"schema_version": 1, "cells": {"c": entry(yardstick=[0.1])}}, "yardstick: must be an object or null, found a list"),
    ({"schema_version": 1, "cells": {"c": entry(lower=0.2)}}, '"lower" must be a relative bound <= 0'),
])
def test_schema_violations_name_file_and_fault(tmp_path, data, why):
    path = write(tmp_path / "sys.json", data)
    with pytest.raises(BaselineError, match=str(path)) as error:
        BaselineFile.load(path, "sys")
    assert why in str(error.value)


def interval(value, half=1.0):
    return Estimate(value=value, low=value - half, high=value + half)


def test_judge_band_with_the_measured_interval():
    reference = Reference(value=100.0, lower=-0.1, upper=0.2, unit="img/s")
    assert judge(interval(95.0), reference, metric="throughput").kind == "pass"
    assert judge(interval(88.0), reference, metric="throughput").kind == "fail"
    assert judge(interval(90.5, half=2.0), reference, metric="throughput").kind == "inconclusive"
    assert judge(interval(122.0), reference, metric="throughput").kind == "faster"
    assert judge(interval(50.0), None, metric="throughput").kind == "no-baseline"
    assert "-12.0%" in judge(interval(88.0), reference, metric="throughput").message


def test_entry_without_band_gets_the_default_and_the_verdict_says_so(tmp_path):
    file = BaselineFile.load(baseline(tmp_path, {"c": {"throughput": {"value": 100.0}}}), "sys")
    reference = file.reference("c", "throughput")
    assert reference.defaulted and reference.lower == -0.15
    assert "default band" in judge(interval(80.0), reference, metric="throughput").message


def test_update_rewrites_only_given_cells_and_keeps_hand_edited_bands(tmp_path):
    path = baseline(tmp_path, {"a": entry(lower=-0.05, upper=None), "b": entry(value=7.0)})
    file = BaselineFile.load(path, "sys")
    data, changes = file.updated([{"cell": "a", "metrics": {"throughput": 110.0, "efficiency": None},
                                   "config_hash": "h", "config": {}, "provenance": {"host": "x"}},
                                  {"cell": "c", "metrics": {"throughput": 5.0}, "config_hash": "h", "config": {},
                                   "provenance": {}}])
    file.write(data)
    saved = json.loads(path.read_text())
    assert saved["schema_version"] == 2  # a schema 1 file is written back as schema 2: a list of entries per cell
    assert saved["cells"]["a"][0]["throughput"] == {"value": 110.0, "lower": -0.05, "upper": None, "unit": "img/s"}
    assert saved["cells"]["b"] == [entry(value=7.0)]
    assert saved["cells"]["c"][0]["throughput"]["lower"] == -0.15
    assert changes == ["a: throughput 100 -> 110 (+10.0%)", "c: throughput new 5 img/s"]
    data, _ = file.updated([{"cell": "b", "metrics": {"throughput": 8.0}, "config_hash": "h", "config": {},
                             "provenance": {}, "bands": {"throughput": {"lower": -0.07, "upper": 0.07,
                                                                         "repeats": [7.9, 8.1]}}}])
    assert data["cells"]["b"][0]["throughput"]["lower"] == -0.07  # a band derived from repeats replaces the old
    assert [p.name for p in tmp_path.iterdir()] == ["sys.json"]  # no temporary file left behind


def test_write_refuses_invalid_content_and_leaves_the_file_alone(tmp_path):
    path = baseline(tmp_path, {"a": entry()})
    before = path.read_text()
    file = BaselineFile.load(path, "sys")
    with pytest.raises(BaselineError):
        file.write({"schema_version": 1, "cells": {"a": {"throughput": {"value": "fast"}}}})
    assert path.read_text() == before


def test_update_drops_a_yardstick_the_new_figures_were_not_measured_with(tmp_path):
    path = baseline(tmp_path, {"c": {"throughput": {"value": 50.0}, "yardstick": {"seconds": 0.1, "version": 1}}})
    file = BaselineFile.load(path, "sys")
    data, _ = file.updated([{"cell": "c", "metrics": {"throughput": 60.0}, "config_hash": "h", "config": {},
                             "provenance": {}}])
    assert "yardstick" not in data["cells"]["c"][0]
    data, _ = file.updated([{"cell": "c", "metrics": {"throughput": 60.0}, "config_hash": "h", "config": {},
                             "provenance": {}, "yardstick": {"seconds": 0.2, "spread": 0.01, "version": 1}}])
    assert data["cells"]["c"][0]["yardstick"]["seconds"] == 0.2


def test_a_measurement_too_uncertain_for_a_baseline_says_why():
    from harness.judging.recording import too_uncertain_to_record
    from harness.rank.cell import Cell
    from harness.session.results import CellResult

    def result(throughput: Estimate, wait: float | None = None) -> CellResult:
        measured = CellResult(cell=Cell(framework="ddp", loader="synthetic", model="resnet50", ranks=1), runs=[],
                              config_hash="0")
        measured.throughput, measured.cpu_wait_share = throughput, wait
        return measured

    precise = result(Estimate(value=30.0, low=29.5, high=30.5))
    assert too_uncertain_to_record([precise], widest=0.10) is None
    burst = result(Estimate(value=18.24, low=9.06, high=37.23), wait=0.587)  # a real one, from a busy node
    assert too_uncertain_to_record([precise, burst], widest=0.10) == (
        "throughput 18.24 +-77.2% is too uncertain for a baseline (widest +-10.0%), its ranks waiting for a CPU "
        "for 59% of the step time")
    few = result(Estimate(value=30.0, low=math.nan, high=math.nan))
    assert "has no interval (too few steps)" in too_uncertain_to_record([few], widest=0.10)


def test_a_systems_tunables_set_the_default_band_and_a_bad_one_is_named(tmp_path):
    path = write(tmp_path / "sys.json", {"schema_version": 1, "system": "sys", "tunables": {"default_band": 0.08},
                                         "cells": {"c": {"throughput": {"value": 100.0}}}})
    file = BaselineFile.load(path, "sys")
    assert file.tunables.default_band == 0.08 and file.tunables.differences() == {"default_band": 0.08}
    reference = file.reference("c", "throughput")
    assert (reference.lower, reference.upper, reference.defaulted) == (-0.08, 0.08, True)
    data, _ = file.updated([{"cell": "new", "metrics": {"throughput": 50.0}, "config_hash": "h", "config": {},
                             "provenance": {}}])
    assert (data["cells"]["new"][0]["throughput"]["lower"], data["cells"]["new"][0]["throughput"]["upper"]) == (-0.08, 0.08)
    for tunables, named in (({"notable_share": 0.1}, "unknown tunable 'notable_share'"),
                            ({"min_effect": 1.5}, "min_effect must be a fraction between 0 and 1"),
                            ([0.1], '"tunables" must be an object')):
        write(path, {"schema_version": 1, "system": "sys", "tunables": tunables, "cells": {}})
        with pytest.raises(BaselineError, match=named):
            BaselineFile.load(path, "sys")
