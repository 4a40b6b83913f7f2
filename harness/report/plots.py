"""The study's scaling figures, redrawn from a results file (``--results-json``):

    write_all(results, out_dir, published=None, collectives=None) -> [PNG paths]

- ``throughput.png``: images/s over the rank count (Fig. 3), with each series' ideal (linear from
  its smallest rank count) dotted;
- ``efficiency.png``: E_G over the rank count (Figs. 4-7) with the ideal E_G = 1;
- ``efficiency_published.png``: the same with the study's published E_G figures overlaid (only
  with ``published``, the ``kind: "published"`` file);
- ``breakdown.png``: where each cell's step goes (its slowest rank), seconds and shares;
- ``collectives.png``: all-reduce time and bus bandwidth over message size (only with ``collectives``).

One panel per model, one line per framework x loader; confidence intervals as error bars where the
results carry them (``{"value", "low", "high"}`` estimates, or ``metrics["<name>_low"/"_high"]``).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Mapping, Sequence

from harness.common.jsonio import finite_number
from harness.config.cells import scaling_cell
from harness.judging.breakdown import LABELS, PARTS, BreakdownUnavailable, cell_breakdown
from harness.judging.kinds import VerdictKind
from harness.rank.loaders import LOADERS

PART_COLORS = {"data": "tab:orange", "compute": "tab:blue", "communication": "tab:red", "optimizer": "tab:green"}
RELATION_MARKERS = {"=": "*", "<": "v", ">": "^"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    return plt


def _save(figure, path: Path, *, layout: bool = True) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout:
        figure.tight_layout(rect=(0, 0.05, 1, 1))
    figure.savefig(path, dpi=110)
    _pyplot().close(figure)
    return path


def estimate(cell: Mapping, metric: str) -> tuple[float, float | None, float | None] | None:
    """(value, low, high) of ``metric`` ("throughput" or "efficiency") for a results-file cell;
    low/high are None where the results give no interval, None in all where no value."""
    found = cell.get(metric)
    if isinstance(found, Mapping) and finite_number(found.get("value")):
        low, high = found.get("low"), found.get("high")
        return found["value"], low if finite_number(low) else None, high if finite_number(high) else None
    metrics = cell.get("metrics") or {}
    if finite_number(metrics.get(metric)):
        low, high = metrics.get(f"{metric}_low"), metrics.get(f"{metric}_high")
        return metrics[metric], low if finite_number(low) else None, high if finite_number(high) else None
    return None


def _series(cells: Sequence[Mapping], metric: str) -> dict[str, dict[tuple[str, str], list[tuple]]]:
    """model (with its numerics: ``resnet50-bf16``) -> (framework, loader) -> [(ranks, value, low, high)]
    sorted by ranks."""
    by_model: dict[str, dict[tuple[str, str], list[tuple]]] = defaultdict(lambda: defaultdict(list))
    for cell in cells:
        parsed = scaling_cell(cell["cell"])
        found = estimate(cell, metric) if parsed else None
        if found is not None:
            model = "-".join((parsed.model, *parsed.numerics.words))
            by_model[model][(parsed.framework, parsed.loader)].append((parsed.ranks, *found))
    return {model: {key: sorted(points) for key, points in sorted(series.items())}
            for model, series in sorted(by_model.items())}


def _loader_style(loader: str) -> Mapping[str, str]:
    """The loader's own plot style (its registry entry); a loader this installation lacks (a
    results file from elsewhere) is drawn plainly."""
    style = LOADERS.entry(loader).plot_style if loader in LOADERS.names() else {}
    return {"marker": "o", "linestyle": "-", **style}


def _colors(names) -> dict[str, str]:
    return {name: f"C{index % 10}" for index, name in enumerate(sorted(set(names)))}


def _error(points) -> list[list[float]] | None:
    if not any(low is not None and high is not None for _, _, low, high in points):
        return None
    lower = [value - low if low is not None else 0.0 for _, value, low, _ in points]
    upper = [high - value if high is not None else 0.0 for _, value, _, high in points]
    return [[max(e, 0.0) for e in lower], [max(e, 0.0) for e in upper]]


def _rank_axis(axes, ranks) -> None:
    ranks = sorted(set(ranks))
    axes.set_xscale("log", base=2)
    axes.set_xticks(ranks, labels=[str(r) for r in ranks])
    axes.minorticks_off()
    if len(ranks) == 1:
        axes.set_xlim(ranks[0] / 1.5, ranks[0] * 1.5)
    axes.set_xlabel("ranks (GPUs)")
    axes.grid(alpha=0.3)


def plot_scaling(cells: Sequence[Mapping], path: Path, *, metric: str = "throughput",
                 published: Mapping | None = None) -> Path | None:
    """``metric`` ("throughput" or "efficiency") over the rank count, one panel per model; None
    when no cell has the metric."""
    if metric not in ("throughput", "efficiency"):
        raise ValueError(f"metric must be throughput or efficiency, got {metric!r}")
    series = _series(cells, metric)
    if not series:
        return None
    plt = _pyplot()
    models = list(series)
    # Room on the right of each panel for its legend: a full matrix has twenty series.
    figure, panels = plt.subplots(1, len(models), figsize=(8.2 * len(models), 4.6), squeeze=False)
    colors = _colors(framework for model in series.values() for framework, _ in model)
    for axes, model in zip(panels[0], models):
        ranks = []
        for (framework, loader), points in series[model].items():
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            ranks += xs
            axes.errorbar(xs, ys, yerr=_error(points), capsize=3, color=colors[framework],
                          **_loader_style(loader), label=f"{framework} / {loader}")
            if metric == "throughput" and len(points) > 1:
                reference_ranks, reference = xs[0], ys[0]
                axes.plot(xs, [reference * r / reference_ranks for r in xs], linestyle=":", color=colors[framework],
                          alpha=0.7)
        if metric == "efficiency":
            if published:
                ranks += _overlay_published(axes, published, model)
            axes.axhline(1.0, color="black", linewidth=1, label="ideal")
            highest = max(p[1] for points in series[model].values() for p in points)
            axes.set_ylim(bottom=0, top=max(1.15, 1.15 * highest))  # a wide interval may run off the top
            axes.set_ylabel("parallel efficiency E_G")
        else:
            axes.plot([], [], linestyle=":", color="black", label="ideal (linear from smallest G)")
            axes.set_ylabel("throughput (images/s, all ranks)")
            axes.set_ylim(bottom=0)
        _rank_axis(axes, ranks)
        axes.set_title(model)
        axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    what = "Parallel efficiency E_G" if metric == "efficiency" else "Throughput"
    figure.suptitle(f"{what} vs ranks, bars: 95% CI where measured", fontsize=10)
    if published:
        figure.text(0.5, 0.005, "grey/black: Aach et al. 2023 as published (A100 GPUs, E_G against 4 GPUs)\n"
                    "star: stated value, v / ^: upper / lower bound, dotted: bound over a range", ha="center",
                    fontsize=7)
    return _save(figure, path)


def published_points(published: Mapping, model: str) -> list[Mapping]:
    """The published file's E_G figures for ``model``."""
    if published.get("kind") != "published":
        raise ValueError("the overlay takes only a file of kind 'published' (harness/report/published-aach2023.json)")
    return [point for point in published.get("efficiency", []) if point.get("model") == model]


