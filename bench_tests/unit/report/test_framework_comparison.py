"""Frameworks side by side: same-run throughput ratios over DDP, beside seed 004's (no launch)."""
from pathlib import Path

import numpy as np
import pytest

from harness.rank.cell import Cell
from harness.report.framework_comparison import PUBLISHED_NOTES, PUBLISHED_RATIOS, comparison_rows, framework_ratios

SEEDS = Path(__file__).resolve().parents[4] / "shared" / "seeds"
"""The related studies' text, beside the checkout in the workplace (not shipped with dlscale)."""


def records(step_s, ranks, *, batch=16, steps=40, seed=0):
    rng = np.random.default_rng(seed)
    return [{"rank": r, "step_times": list(step_s * (1 + 0.02 * rng.standard_normal(steps))), "images": batch * steps}
            for r in range(ranks)]


def cell(framework, ranks=2, loader="synthetic"):
    return Cell(framework=framework, loader=loader, model="resnet44", ranks=ranks)


def test_a_framework_is_measured_against_ddp_on_the_same_loader_model_and_ranks():
    measured = [(cell("ddp"), records(0.100, 2)), (cell("horovod"), records(0.125, 2, seed=1)),
                (cell("horovod", ranks=1), records(0.1, 1)),  # no DDP cell at 1 rank: no ratio
                (cell("deepspeed", loader="native"), records(0.1, 2))]  # nor on the native loader
    [ratio] = framework_ratios(measured)
    assert ratio.cell == cell("horovod")
    assert abs(ratio.ratio.value - 0.8) < 0.02  # 0.100 s over 0.125 s a step, 2% noise
    assert ratio.ratio.low < ratio.ratio.value < ratio.ratio.high < ratio.ratio.low + 0.05


def test_a_parameter_server_cell_meets_the_ddp_cell_with_as_many_training_ranks():
    # g3 of two workers and a server (which writes no training record) beside DDP's g2: the same global batch
    measured = [(cell("ddp"), records(0.100, 2)), (cell("torch_ps_sync", ranks=3), records(0.200, 2, seed=1))]
    [ratio] = framework_ratios(measured)
    assert ratio.cell == cell("torch_ps_sync", ranks=3) and ratio.training_ranks == 2
    assert abs(ratio.ratio.value - 0.5) < 0.02
    assert comparison_rows([ratio])[1][2] == "3 (2 training)"


def test_the_table_quotes_seed_004_where_it_names_the_framework():
    measured = [(cell("ddp"), records(0.1, 2)), (cell("tensorflow"), records(0.2, 2)), (cell("horovod"), records(0.1, 2))]
    header, horovod, tensorflow = comparison_rows(framework_ratios(measured))
    assert header[-1] == "published (seed 004)"
    assert horovod[3] == "horovod" and horovod[-1] == "-"
    assert tensorflow[3] == "tensorflow" and tensorflow[4].startswith("0.500 [") and tensorflow[-1] == "0.377"


def test_the_published_ratios_are_quoted_from_the_seed_text():
    if not SEEDS.is_dir():
        pytest.skip(f"the seeds' text is not beside this checkout ({SEEDS})")
    quoted = [(published.source, published.quote) for published in PUBLISHED_RATIOS.values()]
    for source, quote in [*quoted, *((seed, quote) for seed, quote, _ in PUBLISHED_NOTES)]:
        assert quote in " ".join((SEEDS / source).read_text().split())
