"""dlscale-publish's site and digest from a generated month of nightlies (bench_tests/site_history.py):
each role shows as it should on the cell pages, the regressions page and its feed; bad input is
named; the plots draw every night. The same site in a real browser: test_site_browser.py."""
import re
import xml.etree.ElementTree as ET

import pytest

from bench_tests import site_history
from bench_tests.site_history import (ACCEPTED_DROP_AT, DROP_AT, GONE_NIGHT, NO_REPORT_NIGHT, PACKAGE_AT, commit,
                                      run_id)
from harness.report.site import nights, svg
from harness.report.site.digest import digest
from harness.report.site.publish import main
from harness.report.site.views import cell_views

NIGHTS = site_history.MONTH


def plot(page, metric="throughput"):
    """The SVG of one plot of a cell page."""
    text = page.read_text()
    start = text.index(f'id="plot-{metric}"')
    return text[start:text.index("</svg>", start)]


def test_only_the_persistent_drop_is_an_open_regression(published):
    page = (published.site / "regressions.html").read_text()
    drop = published.cells["drop"]
    assert f'id="{drop}"' in page
    assert f"dlscale-bisect {drop} --good {commit(DROP_AT - 1)} --bad {commit(DROP_AT)}" in page
    assert f"{commit(DROP_AT - 1)[:10]}..{commit(DROP_AT)[:10]}" in page
    assert "<b>software</b>: software: the current environment is 15.2% slower" in page
    for role in ("accepted", "blip", "package", "slow-node", "failed", "steady"):
        assert f'id="{published.cells[role]}"' not in page, role
    index = (published.site / "index.html").read_text()
    assert index.index(drop) < min(index.index(cell) for role, cell in published.cells.items() if role != "drop")


def test_the_feed_has_one_entry_per_open_regression(published):
    atom = "{http://www.w3.org/2005/Atom}"
    feed = ET.parse(published.site / "regressions.atom").getroot()
    entries = feed.findall(f"{atom}entry")
    assert [entry.find(f"{atom}link").get("href") for entry in entries] == [f"cell-{published.cells['drop']}.html"]
    assert entries[0].find(f"{atom}title").text.startswith(f"{published.cells['drop']}: -1")
    assert entries[0].find(f"{atom}updated").text.startswith(run_id(DROP_AT)[:4])


def test_every_night_is_drawn_and_a_failed_one_as_a_failure(published):
    for role in published.cells:
        assert plot(published.page(role)).count('class="night') == NIGHTS, role
    assert plot(published.page("failed")).count('class="night failed"') == 1
    assert plot(published.page("steady")).count('class="night failed"') == 0


def test_change_points_acceptances_and_what_changed_are_marked(published):
    drop = plot(published.page("drop"))
    assert drop.count('class="mark change"') == 1 and "level shift from 2026-11-19" in drop
    accepted = published.page("accepted").read_text()
    assert 'class="mark accepted"' in plot(published.page("accepted"))
    assert re.search(r'<tr class="accepted">\s*<td>' + str(ACCEPTED_DROP_AT + 1), accepted)
    assert "re-recorded by a.person" in accepted
    package = plot(published.page("package"))
    assert "package set pkgset-a1 -&gt; pkgset-b2" in package and 'class="mark work"' in package
    assert 'class="mark change"' not in plot(published.page("blip"))
    assert plot(published.page("slow-node")).count('class="mark change"') == 2  # down for three nights, and back


def test_the_baseline_band_is_drawn_as_it_was_each_night(published):
    bands = plot(published.page("accepted")).count('class="band"')
    assert bands == 2  # the band before the acceptance, and the re-recorded one after it
    assert plot(published.page("steady")).count('class="band"') == 1


def test_a_point_names_its_night_and_commit_and_links_its_report(published):
    drop = plot(published.page("drop"))
    last = f"run {run_id(NIGHTS - 1)}, commit {commit(NIGHTS - 1)[:10]}: "
    assert re.search(re.escape(last) + r"[\d.]+ \[[\d.]+, [\d.]+\] img/s, fail", drop)
    links = re.findall(r'<a href="([^"]+)">', drop)
    assert len(links) == NIGHTS - 2  # the night whose folder is gone and the night without a report have none
    assert all((published.site / link).is_file() for link in links)


def test_bad_input_is_named_and_the_site_built(published):
    index = (published.site / "index.html").read_text()
    lines = published.history.read_text().count("\n")
    assert f"skipped line {lines}: not valid JSON" in index
    assert f"results folder {published.results.parent / 'gone'} is gone" in index
    assert f"run {run_id(GONE_NIGHT)}: no report: no results folder holds run {run_id(GONE_NIGHT)}" in index
    assert f"run {run_id(NO_REPORT_NIGHT)}: no report in " in index


def test_the_compare_page_shows_the_latest_two_nights_with_the_work(published):
    page = (published.site / "compare.html").read_text()
    assert f"Run {run_id(NIGHTS - 2)}" in page and f"against run {run_id(NIGHTS - 1)}" in page
    assert page.count("<tr>") == len(published.cells) + 1
    assert "the same (" in page