PUBLISHED_COLORS = {"dali-cpu": "black", "dali-gpu": "dimgray", "dali": "black", "native": "darkgray"}


def _overlay_published(axes, published: Mapping, model: str) -> list[int]:
    """The study's E_G figures for ``model``: stars where stated, triangles where bounded (pointing
    the way the bound goes), dotted where the bound holds over a range of GPU counts."""
    ranks = []
    labelled = set()
    for point in published_points(published, model):
        loader = point["loader"]
        color = PUBLISHED_COLORS.get(loader, "black")
        label = None if loader in labelled else f"published, {loader}"
        labelled.add(loader)
        marker = RELATION_MARKERS.get(point["relation"], "o")
        if "gpus_range" in point:
            low, high = point["gpus_range"]
            axes.hlines(point["value"], low, high, colors=color, linestyles="dotted", linewidth=1)
            axes.plot([low, high], [point["value"]] * 2, marker=marker, color=color, linestyle="none",
                      markersize=5, label=label)
            ranks += [low, high]
        else:
            axes.plot([point["gpus"]], [point["value"]], marker=marker, color=color, markerfacecolor="none",
                      linestyle="none", markersize=8, label=label)
            ranks.append(point["gpus"])
    return ranks


def plot_breakdown(cells: Sequence[Mapping], path: Path) -> Path | None:
    """A stacked bar per cell (its slowest rank): seconds per step and shares of the step; None
    when no cell's records carry the breakdown."""
    rows = []
    for cell in cells:
        try:
            rows.append((cell["cell"], cell_breakdown(cell.get("records") or []).slowest))
        except BreakdownUnavailable:
            continue
    if not rows:
        return None
    plt = _pyplot()
    figure, (seconds, shares) = plt.subplots(2, 1, figsize=(max(7.0, 0.4 * len(rows) + 2), 9.0), sharex=True)
    names = [f"{name}\n(rank {b.rank})" for name, b in rows]
    positions = range(len(rows))
    bottoms_s = [0.0] * len(rows)
    bottoms_f = [0.0] * len(rows)
    for part in PARTS:
        values = [getattr(b, part) for _, b in rows]
        fractions = [100 * getattr(b, part) / b.accounted if b.accounted > 0 else 0.0 for _, b in rows]
        seconds.bar(positions, values, bottom=bottoms_s, color=PART_COLORS[part], label=LABELS[part])
        shares.bar(positions, fractions, bottom=bottoms_f, color=PART_COLORS[part], label=LABELS[part])
        bottoms_s = [b + v for b, v in zip(bottoms_s, values)]
        bottoms_f = [b + v for b, v in zip(bottoms_f, fractions)]
    seconds.plot(list(positions), [b.step for _, b in rows], linestyle="none", marker="_", markersize=30,
                 color="black", label="measured step")
    seconds.set_ylabel("seconds per step")
    shares.set_ylabel("% of the parts' sum")
    shares.set_xticks(list(positions), labels=names, rotation=60, ha="right", fontsize=7)
    for axes in (seconds, shares):
        axes.grid(axis="y", alpha=0.3)
    handles, labels = seconds.get_legend_handles_labels()
    figure.suptitle("Where the step goes (slowest rank; communication = exposed, not hidden behind compute)",
                    fontsize=10)
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    figure.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    return _save(figure, path, layout=False)


