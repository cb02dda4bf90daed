"""`load/series.jsonl`: one row per second of the run, what the report plots.

Row: `{"t": epoch second, "requests_per_s", "failures_per_s"` (Locust's aggregated stats
history), `"acknowledged", "committed"` (cumulative records acknowledged / committed by the
end of that second), `"ingest_to_commit_ms": {"p50", "p95", "p99"}` (of the records whose
batch committed in that second; nulls when none did)}.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from statebed_base.localfs import atomic_write

from .accounting import Accounting, percentiles

__all__ = ["locust_rates", "series_rows", "write_series"]


def locust_rates(history_csv: Path) -> dict[int, tuple[float, float]]:
    """Second -> (requests/s, failures/s) from Locust's `<prefix>_stats_history.csv` (Aggregated rows)."""
    out: dict[int, tuple[float, float]] = {}
    if not history_csv.exists():
        return out
    with open(history_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("Name") == "Aggregated":
                try:
                    out[int(row["Timestamp"])] = (float(row["Requests/s"]), float(row["Failures/s"]))
                except (KeyError, ValueError):
                    continue
    return out


def series_rows(acc: Accounting, rates: dict[int, tuple[float, float]]) -> list[dict[str, Any]]:
    seconds = set(rates) | {int(t) for t, _ in acc.ack_times} | {int(c) for c, _, _ in acc.latencies}
    if not seconds:
        return []
    acks = sorted(acc.ack_times)
    commits = sorted(acc.latencies)
    rows, ai, ci, acked, committed = [], 0, 0, 0, 0
    for t in range(min(seconds), max(seconds) + 1):
        while ai < len(acks) and acks[ai][0] < t + 1:
            acked += acks[ai][1]
            ai += 1
        in_second = []
        while ci < len(commits) and commits[ci][0] < t + 1:
            c, i, n = commits[ci]
            committed += n
            in_second.append(((c - i) * 1000, n))
            ci += 1
        req, fail = rates.get(t, (0.0, 0.0))
        rows.append(
            {
                "t": t,
                "requests_per_s": req,
                "failures_per_s": fail,
                "acknowledged": acked,
                "committed": committed,
                "ingest_to_commit_ms": percentiles(in_second),
            }
        )
    return rows


def write_series(path: Path, rows: list[dict[str, Any]]) -> None:
    atomic_write(path, "".join(json.dumps(r) + "\n" for r in rows).encode())
