"""Fixtures shared by the suite's own tests: a tiny dataset, its TFRecord shards, a launcher."""
import pytest

from harness.data.dataset import ensure
from harness.launch.launchers import LAUNCHERS

from .components import LAUNCHER_COMPONENTS, needs


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory):
    return ensure(tmp_path_factory.mktemp("data") / "images", classes=10, per_class=8, size=48)


@pytest.fixture(scope="session")
def tiny_tfrecords(tiny_dataset):
    from harness.data.tfrecord import convert

    return convert(tiny_dataset, tiny_dataset.with_name("tfrecords"), shards=2)


@pytest.fixture
def launcher(request):
    """The launcher named by the test's ``launcher`` parameter, skipped where it cannot run (a
    failure where CI declared it installed)."""
    launcher = LAUNCHERS.create(request.param)
    needs(LAUNCHER_COMPONENTS[request.param], launcher.unavailable_reason())
    return launcher
