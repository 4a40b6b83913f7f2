"""What a parameter-server cell's servers saw over the timed windows of its launches: updates per
second at each server and the staleness of the asynchronous gradients (updates other workers
applied between a worker's read of the parameters and its gradient's arrival)."""
from __future__ import annotations

import statistics
from typing import Mapping, Sequence


def server_summary(records: Sequence[Mapping]) -> dict | None:
    """The servers' records (``"role": "server"``) of all launches, pooled; None without any."""
    if not records:
        return None
    rates = [r["updates_per_s"] for r in records if r.get("updates_per_s")]
    counted = [(r["staleness_mean"], r["staleness_count"]) for r in records if r.get("staleness_count")]
    maxima = [r["staleness_max"] for r in records if r.get("staleness_max") is not None]
    weight = sum(count for _, count in counted)
    return {
        "servers": len({r.get("server") for r in records}),
        "timed_updates": sum(r.get("timed_updates", 0) for r in records),
        "updates_per_s": statistics.fmean(rates) if rates else None,
        "staleness_mean": sum(mean * count for mean, count in counted) / weight if weight else None,
        "staleness_max": max(maxima) if maxima else None,
        "work": served_work(records),
    }


def served_work(records: Sequence[Mapping]) -> dict:
    """What each server counted of the workers' counted steps (harness.rank.frameworks.ps_shards.
    ServedWork): per server and step, pushes and pulls with their bytes, summed over the workers and
    by worker; ``launches_differ`` names the servers a later launch counted otherwise. A server
    that counted nothing is under ``not_counted`` with why."""
    by_server: dict[str, dict] = {}
    not_counted: dict[str, str] = {}
    differ: set[str] = set()
    for record in records:
        server, work = str(record.get("server")), record.get("work")
        if work and "applied" in work:  # a server that sees updates, not the workers' pushes (ps-lite's)
            if server in by_server:
                differ.update([server] if by_server[server]["applied"] != work["applied"] else [])
                continue
            by_server[server] = {"applied": work["applied"], "by_worker_not_counted": work.get("by_worker_not_counted")}
            continue
        if not work or "by_worker" not in work:
            not_counted.setdefault(server, (work or {}).get("not_counted", "this server's harness does not count"))
            continue
        if server in by_server:
            if by_server[server]["by_worker"] != work["by_worker"]:
                differ.add(server)
            continue
        totals: dict[str, dict[str, int]] = {}
        for kinds in work["by_worker"].values():
            for kind, counts in kinds.items():
                total = totals.setdefault(kind, {"calls": 0, "bytes": 0})
                total["calls"] += counts["calls"]
                total["bytes"] += counts["bytes"]
        by_server[server] = {**dict(sorted(totals.items())), "by_worker": work["by_worker"]}
    return {"by_server": dict(sorted(by_server.items())),
            **({"not_counted": {server: why for server, why in not_counted.items() if server not in by_server}}
               if set(not_counted) - set(by_server) else {}),
            **({"launches_differ": sorted(differ)} if differ else {})}


def server_rows(cells: Sequence[tuple[str, Mapping, Mapping | None]]) -> list[list[str]]:
    """A table of ``(cell id, server summary, breakdown shares or None)``: workers' wait for the
    servers is the breakdown's optimizer part (a worker's optimizer step pushes and pulls)."""
    rows = [["cell", "servers", "updates/s per server", "staleness mean", "staleness max", "waiting for servers"]]
    for cell_id, summary, shares in cells:
        rows.append([cell_id, str(summary["servers"]), _number(summary["updates_per_s"], ".1f"),
                     _number(summary["staleness_mean"], ".2f"), _number(summary["staleness_max"], "d"),
                     _number(shares.get("optimizer") if shares else None, ".0%")])
    return rows


def _number(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)