def plot_collectives(collectives: Mapping, path: Path) -> Path | None:
    """All-reduce time and bus bandwidth over message size (nccl-tests' two columns)."""
    rows = sorted((row for row in collectives.get("results", []) if finite_number(row.get("time_s"))),
                  key=lambda row: row["bytes"])
    if not rows:
        return None
    plt = _pyplot()
    figure, (time_axes, bw_axes) = plt.subplots(1, 2, figsize=(10, 4))
    sizes = [row["bytes"] for row in rows]
    time_axes.plot(sizes, [row["time_s"] * 1e6 for row in rows], marker="o")
    time_axes.set_xscale("log", base=2)
    time_axes.set_yscale("log")
    time_axes.set_ylabel("time per all-reduce (µs)")
    bw_axes.semilogx(sizes, [row["busbw_gbps"] for row in rows], marker="o", base=2, label="busbw")
    bw_axes.semilogx(sizes, [row["algbw_gbps"] for row in rows], marker=".", base=2, linestyle="--", label="algbw")
    bw_axes.set_ylabel("bandwidth (GB/s)")
    bw_axes.set_ylim(bottom=0)
    bw_axes.legend(fontsize=8)
    for axes in (time_axes, bw_axes):
        axes.set_xticks(sizes, labels=[_size(n) for n in sizes], rotation=30, fontsize=7)
        axes.minorticks_off()
        axes.set_xlabel("message size")
        axes.grid(alpha=0.3)
    figure.suptitle(f"all-reduce, {collectives.get('backend')} on {collectives.get('ranks')} ranks "
                    f"({collectives.get('device')}); busbw = algbw x 2(G-1)/G", fontsize=10)
    return _save(figure, path)


