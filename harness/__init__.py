"""dlscale's harness: the shared training loop, framework adapters, loaders, models, launchers,
metrics and baselines behind the scaling suite in ``bench_tests/``."""
