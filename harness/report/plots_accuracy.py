"""The study's accuracy figures, redrawn from :func:`harness.rank.accuracy.run_accuracy` results.

    write_all(results, out_dir) -> [lr_vs_epoch.png, accuracy_vs_batch.png, accuracy_vs_epoch.png]

Each result is the dict ``run_accuracy`` returns (it carries its ``schedule`` and
``global_batch``); results repeated with other seeds are averaged, as the study averages 3 runs.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Sequence

from harness.rank.schedulers import SCHEDULE_NAMES, learning_rate

STYLE = {"step": dict(color="tab:blue", marker="o"),
         "cosine": dict(color="tab:orange", marker="s"),
         "exponential": dict(color="tab:green", marker="^")}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    return plt


def _schedules(results: Sequence[dict]) -> list[str]:
    present = {result["schedule"] for result in results}
    return [name for name in SCHEDULE_NAMES if name in present] + sorted(present - set(SCHEDULE_NAMES))


def _save(figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    _pyplot().close(figure)
    return path


def _describe(results: Sequence[dict]) -> str:
    epochs = sorted({result["epochs"] for result in results})
    ranks = sorted({result.get("world_size", 1) for result in results})
    return f"{'/'.join(map(str, epochs))} epochs, {'/'.join(map(str, ranks))} rank(s)"


def plot_accuracy_vs_batch(results: Sequence[dict], path: Path) -> Path:
    """Final validation accuracy over the global batch, one line per schedule (Fig. 8b)."""
    if not results:
        raise ValueError("no results to plot")
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6, 4))
    for schedule in _schedules(results):
        by_batch: dict[int, list[float]] = defaultdict(list)
        for result in results:
            if result["schedule"] == schedule:
                by_batch[result["global_batch"]].append(result["final_val_accuracy"])
        batches = sorted(by_batch)
        means = [100 * statistics.fmean(by_batch[b]) for b in batches]
        spreads = [100 * (statistics.stdev(by_batch[b]) if len(by_batch[b]) > 1 else 0.0) for b in batches]
        axes.errorbar(batches, means, yerr=spreads, capsize=3, label=schedule, **STYLE.get(schedule, {}))
    axes.set_xscale("log", base=2)
    batches = sorted({result["global_batch"] for result in results})
    axes.set_xticks(batches, labels=[str(batch) for batch in batches])
    axes.set_xlabel("global batch size")
    axes.set_ylabel("final validation accuracy (%)")
    runs = max(len([r for r in results if (r["schedule"], r["global_batch"]) == key])
               for key in {(r["schedule"], r["global_batch"]) for r in results})
    axes.set_title(f"Validation accuracy vs batch size ({_describe(results)}, mean ± s.d. of {runs} run(s))",
                   fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(title="LR schedule")
    return _save(figure, path)


def plot_accuracy_vs_epoch(results: Sequence[dict], path: Path, *, global_batch: int | None = None) -> Path:
    """Validation accuracy over the epochs at one global batch (the largest by default), one line
    per schedule (Fig. 9)."""
    if not results:
        raise ValueError("no results to plot")
    global_batch = global_batch or max(result["global_batch"] for result in results)
    chosen = [result for result in results if result["global_batch"] == global_batch]
    if not chosen:
        raise ValueError(f"no results at global batch {global_batch}")
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6, 4))
    runs = 0
    for schedule in _schedules(chosen):
        curves = [result["val_accuracy_per_epoch"] for result in chosen if result["schedule"] == schedule]
        runs = max(runs, len(curves))
        mean = [100 * statistics.fmean(values) for values in zip(*curves)]
        style = STYLE.get(schedule, {})
        axes.plot(range(1, len(mean) + 1), mean, label=schedule, color=style.get("color"),
                  marker=style.get("marker"), markersize=3)
    axes.set_xlabel("epoch")
    axes.set_ylabel("validation accuracy (%)")
    axes.set_title(f"Validation accuracy over epochs at global batch {global_batch} "
                   f"({_describe(chosen)}, mean of {runs} run(s))", fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(title="LR schedule")
    return _save(figure, path)


def plot_lr_vs_epoch(results: Sequence[dict], path: Path, *, global_batch: int | None = None,
                     points_per_epoch: int = 20) -> Path:
    """Learning rate over the epochs, warm-up included, one line per schedule (Fig. 8a), at one
    global batch (the largest by default), drawn from each run's recorded schedule settings."""
    if not results:
        raise ValueError("no results to plot")
    global_batch = global_batch or max(result["global_batch"] for result in results)
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6, 4))
    for schedule in _schedules(results):
        run = next((r for r in results if r["schedule"] == schedule and r["global_batch"] == global_batch), None)
        if run is None:
            continue
        settings = dict(run["schedule_settings"])
        settings.pop("schedule")
        total = settings["total_epochs"]
        epochs = [i / points_per_epoch for i in range(int(total * points_per_epoch) + 1)]
        style = STYLE.get(schedule, {})
        axes.plot(epochs, [learning_rate(schedule, e, **settings) for e in epochs], label=schedule,
                  color=style.get("color"))
        axes.plot(range(len(run["lr_per_epoch"])), run["lr_per_epoch"], linestyle="none",
                  marker=style.get("marker"), markersize=3, color=style.get("color"))
    axes.set_xlabel("epoch")
    axes.set_ylabel("learning rate")
    axes.set_title(f"Learning rate schedules at global batch {global_batch} (markers: epoch starts)", fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(title="LR schedule")
    return _save(figure, path)


def write_all(results: Iterable[dict], out_dir: Path) -> list[Path]:
    results = list(results)
    out_dir = Path(out_dir)
    return [plot_lr_vs_epoch(results, out_dir / "lr_vs_epoch.png"),
            plot_accuracy_vs_batch(results, out_dir / "accuracy_vs_batch.png"),
            plot_accuracy_vs_epoch(results, out_dir / "accuracy_vs_epoch.png")]