def test_the_digest_names_the_night_and_its_unmeasured_cells(published):
    summary = published.summary.read_text()
    assert summary.startswith(f"# dlscale nightly: run {run_id(NIGHTS - 1)}")
    assert "[the site](site/index.html)" in summary
    assert "- mxnet-native-resnet50-g2: not measured for want of time" in summary


def generated_digest(nights, change=None):
    """The digest of a generated history of ``nights`` nights, ``change`` applied to its last line;
    its sections by title, and the cells by role."""
    cells = site_history.templates(len(site_history.ROLES) + 1)
    roles = dict(zip((cell["cell"] for cell in cells), site_history.ROLES))
    rows = site_history.history(cells, nights, roles)
    if change:
        rows[-1].update(change)
    views = cell_views(rows, {}, threshold=0.05, min_nights=3)
    summary = digest(rows, views, {}, site="https://example.invalid/site/", min_nights=3)
    assert f"No results folder was found for run {run_id(nights - 1)}" in summary
    return dict(re.findall(r"## (.+?)\n\n(.*?)\n\n", summary + "\n\n", re.S)), [cell["cell"] for cell in cells]


def test_the_digest_names_new_failures_and_package_changes():
    sections, cells = generated_digest(PACKAGE_AT + 1, {"verdict": "error", "throughput": None, "efficiency": None})
    steady = cells[-1]
    assert sections["New failures"] == \
        f"- [{steady}](https://example.invalid/site/cell-{steady}.html): error (was pass on 2026-11-20)"
    assert "package set pkgset-a1 -> pkgset-b2; work " in sections["Package, work and machine changes"]
    assert sections["Accepted changes"] == "- none"


def test_the_digest_names_a_level_shift_the_night_it_is_found_and_not_after():
    found, cells = generated_digest(DROP_AT + 2)
    assert found["New level shifts"].startswith(f"- [{cells[0]}](") and "-14." in found["New level shifts"]
    assert generated_digest(DROP_AT + 3)[0]["New level shifts"] == "- none"


def test_the_digest_names_an_acceptance_of_the_night():
    sections, cells = generated_digest(site_history.ACCEPTED_AFTER + 1)
    assert sections["Accepted changes"].startswith(f"- [{cells[1]}](") and "re-recorded by a.person" in \
        sections["Accepted changes"]


def test_trend_draws_points_bands_and_marks():
    points = [svg.Point(x=0, value=10.0, low=9.0, high=11.0, title="a <night>", href="r/index.html"),
              svg.Point(x=1, value=None, title="failed", kind="error"),
              svg.Point(x=2, value=8.0, title="c", kind="fail")]
    drawn = svg.trend(points, nights=3, unit="img/s", bands=[svg.Band(first=0, last=2, low=9.5, high=10.5)],
                      marks=[svg.Mark(x=1.5, kind="change", title="level shift", label="-20%")])
    assert drawn.count('class="night') == 3 and 'class="night failed"' in drawn
    assert "<title>a &lt;night&gt;</title>" in drawn and '<a href="r/index.html">' in drawn
    assert drawn.count('class="band"') == 1 and '<g class="mark change">' in drawn and ">-20%<" in drawn
    assert drawn.count('class="interval"') == 1  # the night without an interval has no whisker


def test_a_band_without_an_upper_edge_is_drawn_to_the_plots_top():
    band = nights.Band.from_json({"value": 10.0, "low": 1.0, "high": None, "defaulted": False})
    assert band is not None and band.high is None
    drawn = svg.trend([svg.Point(x=0, value=10.0, title="a")], nights=1, unit="img/s",
                      bands=[svg.Band(first=0, last=0, low=band.low, high=band.high)])
    assert "baseline band 1 - (no upper edge) img/s" in drawn


def test_sparkline_marks_failed_nights():
    line = svg.sparkline([1.0, None, 2.0])
    assert line.count('class="failed"') == 1 and line.count(",") == 2


def test_publish_refuses_a_history_that_is_not_there(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main([str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "site")])
    assert stopped.value.code == 2 and "none.jsonl is not a file" in capsys.readouterr().err


def test_a_new_drop_after_an_accepted_one_is_open_against_the_accepted_level():
    cells = site_history.templates(2)
    rows = site_history.history(cells, NIGHTS, {cells[1]["cell"]: "accepted"})
    again = 24  # a night whose commit is new
    for row in rows:
        if row["cell"] == cells[1]["cell"] and row.get("kind") == "night" and row["run_id"] >= run_id(again):
            row["throughput"] = {key: value * 0.85 if key != "confidence" else value
                                 for key, value in row["throughput"].items()}
    (view,) = [view for view in cell_views(rows, {}, threshold=0.05, min_nights=3) if view.regression]
    regression = view.regression
    assert view.cell == cells[1]["cell"] and regression.accepted is not None
    assert regression.relative == pytest.approx(-0.15, abs=0.03)
    assert (regression.good.run_id, regression.bad.run_id) == (run_id(again - 1), run_id(again))
    assert regression.bisect == f"dlscale-bisect {view.cell} --good {commit(again - 1)} --bad {commit(again)}"
