"""Shared settings for the suite's own tests: a workload small enough for a 2-core machine."""
import pytest

from harness.cells import Workload
from harness.dataset import ensure
from harness.launchers import LAUNCHERS

TINY = Workload(image_size=32, batch_size=8, warmup_steps=2, steps=5, num_workers=1, num_classes=10)

@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory):
    return ensure(tmp_path_factory.mktemp("data") / "images", classes=10, per_class=8, size=48)

@pytest.fixture(scope="session")
def tiny_tfrecords(tiny_dataset):
    from harness.tfrecord import convert

    return convert(tiny_dataset, tiny_dataset.with_name("tfrecords"), shards=2)


@pytest.fixture
def launcher(request):
    """The launcher named by the test's ``launcher_name`` parameter, skipped where it cannot run."""
    launcher = LAUNCHERS.create(request.param)
    reason = launcher.unavailable_reason()
    if reason:
        pytest.skip(f"{request.param}: {reason}")
    return launcher
