"""Rank runtimes: which interpreter a runtime's ranks start in, and why one cannot start, asked of
that interpreter without importing its framework here."""
import sys

import pytest

from harness.common.registry import Entry, Registry
from harness.rank.runtime import interpreter, rank_interpreter, unavailable


def test_torch_ranks_run_in_this_interpreter():
    assert interpreter("torch") == sys.executable and rank_interpreter("torch") is None


def test_a_runtime_names_its_interpreter_by_variable(tmp_path):
    python = tmp_path / "python"
    env = {"DLSCALE_PYTHON_TENSORFLOW": str(python)}
    assert interpreter("tensorflow", env) == rank_interpreter("tensorflow", env) == str(python)
    with pytest.raises(ValueError, match="unknown runtime 'jax'"):
        interpreter("jax", env)


def test_a_runtime_whose_interpreter_is_missing_says_how_to_install_it(tmp_path):
    reason = unavailable("mxnet", env={"DLSCALE_PYTHON_MXNET": str(tmp_path / "no-python")})
    assert "the mxnet runtime needs mxnet" in reason and "ci/install_runtimes.sh" in reason
    assert "DLSCALE_PYTHON_MXNET" in reason


def test_a_backend_module_is_asked_of_the_runtimes_interpreter():
    """Here the variable points at this very interpreter, which has torch but no such module; torch's
    runtime reads no such variable, so its reason names none."""
    backend = Entry("x:y", requires="no_such_module_here", install="pip install it")
    env = {"DLSCALE_PYTHON_TENSORFLOW": sys.executable}
    assert interpreter("tensorflow", env) == sys.executable
    reason = unavailable("torch", backend, env)
    assert reason.startswith("the framework needs no_such_module_here") and "pip install it" in reason
    assert "DLSCALE_PYTHON" not in reason


def test_a_loader_is_implemented_per_runtime():
    registry = Registry("loader", {
        "native": Entry("torch.mod:Native", runtimes={"tensorflow": "tf.mod:Folder"}),
        "native-tfrecord": Entry("", runtimes={"tensorflow": "tf.mod:Records"}),
    })
    assert registry.target("native") == "torch.mod:Native"
    assert registry.target("native", "tensorflow") == "tf.mod:Folder"
    assert registry.target("native", "mxnet") is None and registry.target("native-tfrecord") is None
    assert registry.runtimes_of("native-tfrecord") == ["tensorflow"]
    with pytest.raises(ValueError, match="loader native-tfrecord has no torch implementation; it has: tensorflow"):
        registry.resolve("native-tfrecord")
