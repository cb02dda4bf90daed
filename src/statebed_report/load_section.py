"""The load section: a load run's per-interval series (`load/series.jsonl`, written by
`statebed load run`) over time, with the chaos fault windows shaded.

Rows: {"t": epoch seconds, "requests_per_s", "failures_per_s", "acknowledged", "committed",
"ingest_to_commit_ms": {"p50", "p95", "p99"}}; a row missing a field leaves a gap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from statebed_base.errors import CorruptFileError, UsageError
from statebed_base.jsonsafe import loads_strict
from statebed_model.experimentdir import ExperimentDir

from .timeline import FaultWindow, add_fault_windows

__all__ = ["find_series", "load_figure", "read_series"]


def find_series(*roots: Path) -> Path | None:
    """The first `load/series.jsonl` under the given directories (an experiment's, then its faulted run's)."""
    return next((s for r in roots if (s := ExperimentDir(r).series).is_file()), None)


def read_series(path: Path) -> list[dict[str, Any]]:
    """The rows in time order; a line that is not a JSON object with a numeric `t` is a UsageError naming it."""
    rows = []
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = loads_strict(line, file=f"{path}:{n}", what="series row")
        except CorruptFileError as e:
            raise UsageError(f"{e} (half-written?)") from None
        if not isinstance(row, dict) or not isinstance(row.get("t"), (int, float)):
            raise UsageError(f"{path}:{n}: not a load series row (needs a numeric t)")
        rows.append(row)
    return sorted(rows, key=lambda r: float(r["t"]))


def _num(row: dict[str, Any], key: str, sub: str | None = None) -> float | None:
    value = row.get(key)
    if sub is not None:
        value = value.get(sub) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def load_figure(rows: list[dict[str, Any]], t0: float, windows: list[FaultWindow]) -> go.Figure:
    """Requests and failures per second, ingest-to-commit latency percentiles, acknowledged vs committed."""
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.07,
        subplot_titles=("requests per second", "ingest → commit latency (ms)", "records acknowledged / committed"),
    )
    x = [float(r["t"]) - t0 for r in rows]
    lines: tuple[tuple[int, str, str | None, str, str], ...] = (
        (1, "requests_per_s", None, "requests/s", "#0969da"),
        (1, "failures_per_s", None, "failures/s", "#cf222e"),
        (2, "ingest_to_commit_ms", "p50", "p50", "#1a7f37"),
        (2, "ingest_to_commit_ms", "p95", "p95", "#bf8700"),
        (2, "ingest_to_commit_ms", "p99", "p99", "#cf222e"),
        (3, "acknowledged", None, "acknowledged", "#0969da"),
        (3, "committed", None, "committed", "#1a7f37"),
    )
    for row, key, sub, name, color in lines:
        fig.add_trace(go.Scatter(x=x, y=[_num(r, key, sub) for r in rows], name=name, mode="lines", line={"color": color}), row=row, col=1)
    add_fault_windows(fig, windows, t0, label=False)
    fig.update_xaxes(title_text="seconds since the run started", row=3, col=1)
    fig.update_layout(title="Load (Locust) with the fault windows shaded", legend={"orientation": "h", "y": -0.12}, meta={"t0": t0})
    return fig
