"""dlscale's pytest plugin: command-line options, the cell matrix as parametrization of any test
that takes a ``cell`` argument, the ``dlscale`` fixture that measures a cell, progress lines,
the summary table and the baseline update at the end of the session."""
from __future__ import annotations

import collections
import signal
import threading
import time
from pathlib import Path

import pytest

from .baselines import BaselineError
from .report import DEFAULT_COLLECTIVES, junit_properties, write_report
from .suite import Suite, SuiteError, SuiteOptions, format_table

SUITE_KEY = pytest.StashKey[Suite]()
OPTIONS = (
    # (flag, dest, help, type)
    ("--launcher", "launcher", "srun, mpirun or torchrun (default: srun inside an allocation or when a Slurm "
                               "cluster answers, else torchrun)", str),
    ("--gpus", "gpus", "comma-separated rank (GPU) counts, e.g. 1,2,4 (default 1,2)", str),
    ("--frameworks", "frameworks", "comma-separated frameworks (default: ddp, horovod and deepspeed with ZeRO "
                                   "stages 0, 1, 2)", str),
    ("--loaders", "loaders", "comma-separated loaders (default synthetic, native, dali-cpu, dali-cpu-tfrecord)",
     str),
    ("--models", "models", "comma-separated models (default resnet50)", str),
    ("--system", "system", "baseline file name (default: $DLSCALE_SYSTEM, the Slurm cluster name, or the host)", str),
    ("--baselines-dir", "baselines_dir", "directory of <system>.json baseline files (default: baselines/)", Path),
    ("--results-json", "results_json", "write every cell's full record to this JSON file", Path),
    ("--report", "report", "write an HTML report (summary, plots, breakdown, fingerprints) into this directory",
     Path),
    ("--history-dir", "history_dir", "append each measured cell to <dir>/<system>.jsonl (default: history/)", Path),
    ("--data", "data", "ImageFolder dataset for file-reading loaders (default: the generated dataset)", Path),
    ("--data-tfrecord", "data_tfrecord", "indexed TFRecord shards for the -tfrecord loaders (default: the "
                                         "generated dataset's, converted once)", Path),
    ("--profile", "profile", "workload preset: auto, study (224 px, 64/GPU) or cpu-small (default auto: study "
                             "with a GPU, cpu-small without)", str),
    ("--device", "device", "auto, cpu or cuda (default auto)", str),
    ("--image-size", "image_size", "image side in pixels (overrides the profile)", int),
    ("--batch-size", "batch_size", "images per rank per step (overrides the profile)", int),
    ("--steps", "steps", "timed steps per cell (overrides the profile)", int),
    ("--warmup-steps", "warmup_steps", "untimed warm-up steps per cell (overrides the profile)", int),
    ("--num-workers", "num_workers", "DataLoader workers per rank (overrides the profile)", int),
    ("--cell-timeout", "cell_timeout", "seconds a cell may take in all (default 900)", float),
    ("--precision", "precision", "target relative half-width of each cell's 95% throughput interval; a cell "
                                 "is launched again until it gets there (default 0.02)", float),
    ("--measure-budget", "measure_budget", "seconds a cell may spend in further launches for precision or a "
                                           "clear verdict (default 45)", float),
    ("--widest-baseline", "widest_baseline", "relative half-width of a cell's 95% interval beyond which "
                                             "--update-baselines keeps its old baseline (default 0.10)", float),
    ("--repeat", "repeat", "independent measurements per cell; with --update-baselines the band is derived "
                           "from their spread (default 1)", int),
    ("--launch-env-file", "launch_env_file", "NAME=VALUE lines every rank of every cell gets, e.g. "
                                             "NCCL_SOCKET_IFNAME (default: $DLSCALE_ENV_FILE)", Path),
    ("--hang-timeout", "hang_timeout", "seconds without progress from any rank before a cell counts as hung "
                                       "(default 180)", float),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dlscale", "dlscale scaling suite")
    for flag, dest, help_text, kind in OPTIONS:
        group.addoption(flag, dest=f"dlscale_{dest}", type=kind, default=None, help=help_text)
    group.addoption("--update-baselines", dest="dlscale_update_baselines", action="store_true",
                    help="record the completed cells' figures as the system's new baselines")
    group.addoption("--launch-env", dest="dlscale_launch_env", action="append", default=[], metavar="NAME=VALUE",
                    help="a variable every rank gets, over --launch-env-file (repeatable)")
    group.addoption("--no-history", dest="dlscale_no_history", action="store_true",
                    help="do not append this session's cells to the history store")
    group.addoption("--no-yardstick", dest="dlscale_no_yardstick", action="store_true",
                    help="judge CPU cells' throughput as measured, not normalised to the baseline's machine speed "
                         "by the machine yardstick (e.g. to check the machine itself)")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "scaling: a measured cell launched as a real multi-process job")
    config.addinivalue_line("markers", "accuracy: a short real training judged by its validation accuracy")
    # Batch systems end a job with SIGTERM: treat it like Ctrl-C, so that the running cell's
    # processes are ended and finished results are kept, instead of dying on the spot.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    values = {dest: config.getoption(f"dlscale_{dest}") for _, dest, _, _ in OPTIONS}
    values = {key: value for key, value in values.items() if value is not None}
    values.setdefault("workdir", Path(config.rootpath) / "results" / "cells")
    if config.getoption("dlscale_no_history"):
        values["history_dir"] = None
    values["launch_env"] = tuple(config.getoption("dlscale_launch_env"))
    values["yardstick"] = not config.getoption("dlscale_no_yardstick")
    try:
        config.stash[SUITE_KEY] = Suite(SuiteOptions(update_baselines=config.getoption("dlscale_update_baselines"),
                                                     **values))
    except SuiteError as error:
        raise pytest.UsageError(str(error)) from None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    suite = metafunc.config.stash[SUITE_KEY]
    for fixture, cells in (("cell", suite.cells), ("accuracy_cell", suite.accuracy_cells)):
        if fixture not in metafunc.fixturenames:
            continue
        params = []
        for cell in cells():
            reason = suite.skip_reason(cell)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            params.append(pytest.param(cell, id=cell.id, marks=marks))
        metafunc.parametrize(fixture, params)


