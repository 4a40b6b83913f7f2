"""The plugin is loaded into every pytest run of the environment it is installed in: a project that
selects no dlscale cell must not notice it (issue: a package users can install and trust)."""
import pytest

pytestmark = pytest.mark.launch  # a real pytest subprocess with the installed entry point

CONFTEST = """
import pytest

@pytest.fixture(params=["a", "b"])
def cell(request):
    return request.param
"""

TESTS = """
import signal
import sys

def test_its_own_cell_fixture(cell):
    assert cell in ("a", "b")

def test_no_signal_handler_of_dlscale():
    # what the process inherited (SIG_IGN for SIGINT in a background job) or pytest's, not dlscale's
    for number in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(number)
        assert not getattr(handler, "__module__", "").startswith("harness"), (number, handler)

def test_no_heavy_import():
    assert not {"scipy", "torch", "matplotlib"} & set(sys.modules)
"""


def test_an_unrelated_project_is_left_alone(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_mine=TESTS)
    # --frameworks is dlscale's option: accepted, so the plugin is loaded; it selects no cell here
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--frameworks", "ddp")
    result.assert_outcomes(passed=4)
    said = [line for line in result.outlines + result.errlines if "dlscale" in line]
    assert len(said) == 1 and said[0].startswith("plugins:")  # pytest's own header names it, nothing else
    assert not {"results", "history", "baselines"} & {path.name for path in pytester.path.iterdir()}
