# The dlscale plugin itself is loaded through its pytest11 entry point (pyproject.toml).
# budget: ci/test's time budget; components: what ci/test declares installed (a skip for one fails)
pytest_plugins = ["pytester", "bench_tests.budget", "bench_tests.components"]
