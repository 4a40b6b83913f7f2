"""Loader throughput, side by side: PyTorch's DataLoader with N worker processes against DALI on CPU
with N threads, on the same JPEG files, in images per second per core (per worker or thread).

    pytest bench_tests/benchmarks --benchmark-only          (or DLSCALE_BENCHMARKS=1 pytest ...)

Not part of ordinary runs: without one of those it skips. pytest-benchmark times each loader and
saves or compares the numbers as usual (--benchmark-autosave, --benchmark-compare); each dali-cpu
result carries its ratio to the native loader with the same N in ``extra_info``, and the ratio is
printed as soon as it is known.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("pytest_benchmark", reason="the loader benchmark needs pytest-benchmark")

from harness.data.dataset import ensure  # noqa: E402
from harness.rank.loaders import LOADERS  # noqa: E402
from harness.rank.rankenv import RankInfo  # noqa: E402
from harness.rank.workload import Workload  # noqa: E402

IMAGE_SIZE, BATCH_SIZE = 64, 32
BATCHES_PER_ROUND, ROUNDS = 20, 5
CORES = (1, 2)
LOADER_NAMES = ("native", "dali-cpu")
RESULTS: dict[tuple[str, int], float] = {}
"""(loader, N) -> images per second per core, filled as the tests run."""

pytestmark = pytest.mark.benchmark(group="loader images/s", min_rounds=ROUNDS)


@pytest.fixture(autouse=True)
def only_when_asked(request):
    if not (request.config.getoption("benchmark_only", False) or os.environ.get("DLSCALE_BENCHMARKS")):
        pytest.skip("a benchmark: run with --benchmark-only or DLSCALE_BENCHMARKS=1")


@pytest.fixture(scope="module")
def dataset() -> Path:
    cache = Path(os.environ.get("DLSCALE_CACHE", Path.home() / ".cache" / "dlscale"))
    return ensure(cache / "dataset", classes=100, per_class=24, size=96)  # the one ci/setup.sh makes


@pytest.fixture
def single_threaded_main():
    """The loaders' own workers or threads are the N cores measured; the consumer adds one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def take(stream, batches: int) -> int:
    images = 0
    for _ in range(batches):
        batch, _labels = next(stream)
        images += batch.shape[0]
    return images


@pytest.mark.parametrize("cores", CORES, ids=lambda n: f"N{n}")
@pytest.mark.parametrize("name", LOADER_NAMES)
def test_loader_throughput(benchmark, dataset, single_threaded_main, capsys, name, cores):
    if name.startswith("dali"):
        pytest.importorskip("nvidia.dali", reason="NVIDIA DALI is not installed (bash ci/install_dali.sh .venv)")
    workload = Workload(image_size=IMAGE_SIZE, batch_size=BATCH_SIZE, num_classes=100, data_dir=str(dataset),
                        num_workers=cores, dali_threads=cores, prefetch=2)
    rank = RankInfo(rank=0, world_size=1, local_rank=0, local_world_size=1, master_addr="127.0.0.1",
                    master_port=29500, source="torchrun")
    loader = LOADERS.create(name, workload=workload, rank=rank, device=torch.device("cpu"))
    try:
        stream = iter(loader)
        take(stream, 2)  # worker start-up and the first prefetch are not throughput
        images = benchmark.pedantic(take, args=(stream, BATCHES_PER_ROUND), rounds=ROUNDS, warmup_rounds=1)
    finally:
        loader.close()
        del loader
    if benchmark.stats is None:  # --benchmark-disable: ran once, nothing measured
        return
    per_core = images / benchmark.stats.stats.median / cores
    RESULTS[(name, cores)] = per_core
    benchmark.extra_info.update(images_per_round=images, cores=cores, images_per_s_per_core=round(per_core, 1))
    native = RESULTS.get(("native", cores))
    if name != "native" and native:  # the native run with the same N came just before this one
        benchmark.extra_info["ratio_vs_native"] = round(per_core / native, 3)
        with capsys.disabled():
            print(f"\n[loader benchmark] N={cores}: native {native:.1f}, {name} {per_core:.1f} images/s per core "
                  f"({IMAGE_SIZE} px crops, batch {BATCH_SIZE}): {name}/native = {per_core / native:.2f}")
