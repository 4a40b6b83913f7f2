"""The site published from a generated month of nightlies, shared by the site's tests
(test_site.py, test_site_browser.py): built once a session."""
import pytest

from bench_tests import site_history


@pytest.fixture(scope="session")
def published(tmp_path_factory):
    return site_history.publish(tmp_path_factory.mktemp("published"))
