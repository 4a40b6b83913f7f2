"""An HTML report of a results file: summary, scaling plots, step-time breakdown, communication
bounds, time-to-train projections and provenance.

    python -m harness.report.html RESULTS.json --out DIR [--collectives FILE] [--published FILE]

writes ``DIR/index.html`` and its PNG figures. From code (the pytest plugin at session end):
``write_report(results_path_or_dict, out_dir, collectives=..., published=...)``. For JUnit XML,
:func:`junit_properties` turns one cell's results entry into ``(name, value)`` pairs for
``record_property``.
"""
from __future__ import annotations

import argparse
import datetime
import html
import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.common.jsonio import finite_number
from harness.config.cells import scaling_cell
from harness.judging.breakdown import PARTS, BreakdownUnavailable, breakdown_rows, cell_breakdown
from harness.judging.work import NOTES as WORK_NOTES
from harness.judging.kinds import ERROR, VerdictKind
from harness.judging.stats import Estimate
from harness.report.collectives import (RESNET_BACKBONE_PARAMETERS, allreduce_lower_bound_s, gradient_bytes,
                                        load_collectives, lower_bound_rows, parameter_count, peak_busbw)
from harness.report import scaling_check, scaling_model, scaling_validation
from harness.report.framework_comparison import (PUBLISHED_NOTES, REFERENCE_FRAMEWORK, comparison_rows,
                                                  framework_ratios)
from harness.report.network import collectives_link
from harness.report.plots import estimate, plot_history, write_all
from harness.report.projection import projection_rows, reference_rows, time_to_train_s
from harness.report.tables import summary_rows
from harness.store.history import read as read_history

