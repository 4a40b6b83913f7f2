"""The site across nights and a session's HTML report, opened in headless chromium as a person
opens them from disk (bench_tests/browser.py): no console error, every link and source resolves to a
file, nothing fetched from the network, the plots' points and change points where the history puts
them. Screenshots go to each test's tmp_path. Without chromium, its driver or selenium the tests skip,
and fail where ``DLSCALE_REQUIRED_COMPONENTS`` declares ``chromium`` (ci/test)."""
import pytest

from bench_tests import site_history
from bench_tests.browser import Browser, missing
from bench_tests.components import needs
from bench_tests.site_history import DROP_AT
from bench_tests.unit.report.test_html import results  # noqa: F401  (the session's results fixture)
from harness.report import html as report

NIGHTS = site_history.MONTH
LOAD_LIMIT_S = 2.0


@pytest.fixture(scope="module")
def browser():
    needs("chromium", missing())
    with Browser() as opened:
        yield opened


def open_clean(browser, page, screenshot):
    """Open ``page``, check it as a reader would meet it, and keep a screenshot."""
    seconds = browser.open(page)
    assert browser.console_errors() == [], page.name
    assert browser.dead_links() == [], page.name
    assert browser.fetched_from_network() == [], page.name
    assert seconds < LOAD_LIMIT_S, f"{page.name} took {seconds:.2f} s to load"
    browser.screenshot(screenshot)


@pytest.mark.parametrize("page", ["index.html", "regressions.html", "compare.html", "drop", "accepted", "failed"])
def test_a_site_page_opens_clean(browser, published, page, tmp_path):
    path = published.page(page) if page in published.cells else published.site / page
    open_clean(browser, path, tmp_path / f"{path.stem}.png")


def test_a_cell_page_shows_every_night_and_the_change_point_where_it_is(browser, published):
    browser.open(published.page("drop"))
    assert browser.count("#plot-throughput .night") == NIGHTS
    places = [float(x) for x in browser.attribute("#plot-throughput circle.night", "cx")]
    (change,) = [float(x) for x in browser.attribute("#plot-throughput .mark.change line", "x1")]
    assert places[DROP_AT - 1] < change < places[DROP_AT]
    titles = browser.attribute("#plot-throughput circle.night title", "textContent")
    assert f"commit {site_history.commit(DROP_AT)[:10]}" in titles[DROP_AT]


def test_the_regressions_page_names_the_drop_and_its_bisect(browser, published):
    browser.open(published.site / "regressions.html")
    text = browser.text()
    assert f"dlscale-bisect {published.cells['drop']} --good {site_history.commit(DROP_AT - 1)}" in text
    assert browser.count("#regressions tr.open") == 1


def test_a_session_report_opens_clean(browser, results, tmp_path):  # noqa: F811
    index = report.write_report(results, tmp_path / "report")
    open_clean(browser, index, tmp_path / "report.png")
    assert browser.count("img") >= 3


def test_a_broken_page_is_caught(browser, tmp_path):
    """The checks themselves: a dead link and a script's error are reported, not passed over."""
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><html><head><meta charset='utf-8'><title>broken</title></head><body>"
                    "<a href='cell-nowhere.html'>gone</a><script>undefined_function();</script></body></html>")
    browser.open(page)
    assert any("undefined_function" in error for error in browser.console_errors())
    assert browser.dead_links() == [(tmp_path / "cell-nowhere.html").as_uri()]
