"""What a test does for want of a component (bench_tests/components.py): a skip outside CI, a
failure naming it where ci/test declared it installed; and ci/test declares only known names."""
import os
import subprocess
from pathlib import Path

import pytest

from bench_tests.components import REQUIRED_VARIABLE, framework_component, known_components, needs

REPO = Path(__file__).resolve().parents[2]


def test_a_missing_component_skips_outside_ci_and_fails_where_declared(monkeypatch):
    monkeypatch.delenv(REQUIRED_VARIABLE, raising=False)
    needs("horovod", None)  # present: nothing happens
    with pytest.raises(pytest.skip.Exception, match="^horovod: not built here$"):
        needs("horovod", "not built here")
    monkeypatch.setenv(REQUIRED_VARIABLE, "mpirun horovod")
    with pytest.raises(pytest.fail.Exception, match=f"horovod is missing, though {REQUIRED_VARIABLE} declares it "
                                                    "installed: not built here"):
        needs("horovod", "not built here")
    with pytest.raises(pytest.skip.Exception):
        needs("dali", "not installed")  # not declared: still a skip


def test_each_framework_needs_its_package_in_its_runtime():
    assert [framework_component(name) for name in ("ddp", "torch_ps_sync", "horovod", "deepspeed_zero2",
                                                   "tensorflow", "horovod_tf", "mxnet_ps_async")] == \
        ["torch", "torch", "horovod", "deepspeed", "tensorflow", "horovod+tensorflow", "mxnet"]


def test_ci_test_declares_only_components_the_tests_ask_for():
    """ci/test's declaration as CI makes it (root, no settings); a misspelt name would declare nothing."""
    script = (REPO / "ci" / "test").read_text()
    declaring = script[script.index("components=("):script.index("export ")].replace("$EUID", "0")  # as root
    declared = subprocess.run(["bash", "-c", f"{declaring}\necho \"${{components[*]}}\""],
                              capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]}).stdout.split()
    assert set(declared) <= known_components() and len(declared) == len(set(declared))
    assert {"slurm", "mpirun", "torchrun", "horovod", "horovod+tensorflow", "deepspeed", "dali", "tensorflow",
            "mxnet", "two-hosts", "local-slurm"} <= set(declared)


def test_an_unknown_declared_component_stops_the_session(pytester, monkeypatch):
    monkeypatch.setenv(REQUIRED_VARIABLE, "horovod tensorflw")
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest("-p", "bench_tests.components", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{REQUIRED_VARIABLE} names unknown component(s) tensorflw; known: *"])