TREND_COLORS = {VerdictKind.FAIL: "tab:red", VerdictKind.INCONCLUSIVE: "tab:orange", VerdictKind.FASTER: "tab:green"}
"""A history point's colour by its verdict; a pass and anything else unjudged is blue."""


def plot_history(rows: Sequence[Mapping], cell_ids: Sequence[str], path: Path, *, metric: str = "throughput",
                 last: int = 60) -> Path | None:
    """One panel per cell of ``cell_ids``: its ``metric`` night by night from the history ``rows``
    (the last ``last`` lines of each), with intervals, coloured by the night's verdict."""
    series = {cell: [row for row in rows if row.get("cell") == cell and isinstance(row.get(metric), Mapping)
                     and finite_number(row[metric].get("value"))][-last:] for cell in cell_ids}
    series = {cell: points for cell, points in series.items() if points}
    if not series:
        return None
    plt = _pyplot()
    columns = min(3, len(series))
    figure_rows = -(-len(series) // columns)
    figure, grid = plt.subplots(figure_rows, columns, figsize=(4.6 * columns, 2.8 * figure_rows), squeeze=False)
    for axes, (cell, points) in zip(grid.flat, series.items()):
        values = [p[metric]["value"] for p in points]
        lows = [p[metric].get("low") if finite_number(p[metric].get("low")) else v for p, v in zip(points, values)]
        highs = [p[metric].get("high") if finite_number(p[metric].get("high")) else v
                 for p, v in zip(points, values)]
        xs = range(len(points))
        axes.plot(xs, values, color="lightgray", linewidth=1)
        below = [max(0.0, v - lo) for v, lo in zip(values, lows)]
        above = [max(0.0, hi - v) for v, hi in zip(values, highs)]
        axes.errorbar(xs, values, yerr=[below, above], fmt="none", ecolor="gray", capsize=2)
        axes.scatter(xs, values, c=[TREND_COLORS.get(p.get("verdict"), "tab:blue") for p in points], s=14, zorder=3)
        axes.set_title(cell, fontsize=8)
        dates = [str(points[0].get("date", ""))[:10], str(points[-1].get("date", ""))[:10]]
        axes.set_xticks([0, len(points) - 1], dates, fontsize=7)
        axes.set_ylabel("img/s" if metric == "throughput" else metric, fontsize=8)
    for axes in list(grid.flat)[len(series):]:
        axes.set_visible(False)
    figure.suptitle(f"{metric} night by night (history; red: fail, orange: inconclusive)", fontsize=10)
    return _save(figure, path)


def write_all(results: Mapping, out_dir: Path, *, published: Mapping | None = None,
              collectives: Mapping | None = None) -> list[Path]:
    """Every figure the results support, as PNG files in ``out_dir``."""
    out_dir = Path(out_dir)
    cells = results.get("cells", [])
    made = [plot_scaling(cells, out_dir / "throughput.png", metric="throughput"),
            plot_scaling(cells, out_dir / "efficiency.png", metric="efficiency"),
            plot_breakdown(cells, out_dir / "breakdown.png")]
    if published:
        made.append(plot_scaling(cells, out_dir / "efficiency_published.png", metric="efficiency",
                                 published=published))
    if collectives:
        made.append(plot_collectives(collectives, out_dir / "collectives.png"))
    return [path for path in made if path is not None]


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"

