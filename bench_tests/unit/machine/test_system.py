"""harness.machine.system: the name a system's baselines are kept under, partition included."""
import pytest

from harness.machine.system import detect_system

CLUSTER = {"SLURM_CLUSTER_NAME": "juwels"}


def test_a_partition_makes_the_baseline_key_system_colon_partition():
    assert detect_system(None, env=CLUSTER) == "juwels"
    assert detect_system(None, env={**CLUSTER, "SLURM_JOB_PARTITION": "booster"}) == "juwels:booster"
    assert detect_system(None, "develop", env={**CLUSTER, "SLURM_JOB_PARTITION": "booster"}) == "juwels:develop"


def test_a_name_given_is_used_as_given():
    assert detect_system("site", "develop", env={**CLUSTER, "SLURM_JOB_PARTITION": "booster"}) == "site"
    assert detect_system(None, env={**CLUSTER, "DLSCALE_SYSTEM": "mine:gpu"}) == "mine:gpu"
    with pytest.raises(ValueError, match="not usable as a file name"):
        detect_system("a/b", env=CLUSTER)
