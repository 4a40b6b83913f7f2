"""The reference-loop benchmark's setting (bench_tests/benchmarks/test_reference_loops.py): a
framework without a reference loop is one line before any launch, not a rank's traceback after
the rows before it ran (MXNet's reference launched torch's loop in MXNet's interpreter)."""
import pytest

from bench_tests.benchmarks.test_reference_loops import COMPARED, setting


def test_a_framework_without_a_reference_loop_is_refused_naming_those_with_one():
    with pytest.raises(ValueError, match=r"^DLSCALE_REFERENCE_FRAMEWORKS: no reference loop for mxnet "
                                         r"\(there is one for ddp, deepspeed, horovod, tensorflow, tensorflow_ps_async\)$"):
        setting({"DLSCALE_REFERENCE_FRAMEWORKS": "ddp,mxnet"})


def test_the_default_frameworks_each_have_a_reference_loop():
    assert setting({}).frameworks == COMPARED
