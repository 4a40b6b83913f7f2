"""All-reduce time and bus bandwidth against message size on real ranks, in the manner of
nccl-tests: busbw = algbw x 2(G-1)/G, for the backend in use (gloo on CPU, NCCL with a GPU per rank).

    pytest bench_tests/benchmarks/test_collectives.py --benchmark-only      (or DLSCALE_BENCHMARKS=1 pytest ...)

Not part of ordinary runs: without one of those it skips. This pytest process is rank 0 and
pytest-benchmark times its all-reduces; ranks 1..G-1 are spawned helpers that mirror them
(harness.report.collectives.AllReduceGroup). G is 2 unless DLSCALE_COLLECTIVE_RANKS says otherwise.
The figures go to results/collectives.json (or $DLSCALE_COLLECTIVES_JSON), which the report reads
for each model's communication lower bound.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("pytest_benchmark", reason="the collective benchmark needs pytest-benchmark")

from harness.common.jsonio import write_json_atomic  # noqa: E402
from harness.machine.provenance import provenance  # noqa: E402
from harness.rank.packages import tracked_packages  # noqa: E402
from harness.report.collectives import AllReduceGroup, result_row  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SIZES = [4096 * 4**k for k in range(8)]  # 4 KB .. 64 MB
RANKS = int(os.environ.get("DLSCALE_COLLECTIVE_RANKS", "2"))
ROUNDS = 5
OUTPUT = Path(os.environ.get("DLSCALE_COLLECTIVES_JSON", REPO / "results" / "collectives.json"))

pytestmark = pytest.mark.benchmark(group="allreduce", min_rounds=ROUNDS)


def iterations_for(nbytes: int) -> int:
    """Enough calls per round that a round of small messages lasts well above the timer's resolution."""
    return max(1, min(50, (4 << 20) // nbytes))


@pytest.fixture(autouse=True)
def only_when_asked(request):
    if not (request.config.getoption("benchmark_only", False) or os.environ.get("DLSCALE_BENCHMARKS")):
        pytest.skip("a benchmark: run with --benchmark-only or DLSCALE_BENCHMARKS=1")


@pytest.fixture(scope="module")
def group():
    with AllReduceGroup(ranks=RANKS) as group:
        group.results = []
        yield group
        if group.results:
            OUTPUT.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(OUTPUT, {
                "kind": "collectives", "op": "allreduce", "backend": group.backend,
                "device": str(group.torch_device), "ranks": RANKS, "dtype": "float32",
                "statistic": "median over rounds of the time per call on rank 0",
                "provenance": provenance(REPO, tracked=tracked_packages()),
                "results": sorted(group.results, key=lambda row: row["bytes"]),
            })


@pytest.mark.parametrize("nbytes", SIZES, ids=lambda n: f"{n // 1024}KB" if n < 1 << 20 else f"{n >> 20}MB")
def test_allreduce_bus_bandwidth(benchmark, group, capsys, nbytes):
    buffer = group.start(nbytes // 4)
    iterations = iterations_for(nbytes)
    try:
        benchmark.pedantic(group.allreduce, args=(buffer,), rounds=ROUNDS, iterations=iterations, warmup_rounds=1)
    finally:
        group.finish(buffer)  # however many calls pytest-benchmark made, the helpers stop here
    assert buffer[0].item() == 1 and buffer[1:].abs().sum().item() == 0  # a real sum over every rank
    if benchmark.stats is None:  # --benchmark-disable: ran once, nothing measured
        return
    row = result_row(nbytes, benchmark.stats.stats.median, RANKS, fastest_s=benchmark.stats.stats.min,
                     rounds=ROUNDS, iterations=iterations)
    group.results.append(row)
    benchmark.extra_info.update(bytes=nbytes, ranks=RANKS, backend=group.backend,
                                algbw_gbps=round(row["algbw_gbps"], 4), busbw_gbps=round(row["busbw_gbps"], 4))
    with capsys.disabled():
        print(f"\n[allreduce {group.backend} x{RANKS}] {nbytes:>10} B  {row['time_s'] * 1e6:10.1f} us  "
              f"algbw {row['algbw_gbps']:7.3f} GB/s  busbw {row['busbw_gbps']:7.3f} GB/s")
