"""The option and ini names other widely used pytest plugins add, as each version named added them
(read from its parser with it installed: bench_tests/plugin/test_other_plugins.py installs the
ones CI pins, ci/other_plugins.txt, next to dlscale and checks these against the live ones).
pytest refuses a second plugin adding a name one already added, so no dlscale option may be one
of these (bench_tests/unit/config/test_other_plugins.py)."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class Plugin:
    distribution: str
    version: str
    """The version whose names these are."""
    options: str
    """Its command-line options, separated by spaces."""
    ini: str = ""
    """Its ini keys, separated by spaces."""

    @property
    def option_names(self) -> frozenset[str]:
        return frozenset(self.options.split())

    @property
    def ini_names(self) -> frozenset[str]:
        return frozenset(self.ini.split())


OTHER_PLUGINS = (
    Plugin("pytest-asyncio", "1.5.0",
           "--asyncio-debug --asyncio-mode",
           ini="asyncio_debug asyncio_default_fixture_loop_scope asyncio_default_test_loop_scope asyncio_mode"),
    Plugin("pytest-benchmark", "5.3.1",
           "--benchmark-autosave --benchmark-calibration-precision --benchmark-columns --benchmark-compare "
           "--benchmark-compare-fail --benchmark-confidence --benchmark-cprofile --benchmark-cprofile-dump "
           "--benchmark-cprofile-loops --benchmark-cprofile-top --benchmark-disable --benchmark-disable-gc "
           "--benchmark-enable --benchmark-group-by --benchmark-histogram --benchmark-json "
           "--benchmark-max-time --benchmark-min-rounds --benchmark-min-time --benchmark-name "
           "--benchmark-netrc --benchmark-only --benchmark-precision --benchmark-quiet --benchmark-save "
           "--benchmark-save-data --benchmark-skip --benchmark-sort --benchmark-storage "
           "--benchmark-time-unit --benchmark-timer --benchmark-verbose --benchmark-warmup "
           "--benchmark-warmup-iterations"),
    Plugin("pytest-cov", "7.1.0",
           "--cov --cov-append --cov-branch --cov-config --cov-context --cov-fail-under --cov-precision "
           "--cov-report --cov-reset --no-cov --no-cov-on-fail"),
    Plugin("pytest-html", "4.2.0",
           "--css --html --self-contained-html",
           ini="environment_table_redact_list generate_report_on_test initial_sort max_asset_filename_length "
               "render_collapsed"),
    Plugin("pytest-instafail", "0.5.0",
           "--instafail"),
    Plugin("pytest-json-report", "1.5.0",
           "--json-report --json-report-file --json-report-indent --json-report-omit --json-report-summary "
           "--json-report-verbosity"),
    Plugin("pytest-memray", "1.11.0",
           "--fail-on-increase --hide-memray-summary --memray --memray-bin-path --memray-bin-prefix "
           "--most-allocations --native --stacks --trace-python-allocators",
           ini="fail-on-increase hide_memray_summary memray most_allocations native stacks "
               "trace_python_allocators verbosity_memray"),
    Plugin("pytest-metadata", "3.1.1",
           "--metadata --metadata-from-json --metadata-from-json-file"),
    Plugin("pytest-order", "1.5.0",
           "--error-on-failed-ordering --fail-all-on-failed-ordering --indulgent-ordering --order-after-ff "
           "--order-dependencies --order-group-scope --order-marker-prefix --order-scope --order-scope-level "
           "--sparse-ordering"),
    Plugin("pytest-playwright", "0.10.0",
           "--base-url --browser --browser-channel --device --full-page-screenshot --headed --output "
           "--playwright-debug --screenshot --slowmo --tracing --video",
           ini="base_url"),
    Plugin("pytest-profiling", "1.8.1",
           "--element-number --profile --profile-svg --pstats-dir --strip-dirs"),
    Plugin("pytest-randomly", "5.1.0",
           "--randomly-dont-reorganize --randomly-dont-reset-seed --randomly-seed"),
    Plugin("pytest-repeat", "0.9.4",
           "--count --repeat-scope"),
    Plugin("pytest-reportlog", "1.0.0",
           "--report-log --report-log-exclude-logs-on-passed-tests"),
    Plugin("pytest-rerunfailures", "16.7",
           "--fail-on-flaky --force-reruns --max-suite-reruns --only-rerun --rerun-except "
           "--rerun-exclude-path --rerun-show-tracebacks --reruns --reruns-delay "
           "--reruns-delay-backoff-factor --reruns-mode",
           ini="only_rerun rerun_except reruns reruns_delay reruns_delay_backoff_factor"),
    Plugin("pytest-split", "0.11.0",
           "--clean-durations --durations-path --group --splits --splitting-algorithm --store-durations"),
    Plugin("pytest-sugar", "1.1.1",
           "--force-sugar --old-summary --sugar-no-trace --sugar-trace-dir"),
    Plugin("pytest-timeout", "2.4.0",
           "--session-timeout --timeout --timeout-disable-debugger-detection --timeout-method "
           "--timeout_method",
           ini="session_timeout timeout timeout_disable_debugger_detection timeout_func_only timeout_method"),
    Plugin("pytest-xdist", "3.8.0",
           "--dist --loadscope-reorder --looponfail --max-worker-restart --maxprocesses --maxschedchunk "
           "--no-loadscope-reorder --numprocesses --px --rsyncdir --rsyncignore --testrunuid --tx -d -f -n",
           ini="looponfailroots rsyncdirs rsyncignore"),
)
"""The seven the issue named (pytest-profiling, -xdist, -cov, -benchmark, -timeout, -randomly, -html
with its pytest-metadata) and a dozen more of the most installed."""


def plugins_adding(name: str) -> tuple[str, ...]:
    """The plugins that add ``name``, an option (``--profile``) or an ini key (``timeout``)."""
    return tuple(plugin.distribution for plugin in OTHER_PLUGINS
                 if name in plugin.option_names or name in plugin.ini_names)


def clashes(names) -> dict[str, tuple[str, ...]]:
    """Each of ``names`` another plugin adds too, with the plugins that add it."""
    return {name: found for name in names if (found := plugins_adding(name))}