def _selected_cells(items: list[pytest.Item]) -> bool:
    return any({"cell", "accuracy_cell"} & set(item.callspec.params) for item in items if hasattr(item, "callspec"))


def pytest_collection_finish(session: pytest.Session) -> None:
    if _selected_cells(session.items):
        try:
            session.config.stash[SUITE_KEY].prepare()
        except (SuiteError, BaselineError) as error:
            raise pytest.UsageError(str(error)) from None


class _Progress:
    """Prints a cell's progress lines past pytest's output capture, at most every few seconds."""

    def __init__(self, config: pytest.Config, every_s: float = 5.0):
        self.config = config
        self.every_s = every_s
        self.last = 0.0

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s:
            return
        self.last = now
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if reporter is None or capture is None:
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"  [dlscale] {line}")


@pytest.fixture
def dlscale(request: pytest.FixtureRequest) -> "Measure":
    return Measure(request.config, request.node)


class Measure:
    """What a scaling test calls: ``dlscale.check(cell)`` measures the cell and asserts its verdict."""

    def __init__(self, config: pytest.Config, node: pytest.Item):
        self.config = config
        self.node = node
        self.suite = config.stash[SUITE_KEY]

    def check(self, cell) -> None:
        for _ in range(self.suite.options.repeat):
            result = self.suite.measure(cell, on_progress=_Progress(self.config))
            self.node.user_properties.extend(junit_properties(result.to_json()))  # figures in --junitxml
            if not result.ok:
                pytest.fail(f"{cell.id} {result.run.status} under {result.run.launcher}:\n{result.run.error}",
                            pytrace=False)
        failing = [v.message for v in result.verdicts if v.failed]
        if failing and not self.suite.options.update_baselines:
            pytest.fail(f"{cell.id} regressed: " + "; ".join(failing), pytrace=False)

    def check_accuracy(self, cell) -> None:
        result = self.suite.measure_accuracy(cell, on_progress=_Progress(self.config))
        if not result.run.ok:
            pytest.fail(f"{cell.id} {result.run.status} under {result.run.launcher}:\n{result.run.error}",
                        pytrace=False)
        if result.verdict.failed and not self.suite.options.update_baselines:
            pytest.fail(f"{cell.id} lost accuracy: {result.verdict.message}", pytrace=False)


def _report_baseline_changes(terminalreporter, suite: Suite) -> None:
    terminalreporter.write_line(f"updated {suite.baselines.path} ({len(suite.baseline_changes)} change(s)):")
    for change in suite.baseline_changes:
        terminalreporter.write_line(f"  {change}")
    if suite.baselines_kept:
        terminalreporter.write_line(f"not recorded, old baseline kept ({len(suite.baselines_kept)} cell(s)):")
        for reason in suite.baselines_kept:
            terminalreporter.write_line(f"  {reason}")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    suite = session.config.stash.get(SUITE_KEY, None)
    if suite is not None and suite.options.update_baselines and (suite.results or suite.accuracy_results):
        suite.baseline_changes = suite.update_baselines()


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    suite = config.stash.get(SUITE_KEY, None)
    if suite is None:
        return
    if suite.accuracy_results:
        terminalreporter.section("dlscale accuracy (final validation accuracy, verdict)")
        terminalreporter.write_line(format_table(suite.accuracy_rows()))
        plots = suite.write_accuracy_plots(suite.options.workdir.parent / "accuracy")
        terminalreporter.write_line("plots: " + ", ".join(str(p) for p in plots))
    if suite.baseline_changes is not None and not suite.results:
        _report_baseline_changes(terminalreporter, suite)
    if not suite.results:
        return
    terminalreporter.section("dlscale summary")
    terminalreporter.write_line(f"system {suite.system}, launcher {suite.launcher_name}, baselines {suite.baselines.path}")
    terminalreporter.write_line(format_table(suite.summary_rows()))
    counts = collections.Counter(result.verdict for result in suite.results)
    terminalreporter.write_line(", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())))
    for result in suite.results:
        for verdict in result.verdicts:
            if verdict.kind in ("fail", "inconclusive", "stale", "faster"):
                terminalreporter.write_line(f"{result.cell.id}: {verdict.kind}: {verdict.message}")
    if suite.baseline_changes is not None:
        _report_baseline_changes(terminalreporter, suite)
    if suite.options.results_json:
        terminalreporter.write_line(f"results written to {suite.options.results_json}")
    if suite.options.report:
        index = write_report(suite.results_document(), suite.options.report,
                             collectives=DEFAULT_COLLECTIVES if DEFAULT_COLLECTIVES.exists() else None)
        terminalreporter.write_line(f"report written to {index}")