DEFAULT_PUBLISHED = Path(__file__).resolve().with_name("published-aach2023.json")
"""The study's published figures (Aach et al. 2023), shipped with the package."""
COLLECTIVES_FILE = Path("results") / "collectives.json"
"""Where the collective benchmark writes, relative to the project's root (or the current directory)."""
VERDICT_ROW_CLASSES = {VerdictKind.FAIL: "fail", ERROR: "fail", VerdictKind.PASS: "pass"}
"""The summary's rows coloured by the verdict's first word (``error (timeout)`` is an error)."""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1400px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
tr.fail td { background: #fde0e0; } tr.pass td { background: #eaf7ea; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
.note { color: #555; font-size: 0.85em; max-width: 80em; }
pre { background: #f7f7f7; padding: 0.5em; font-size: 0.8em; overflow-x: auto; }
"""


def _load(source: Path | Mapping | None, loader=None) -> Mapping | None:
    if source is None or isinstance(source, Mapping):
        return source
    return (loader or (lambda p: json.loads(Path(p).read_text())))(source)


def _table(rows: Sequence[Sequence[Any]], row_classes: Sequence[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(str(cell))}</th>" for cell in rows[0])
    body = []
    for index, row in enumerate(rows[1:]):
        css = f' class="{row_classes[index]}"' if row_classes and row_classes[index] else ""
        body.append(f"<tr{css}>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _summary_section_rows(cells: Sequence[Mapping]) -> tuple[list[list[str]], list[str]]:
    """The summary table's rows (:func:`harness.report.tables.summary_rows`), each with its colour."""
    rows = summary_rows(cells)
    return rows, [VERDICT_ROW_CLASSES.get(row[-1].split(" ")[0], "") for row in rows[1:]]


def junit_properties(cell_result_json: Mapping) -> list[tuple[str, Any]]:
    """One cell's figures as ``(name, value)`` pairs for pytest's ``record_property`` (JUnit XML):
    throughput and E_G with their intervals, step time, the breakdown of the slowest rank (seconds
    per step and shares), the counted work's FLOPs and collective bytes per step, the 90-epoch
    projection and the verdict. Absent figures are left out."""
    cell = cell_result_json
    properties: list[tuple[str, Any]] = [("dlscale_cell", cell.get("cell")), ("dlscale_status", cell.get("status")),
                                         ("dlscale_verdict", cell.get("verdict"))]
    for metric, unit in (("throughput", "img_s"), ("efficiency", "")):
        found = estimate(cell, metric)
        if found is None:
            continue
        name = f"dlscale_{metric}" + (f"_{unit}" if unit else "")
        properties.append((name, _round(found[0])))
        if found[1] is not None and found[2] is not None:
            properties += [(f"{name}_low", _round(found[1])), (f"{name}_high", _round(found[2]))]
    metrics = cell.get("metrics") or {}
    if finite_number(metrics.get("step_time")):
        properties.append(("dlscale_step_s", _round(metrics["step_time"])))
    if finite_number(cell.get("machine_speed")):
        properties.append(("dlscale_machine_speed", _round(cell["machine_speed"])))
    try:
        breakdown = cell_breakdown(cell.get("records") or [])
    except BreakdownUnavailable:
        breakdown = None
    if breakdown is not None:
        slowest = breakdown.slowest
        properties.append(("dlscale_slowest_rank", slowest.rank))
        shares = slowest.shares()
        for part in PARTS:
            properties += [(f"dlscale_{part}_s_per_step", _round(getattr(slowest, part))),
                           (f"dlscale_{part}_share", _round(shares[part]))]
        properties.append(("dlscale_breakdown_closure", _round(slowest.closure)))
    work = cell.get("work") or {}
    if "flops" in work:
        properties.append(("dlscale_work_flops_per_step", work["flops"]["total"]))
    if "collectives" in work:
        properties.append(("dlscale_work_collective_bytes_per_step",
                           sum(kind["bytes"] for kind in work["collectives"].values())))
    throughput = estimate(cell, "throughput")
    if throughput and throughput[0] > 0:
        properties.append(("dlscale_time_to_train_90_epochs_s", round(time_to_train_s(throughput[0]), 1)))
    messages = [v.get("message") for v in cell.get("verdicts") or [] if v.get("kind") not in (VerdictKind.PASS, None)]
    if messages:
        properties.append(("dlscale_verdict_message", "; ".join(messages)))
    return [(name, value) for name, value in properties if value is not None]


def _framework_section(cells: Sequence[Mapping]) -> str:
    measured = [(cell, result.get("records") or []) for result in cells if result.get("status") == "ok"
                and (cell := scaling_cell(result["cell"]))]
    ratios = framework_ratios(measured)
    if not ratios:
        return ""
    published = "; ".join(f"{html.escape(seed)}, &ldquo;{html.escape(quote)}&rdquo; ({html.escape(reading)})"
                          for seed, quote, reading in PUBLISHED_NOTES)
    return (f"<h2>Frameworks side by side</h2><p class='note'>Throughput over {REFERENCE_FRAMEWORK}'s on the same "
            f"loader, model and rank count, both cells of this run, with a bootstrap interval. Published: {published}</p>"
            + _table(comparison_rows(ratios)))


def _breakdown_section(cells: Sequence[Mapping]) -> str:
    parts = ["<h2>Where the time goes</h2>",
             '<p class="note">Per rank, mean seconds per timed step and share of the step: data = waiting for '
             "the next batch (host-to-device copy included); compute = forward+backward of a private copy of the "
             "model with no communication (median of the compute probes); communication = the framework's "
             "forward+backward minus that compute: the <em>exposed</em> communication, the part not hidden behind "
             "backward, with the framework's bookkeeping (ZeRO's parameter all-gather falls in the optimizer step); "
             "optimizer = the optimizer step. sum/step near 1 says the parts add up to the measured step. The "
             "slowest rank is the one with the most local work: the all-reduce makes its peers wait, and they show "
             "the wait as communication.</p>"]
    for cell in cells:
        try:
            breakdown = cell_breakdown(cell.get("records") or [])
        except BreakdownUnavailable as error:
            parts.append(f"<h3>{html.escape(cell['cell'])}</h3><p class='note'>no breakdown: "
                         f"{html.escape(str(error))}</p>")
            continue
        parts.append(f"<h3>{html.escape(cell['cell'])}</h3>")
        parts.append(_table(breakdown_rows(breakdown)))
    return "\n".join(parts) if cells else ""


def _communication_section(collectives: Mapping | None, cells: Sequence[Mapping], workload: Mapping | None) -> str:
    if not collectives:
        return ("<h2>Communication bounds</h2><p class='note'>No collective benchmark results: run "
                "<code>DLSCALE_BENCHMARKS=1 pytest bench_tests/benchmarks/test_collectives.py</code> and pass "
                "<code>--collectives results/collectives.json</code>.</p>")
    ranks = collectives.get("ranks", 2)
    rows = [["message", "time µs", "algbw GB/s", "busbw GB/s"]]
    for row in sorted(collectives["results"], key=lambda r: r["bytes"]):
        rows.append([f"{row['bytes']:,} B", f"{row['time_s'] * 1e6:.1f}", f"{row['algbw_gbps']:.3f}",
                     f"{row['busbw_gbps']:.3f}"])
    peak = peak_busbw(collectives)
    bandwidth = peak["busbw_gbps"] * 1e9
    study = [["model", "parameters (1000 classes)", "gradient MB", f"lower bound s/step at G={ranks}"]]
    for model in RESNET_BACKBONE_PARAMETERS:
        nbytes = gradient_bytes(model)
        study.append([model, f"{parameter_count(model):,}", f"{nbytes / 1e6:.1f}",
                      f"{allreduce_lower_bound_s(nbytes, ranks, bandwidth):.4f}"])
    classes = (workload or {}).get("num_classes")
    out = ["<h2>Communication bounds</h2>",
           f"<p class='note'>All-reduce of fp32 buffers, {html.escape(str(collectives.get('backend')))} on {ranks} "
           f"ranks ({html.escape(str(collectives.get('device')))}), {html.escape(str(collectives.get('statistic')))}; "
           "busbw = algbw x 2(G-1)/G as in nccl-tests. The lower bound of a step's gradient all-reduce is "
           f"2(G-1)/G x gradient bytes / busbw at the peak busbw ({peak['busbw_gbps']:.3f} GB/s at "
           f"{peak['bytes']:,} B). The measured figure is exposed communication, which can fall below the bound: "
           "the rest of the all-reduce overlaps backward compute. Cells with another rank count than the "
           "benchmark's reuse its busbw.</p>",
           _table(rows), _table(study)]
    if cells:
        out.append(_table(lower_bound_rows(collectives, list(cells), num_classes=classes)))
    return "\n".join(out)


def _projection_section(cells: Sequence[Mapping]) -> str:
    return ("<h2>Time to train</h2><p class='note'>90 epochs of ImageNet-1k (1,281,167 images) at each cell's "
            "measured throughput, assuming it holds for the whole training at this workload's image size and "
            "batch. Beside them, the study's own runtimes on JUWELS Booster (A100 GPUs, 224 px, 64 images per "
            "GPU), quoted from the paper.</p>" + _table(projection_rows(list(cells))) + _table(reference_rows()))


def _published_section(published: Mapping | None) -> str:
    if not published:
        return ""
    rows = [["model", "framework(s)", "loader", "GPUs", "E_G", "where", "note"]]
    for point in published.get("efficiency", []):
        gpus = point.get("gpus") or "{}-{}".format(*point["gpus_range"])
        frameworks = ", ".join(point.get("frameworks") or ["not stated"])
        rows.append([point["model"], frameworks, point["loader"], str(gpus),
                     f"{point['relation'] if point['relation'] != '=' else ''}{point['value']:.2f}", point["where"],
                     point.get("conflicts", "")])
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in published.get("notes", []))
    return ("<h2>Published figures (Aach et al. 2023)</h2><p class='note'>Stated in the paper's text; measured on "
            "another system, at another scale: a reference for the shape of the curves, never a baseline.</p>"
            + _table(rows) + (f"<ul class='note'>{notes}</ul>" if notes else ""))


def _scaling_model_section(published: Mapping | None, collectives: Mapping | None, cells: Sequence[Mapping],
                           workload: Mapping | None) -> str:
    """The scaling model: its validation against the study, and with a collective benchmark each
    cell's predicted E_G with this machine's all-reduce as every link."""
    parts = ["<h2>Scaling model</h2><p class='note'>A step-time model (harness.report.scaling_model): compute, "
             "data, decoding on the GPU, the all-reduce over the slowest link the GPUs span and the wait for "
             "the slowest GPU; "
             "python -m harness.report.scaling_model predicts a cell with your network's nccl-tests or OSU "
             "timings.</p>"]
    if published is not None:
        fitted = scaling_validation.fit(published)
        checks = scaling_validation.validate(published, fitted)
        others = scaling_validation.predict_other_studies(fitted)
        summary = scaling_validation.summarise(checks, scaling_validation.leave_one_out(published), others)
        parts += ["<h3>Against the study</h3><p class='note'>Fed the study's one-node runtimes, its network's "
                  "published speeds and the published cost of decoding on an A100, plus one published point "
                  f"each for the wait for the slowest GPU ({fitted.delay_mean_s * 1e6:.1f} us a rank loses per "
                  f"step to fixed-duration delays) and the file system the native loader reads "
                  f"({fitted.images_per_s:,.0f} images/s): {html.escape(str(summary))}.</p>",
                  _table(scaling_validation.validation_rows(checks)),
                  "<p class='note'>Out of sample: other studies, each from its own hardware and workload, nothing "
                  "refitted:</p>", _table(scaling_validation.out_of_sample_rows(others)),
                  "<p class='note'>Where the efficiency goes (python -m harness.report.scaling_validation):</p>",
                  _table(scaling_validation.share_rows(fitted))]
    if collectives is not None and workload and workload.get("batch_size"):
        link = collectives_link(collectives)
        columns = (8, 64, 256, 1024)
        rows = [["cell", *(f"E_G at {g} (extrapolation)" for g in columns)]]
        for cell in cells:
            try:
                model = scaling_model.model_of_records(cell["cell"], cell.get("records") or [],
                                                       batch_per_gpu=int(workload["batch_size"]),
                                                       num_classes=int(workload.get("num_classes") or 1000))
            except (ValueError, KeyError):
                continue
            network = scaling_model.Network(intra=link, inter=link, gpus_per_node=max(1, model.reference_gpus))
            predictions = scaling_model.predict(model, network, columns, base_gpus=1)
            rows.append([cell["cell"], *(f"{p.efficiency:.2f} [{p.efficiency_range[0]:.2f}, "
                                         f"{p.efficiency_range[1]:.2f}]" for p in predictions)])
        try:
            measured = scaling_check.check_rows({"workload": workload, "cells": list(cells)}, link)
        except (ValueError, KeyError):
            measured = []
        parts += [f"<h3>This machine's cells</h3><p class='note'>Every link as this machine's all-reduce "
                  f"({html.escape(link.describe())}), relative to one rank: extrapolations until checked on "
                  "multi-node data. Beside them, each measured cell against its prediction from its 1-rank cell "
                  "(python -m harness.report.scaling_validation --results).</p>", _table(rows),
                  *([_table(measured)] if len(measured) > 1 else [])]
    return "".join(parts)


def _work_section(cells: Sequence[Mapping]) -> str:
    """What a step of each cell did, counted after its window: the same integers launch after launch."""
    rows = [["cell", "GFLOP / step", "MFLOP / image", "operator calls", "collectives (calls, MB)",
             "peak MB a step allocated", "images decoded, MB read", "counted step s", "not counted"]]
    for cell in cells:
        work = cell.get("work")
        if not work:
            continue
        flops = work.get("flops", {}).get("total")
        images = (work.get("data") or {}).get("images")
        data = work.get("data") or {}
        rows.append([
            cell["cell"], f"{flops / 1e9:.3f}" if flops is not None else "-",
            f"{flops / images / 1e6:.1f}" if flops is not None and images else "-",
            sum(work["operators"].values()) if "operators" in work else "-",
            ", ".join(f"{kind} {c['calls']}, {c['bytes'] / 1e6:.2f}" for kind, c in work["collectives"].items())
            if "collectives" in work else "-",
            ", ".join(f"{value / 1e6:.1f}" + ("" if key == "step_peak_bytes" else " (allocator)")
                      for key, value in work["memory"].items()) if "memory" in work else "-",
            f"{data['images_decoded']}, {data['bytes_read'] / 1e6:.3f}" if "bytes_read" in data else "-",
            work.get("cost_s", "-"),
            "; ".join(f"{part}: {why}" for part, why in (work.get("not_counted") or {}).items()),
        ])
        if work.get("launches_differ"):
            rows[-1][-1] += f" (launches counted other {', '.join(work['launches_differ'])})"
    if len(rows) == 1:
        return ""
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in WORK_NOTES)
    return ("<h2>Counted work</h2><p class='note'>One step of each cell after its timed window, counted rather "
            "than timed (summed over the training ranks): these do not depend on the machine's speed.</p>"
            f"<ul class='note'>{notes}</ul>" + _table(rows))


def _paired_section(results: Mapping) -> str:
    """An A/B session's cells (``--against``): each cell's ratio and verdict, then every pair."""
    paired = results.get("paired_cells") or []
    if not paired:
        return ""
    against = results.get("against") or {}
    difference = against.get("difference") or {}
    changed = [*difference.get("commits", []), *(f"{name}: {was} -> {now}" for name, (was, now)
                                                  in (difference.get("launch_environment") or {}).items()),
               *(f"{name} {was} -> {now}" for name, (was, now) in (difference.get("packages") or {}).items())]
    rows = [["cell", "work", "pairs", "current/reference (interval)", "p", "verdict", "stored baseline's verdict",
             "flags"]]
    for cell in paired:
        ratio = Estimate.from_json(cell.get("ratio"))
        rows.append([cell["cell"], (cell.get("work") or {}).get("reading") or "-", len(cell.get("pairs", [])),
                     f"{ratio.text(3)} {ratio.confidence:.1%}" if ratio else "-",
                     f"{cell['p_value']:.3g}" if cell.get("p_value") is not None else "-", cell["verdict"],
                     (cell.get("stored_baseline") or {}).get("verdict", "-"),
                     "; ".join(cell.get("flags") or []) or cell.get("error") or ""])
    parts = [f"<h2>A/B against the {html.escape(str((against.get('reference') or {}).get('label')))}</h2>",
             "<p class='note'>Pairs of launches in this session, the order inside each pair balanced and random; "
             f"the current environment changed: {html.escape('; '.join(changed) or 'nothing (A/A)')}</p>",
             _table(rows)]
    for cell in paired:
        pairs = [["#", "order", "reference img/s", "current img/s", "current/reference"]]
        pairs += [[index + 1, pair["order"], f"{pair['reference']:.1f}", f"{pair['current']:.1f}",
                   f"{pair['current'] / pair['reference']:.3f}"] for index, pair in enumerate(cell.get("pairs", []))]
        parts += [f"<h3>{html.escape(cell['cell'])}</h3>", _table(pairs)]
        notes = ([f"failed: the {failure['side']} side's launch in pair {failure['pair'] + 1}: {failure['error']}"
                  for failure in cell.get("failures") or []]
                 + [f"left out: pair {left['pair'] + 1}: {left['why']}" for left in cell.get("left_out") or []])
        if notes:
            parts.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in notes) + "</ul>")
    return "".join(parts)


