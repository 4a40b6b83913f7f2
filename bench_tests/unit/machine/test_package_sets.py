"""A reference's package set (``--against pkg:NAME==VERSION``) built for real with uv from this
machine's indexes: the pinned version shadows the current one, everything else is the current
environment's, a second build is the cached one, and a version no index has is one line naming it
with nothing left behind."""
import dataclasses
import importlib.metadata
import importlib.util
import os
import subprocess

import pytest

from harness.machine import package_sets, references
from harness.machine.package_sets import COMPLETE, PackageSetError, overlay
from harness.machine.provenance import installed_packages
from harness.session.preflight import cannot_start_in

OTHER_NUMPY = "2.3.5"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = tmp_path_factory.mktemp("environments")
    assert importlib.metadata.version("numpy") != OTHER_NUMPY, "pick another numpy for the pin"
    return cache, overlay({"numpy": OTHER_NUMPY}, installed_packages(), cache)


def test_the_pinned_version_shadows_the_current_and_the_rest_is_the_current_environment(built):
    _, python = built
    seen = subprocess.run([str(python), "-c", "import numpy, torch; print(numpy.__version__, numpy.__file__, "
                                              "torch.__file__)"], capture_output=True, text=True, check=True)
    numpy_version, numpy_file, torch_file = seen.stdout.split()
    assert numpy_version == OTHER_NUMPY and numpy_file.startswith(str(python.parent.parent))
    assert torch_file == importlib.util.find_spec("torch").origin


def test_a_second_build_of_the_same_set_is_the_cached_one(built):
    cache, python = built
    assert overlay({"numpy": OTHER_NUMPY}, installed_packages(), cache) == python
    assert (python.parent.parent / COMPLETE).is_file()
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == [python.parent.parent.name]


def test_a_reference_with_a_pin_runs_its_ranks_in_the_package_sets_interpreter(built):
    cache, python = built
    reference = references.build([f"pkg:numpy=={OTHER_NUMPY}"], references.current({}), cache=cache)
    assert reference.python == str(python) and reference.packages == {"numpy": OTHER_NUMPY}
    assert reference.label == f"reference: numpy {OTHER_NUMPY}"


def test_a_version_no_index_has_is_one_line_naming_it_and_leaves_nothing(tmp_path):
    with pytest.raises(PackageSetError) as error:
        overlay({"numpy": "0.0.7"}, installed_packages(), tmp_path)
    message = str(error.value)
    assert message.startswith("--against pkg: numpy==0.0.7 cannot be built: ") and "\n" not in message
    assert "numpy==0.0.7" in message.partition("built: ")[2]
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == []


def test_a_cell_whose_ranks_cannot_start_in_the_package_set_is_refused_before_any_launch(built):
    cache, _ = built
    reference = references.build([f"pkg:numpy=={OTHER_NUMPY}"], references.current({}), cache=cache)
    assert cannot_start_in(reference, "ddp") is None and cannot_start_in(references.current({}), "mxnet") is None
    assert cannot_start_in(reference, "tensorflow") == (
        "the reference's packages (numpy) are set over the torch runtime's interpreter; tensorflow's ranks run in "
        "the tensorflow runtime's")
    broken = dataclasses.replace(reference, python="/bin/false")
    assert cannot_start_in(broken, "ddp") == "the reference environment (/bin/false) cannot import torch: exit 1"


def test_a_pip_variable_wins_over_pips_files_as_in_pip():
    options = package_sets.index_options(dict(os.environ, PIP_FIND_LINKS="/tmp/dlscale-wheels-a /tmp/dlscale-wheels-b"))
    links = [options[i + 1] for i, option in enumerate(options) if option == "--find-links"]
    assert links == ["/tmp/dlscale-wheels-a", "/tmp/dlscale-wheels-b"], options
