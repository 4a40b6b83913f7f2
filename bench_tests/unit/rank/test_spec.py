"""harness.rank.spec: what the runner writes for its ranks comes back typed, and a misspelt key is
refused rather than silently ignored."""
import json

import pytest

from harness.rank.faults import Fault
from harness.rank.spec import DataDelay, RankOptions, WorkerSpec


def test_a_spec_survives_its_json_file():
    spec = WorkerSpec(cell={"framework": "ddp", "loader": "synthetic", "model": "resnet50", "ranks": 2},
                      workload={"batch_size": 8}, output_dir="/tmp/out", launch_environment=("NCCL_IB_HCA",),
                      options=RankOptions(device="cpu", cores_per_rank=1, fault=Fault(kind="slow", fraction=0.2),
                                          data_delay=DataDelay(seconds=0.5, rank=1)))
    assert WorkerSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    accuracy = WorkerSpec(cell={"framework": "ddp"}, workload=None, output_dir="/tmp/a",
                          options=RankOptions(accuracy={"epochs": 2}))
    assert WorkerSpec.from_json(json.loads(json.dumps(accuracy.to_json()))) == accuracy


def test_an_unknown_key_or_a_bad_fault_is_refused():
    data = WorkerSpec(cell={}, workload=None, output_dir="/tmp/out").to_json()
    with pytest.raises(ValueError, match="unknown worker spec keys: core_per_rank"):
        WorkerSpec.from_json({**data, "core_per_rank": 1})
    with pytest.raises(ValueError, match="unknown fault kind"):
        WorkerSpec.from_json({**data, "fault": {"kind": "melt", "rank": 0}})


def test_an_option_another_checkouts_worker_does_not_know_is_left_out_of_its_spec():
    from pathlib import Path

    from harness.rank import spec as spec_module
    from harness.rank.spec import option_names_of

    ours = option_names_of(Path(spec_module.__file__).read_text())
    assert {"compute_probe", "core_set", "window_gate", "yardstick"} <= ours
    older = ours - {"compute_probe"}
    spec = WorkerSpec(cell={}, workload=None, output_dir="/tmp/out",
                      options=RankOptions(compute_probe=False, yardstick=False, core_set=(1,)))
    assert spec.to_json(older)["yardstick"] is False and "compute_probe" not in spec.to_json(older)
    assert WorkerSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