def _provenance_section(results: Mapping) -> str:
    provenance = results.get("provenance") or {}
    workload = results.get("workload") or {}
    return ("<h2>Provenance</h2>"
            + _table([["key", "value"]] + [[k, json.dumps(v) if isinstance(v, (dict, list)) else v]
                                           for k, v in provenance.items()])
            + "<h3>Workload</h3>" + _table([["setting", "value"]] + [[k, v] for k, v in workload.items()]))


def write_report(results: Path | Mapping, out_dir: Path, *, collectives: Path | Mapping | None = None,
                 published: Path | Mapping | None = DEFAULT_PUBLISHED, history: Sequence[Mapping] = ()) -> Path:
    """Write ``out_dir/index.html`` and its figures for ``results`` (a results file or its dict);
    ``history``: the system's history lines, drawn as each cell's trend. Returns the index's path."""
    results = _load(results)
    collectives = _load(collectives, load_collectives)
    if isinstance(published, Path) and not published.exists():
        published = None
    published = _load(published)
    if published is not None and published.get("kind") != "published":
        raise ValueError("published must be a file of kind 'published' (harness/report/published-aach2023.json)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cells = results.get("cells", [])
    figures = write_all(results, out_dir, published=published, collectives=collectives)
    trend = plot_history(history, [cell["cell"] for cell in cells], out_dir / "history.png")
    summary, classes = _summary_section_rows(cells)
    verdict_lines = [f"<li><b>{html.escape(cell['cell'])}</b>: {html.escape(v.get('kind', ''))}: "
                     f"{html.escape(v.get('message', ''))}</li>"
                     for cell in cells for v in cell.get("verdicts") or [] if v.get("kind") != VerdictKind.PASS]
    verdict_lines += [f"<li><b>{html.escape(cell['cell'])}</b>: confirmed: "
                      f"{html.escape(cell['confirmation']['message'])}</li>" for cell in cells if cell.get("confirmation")]
    errors = [f"<li><b>{html.escape(cell['cell'])}</b>: <pre>{html.escape(cell['error'])}</pre></li>"
              for cell in cells if cell.get("error")]
    provenance = results.get("provenance") or {}
    body = [
        f"<h1>dlscale report: {html.escape(str(results.get('system')))}</h1>",
        f"<p class='note'>launcher {html.escape(str(results.get('launcher')))}, commit "
        f"{html.escape(str(provenance.get('git_commit')))}, measured {html.escape(str(provenance.get('date')))}, "
        f"report written {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}</p>",
        "<h2>Summary</h2>", _table(summary, classes),
        f"<ul>{''.join(verdict_lines + errors)}</ul>" if verdict_lines or errors else "",
        "<h2>Figures</h2>",
        *(f'<p><img src="{html.escape(path.name)}" alt="{html.escape(path.stem)}"></p>' for path in figures),
        *(["<h2>History</h2>", f'<p><img src="{trend.name}" alt="history"></p>'] if trend else []),
        _paired_section(results),
        _framework_section(cells),
        _breakdown_section(cells),
        _work_section(cells),
        _communication_section(collectives, cells, results.get("workload")),
        _projection_section(cells),
        _published_section(published),
        _scaling_model_section(published, collectives, cells, results.get("workload")),
        _provenance_section(results),
    ]
    index = out_dir / "index.html"
    index.write_text("<!doctype html><html><head><meta charset='utf-8'><title>dlscale report</title>"
                     f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
    return index


def _round(value: float) -> float:
    return round(value, 6) if finite_number(value) else value



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report.html", description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="results file written with --results-json")
    parser.add_argument("--out", type=Path, required=True, help="directory for index.html and the figures")
    parser.add_argument("--collectives", type=Path, default=None,
                        help=f"collective benchmark results (default: {COLLECTIVES_FILE} "
                             "when it exists)")
    parser.add_argument("--published", type=Path, default=DEFAULT_PUBLISHED,
                        help="the study's published figures to overlay and quote (kind 'published')")
    parser.add_argument("--no-published", action="store_true", help="leave the published figures out")
    parser.add_argument("--history", type=Path, default=None,
                        help="the system's history file (history/<system>.jsonl): each cell's trend")
    args = parser.parse_args(argv)
    collectives = args.collectives or (COLLECTIVES_FILE if COLLECTIVES_FILE.exists() else None)
    try:
        history = read_history(args.history)[0] if args.history else ()
        index = write_report(args.results, args.out, collectives=collectives,
                             published=None if args.no_published else args.published, history=history)
    except (OSError, ValueError, KeyError) as error:
        print(f"cannot write the report: {error}", file=sys.stderr)
        return 1
    print(index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
