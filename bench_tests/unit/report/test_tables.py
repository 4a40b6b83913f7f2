"""The cells' summary: one table model for the terminal and the HTML report, read from results-file cells."""
from harness.judging.kinds import VerdictKind
from harness.judging.stats import Estimate
from harness.report.html import _summary_section_rows
from harness.report.tables import SUMMARY_COLUMNS, format_table, summary_rows


def _cell(**overrides) -> dict:
    cell = {"cell": "ddp-synthetic-resnet50-g2", "launcher": "mpirun", "status": "ok", "runs": 2,
            "throughput": Estimate(value=231.0, low=221.0, high=241.0).to_json(),
            "efficiency": Estimate(value=0.9, low=0.85, high=0.95).to_json(), "efficiency_source": "measured",
            "metrics": {"ranks": 2, "step_time": 0.1454}, "machine_speed": 1.1, "baseline_throughput": 200.0,
            "contended_runs": 0, "verdict": VerdictKind.PASS}
    return cell | overrides


def _row(cell: dict) -> dict:
    header, row = summary_rows([cell])
    return dict(zip(header, row))


def test_a_judged_cell_shows_its_interval_per_rank_figure_and_change_at_the_baselines_machine_speed():
    row = _row(_cell())
    assert row["img/s (95% CI)"] == "231.0 [221.0, 241.0]" and row["img/s/rank"] == "115.5"
    assert row["E_G (95% CI)"] == "0.900 [0.850, 0.950]" and row["step s"] == "0.1454"
    assert row["baseline img/s"] == "200.0" and row["machine"] == "+10.0%"
    assert row["delta"] == "+5.0%"  # 231 on a machine 10% faster is 210 on the baseline's
    assert row["runs"] == "2" and row["verdict"] == "pass"


def test_across_machines_the_change_is_as_measured_and_says_so():
    assert _row(_cell(verdict=VerdictKind.MACHINE_DIFFERS))["delta"] == "+15.5% raw"


def test_contended_launches_a_borrowed_reference_and_no_baseline_are_named():
    row = _row(_cell(contended_runs=1, efficiency_source="baseline", baseline_throughput=None))
    assert row["runs"] == "2 (1 contended, left out)"
    assert row["E_G (95% CI)"].endswith("(ref: baseline)")
    assert row["baseline img/s"] == "-" and row["delta"] == "-"


def test_a_failed_launch_keeps_its_baseline_and_says_how_it_failed():
    row = _row(_cell(throughput=None, efficiency=None, metrics=None, verdict="error", status="timeout"))
    assert row["verdict"] == "error (timeout)" and row["baseline img/s"] == "200.0"
    assert row["img/s (95% CI)"] == row["delta"] == "-"


def test_the_terminal_and_the_html_render_the_same_rows():
    cells = [_cell(), _cell(cell="ddp-synthetic-resnet50-g4", verdict=VerdictKind.FAIL)]
    text = format_table(summary_rows(cells))
    html_rows, classes = _summary_section_rows(cells)
    assert html_rows == summary_rows(cells) and html_rows[0] == list(SUMMARY_COLUMNS)
    assert classes == ["pass", "fail"]
    assert all(value in text for row in html_rows for value in row)
