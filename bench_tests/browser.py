"""Pages opened as a person opens them: Debian's headless chromium, driven by selenium through
Debian's chromium-driver (the two come as one version), reading files from disk.

    with Browser() as browser:
        seconds = browser.open(Path("site/index.html"))
        assert not browser.console_errors() and not browser.dead_links() and not browser.fetched_from_network()
        browser.screenshot(tmp_path / "index.png")

:func:`missing` says why a browser cannot be had here (for ``bench_tests.components.needs``).
"""
from __future__ import annotations

import importlib.util
import shutil
import time
import urllib.parse
import urllib.request
from pathlib import Path

CHROMIUM = "chromium"
DRIVER = "chromedriver"
WINDOW = (1300, 1400)

LINKS = """return Array.from(document.querySelectorAll('[href], [src]'), element => {
    const target = element.getAttribute('href') ?? element.getAttribute('src');
    return new URL(target, document.baseURI).href;
});"""
"""Every link and source of the page (HTML and SVG elements alike), resolved against the page."""


def missing() -> str | None:
    """Why no browser can be driven here, or None."""
    if importlib.util.find_spec("selenium") is None:
        return "the selenium package is not installed (ci/setup.sh installs it with the dev extra)"
    for program, package in ((CHROMIUM, "chromium"), (DRIVER, "chromium-driver")):
        if shutil.which(program) is None:
            return f"no {program} on PATH (Debian's {package} package; ci/setup.sh installs it)"
    return None


class Browser:
    """One headless chromium for several pages; the browser's console is read page by page."""

    def __enter__(self) -> Browser:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which(CHROMIUM)
        for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         f"--window-size={WINDOW[0]},{WINDOW[1]}"):
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(shutil.which(DRIVER)), options=options)
        return self

    def __exit__(self, *exc) -> None:
        self.driver.quit()

    def open(self, page: Path) -> float:
        """Load ``page`` from disk; the seconds until its load event (the browser's own timing)."""
        self.console_errors()  # what an earlier page logged is not this page's
        started = time.perf_counter()
        self.driver.get(page.resolve().as_uri())
        loaded = self.driver.execute_script(
            "const n = performance.getEntriesByType('navigation')[0]; return n ? n.loadEventEnd : null;")
        return loaded / 1000 if loaded else time.perf_counter() - started

    def console_errors(self) -> list[str]:
        """The console's errors since the last call (a script's exception, a resource that failed)."""
        return [entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]

    def dead_links(self) -> list[str]:
        """Every link or source of the page that names no file on disk, or leaves it for the network."""
        dead = []
        for target in self.driver.execute_script(LINKS):
            parsed = urllib.parse.urlparse(target)
            if parsed.scheme != "file":
                dead.append(f"{target} (not a file: the page would reach the network)")
            elif not Path(urllib.request.url2pathname(parsed.path)).exists():
                dead.append(target)
        return dead

    def fetched_from_network(self) -> list[str]:
        """What the page loaded from anywhere but the disk."""
        return [name for name in self.driver.execute_script(
            "return performance.getEntriesByType('resource').map(entry => entry.name);")
                if not name.startswith("file:")]

    def count(self, selector: str) -> int:
        return len(self.driver.find_elements("css selector", selector))

    def attribute(self, selector: str, name: str) -> list[str]:
        return [element.get_attribute(name) for element in self.driver.find_elements("css selector", selector)]

    def text(self) -> str:
        return self.driver.find_element("tag name", "body").text

    def screenshot(self, path: Path) -> Path:
        """The whole page, however long, as a PNG."""
        height = self.driver.execute_script("return document.documentElement.scrollHeight;")
        self.driver.set_window_size(WINDOW[0], max(WINDOW[1], min(height, 8000)))
        self.driver.save_screenshot(str(path))
        self.driver.set_window_size(*WINDOW)
        return path
