"""One rank of a cell, in its own process: the worker, the training loop, the workload, framework
adapters, data loaders, models, learning-rate schedules, injected faults and the CPU-wait reading."""
