"""Throughput and batch latency over time, and latency percentiles from the timing records.

Per committed batch: records / seconds (the driver's wall time for the batch, from its start to
its commit and sink) and the batch's seconds, plotted at the batch's end. Percentiles come from
the driver's timing records (`timings/`): the batch, its Spark job of state tasks, each task's
state load and store commit (the changelog written durably to storage: the upload on the
commit path), and the driver's commit (staging, commit log, sink).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from statebed_verify.history import Op

from .timeline import FaultWindow, add_fault_windows

__all__ = ["PERCENTILES", "latency_rows", "throughput_figure"]

PERCENTILES = (50, 95, 99)

# (label, how to pull the samples out of one timing record)
_METRICS: tuple[tuple[str, str, str], ...] = (
    ("batch, wall (driver)", "seconds", "batch"),
    ("state tasks, Spark job (driver)", "tasks_s", "batch"),
    ("driver commit: staging, commit log, sink", "commit_s", "batch"),
    ("task: state load", "load_s", "task"),
    ("task: store commit incl. changelog upload", "commit_s", "task"),
)


def _committed(ops: list[Op]) -> list[Op]:
    return sorted((op for op in ops if op.type == "batch" and op.fields.get("status") == "committed" and op.end), key=lambda o: o.end or 0)


def _series(ops: list[Op], t0: float) -> tuple[list[float], list[float], list[float], list[str]]:
    batches = _committed(ops)
    x = [(op.end or op.start) - t0 for op in batches]
    secs = [max((op.end or op.start) - op.start, 1e-6) for op in batches]
    rate = [float(op.fields.get("records") or 0) / s for op, s in zip(batches, secs)]
    text = [f"batch {op.fields.get('batch')}: {op.fields.get('records')} records in {s:.2f} s" for op, s in zip(batches, secs)]
    return x, rate, secs, text


def throughput_figure(ops: list[Op], t0: float, windows: list[FaultWindow], baseline: tuple[list[Op], float] | None = None) -> go.Figure:
    """Two rows sharing the time axis: records/s per batch, seconds per batch; baseline dashed."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=("throughput", "batch latency"))
    runs = [("this run", ops, t0, "#0969da", "solid")]
    if baseline is not None:
        runs.append(("fault-free baseline", baseline[0], baseline[1], "#8c959f", "dash"))
    for name, run_ops, start, color, dash in runs:
        x, rate, secs, text = _series(run_ops, start)
        style = {"color": color, "dash": dash}
        fig.add_trace(go.Scatter(x=x, y=rate, name=f"{name}: records/s", mode="lines+markers", line=style, hovertext=text), row=1, col=1)
        fig.add_trace(
            go.Scatter(x=x, y=secs, name=f"{name}: seconds/batch", mode="lines+markers", line=style, hovertext=text), row=2, col=1
        )
    add_fault_windows(fig, windows, t0, label=False)
    fig.update_yaxes(title_text="records/s", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="seconds", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(rangemode="tozero")
    fig.update_xaxes(title_text="seconds since the run started (each point at its batch's end)", row=2, col=1)
    fig.update_layout(title="Throughput and batch latency (fault windows shaded)", legend={"orientation": "h", "y": -0.2}, meta={"t0": t0})
    return fig


def _samples(timings: list[dict[str, Any]], key: str, where: str) -> list[float]:
    out: list[float] = []
    for t in timings:
        if t.get("status") != "committed":
            continue
        if where == "batch" and isinstance(t.get(key), (int, float)):
            out.append(float(t[key]))
        elif where == "task":
            out += [float(p[key]) for p in t.get("task_phases") or [] if isinstance(p, dict) and isinstance(p.get(key), (int, float))]
    return out


def _stats(xs: list[float]) -> list[Any]:
    if not xs:
        return ["-"] * (len(PERCENTILES) + 2)
    arr = np.asarray(xs)
    return [len(xs), *(round(float(np.percentile(arr, p)) * 1000, 1) for p in PERCENTILES), round(float(arr.max()) * 1000, 1)]


def latency_rows(timings: list[dict[str, Any]], baseline: list[dict[str, Any]] | None = None) -> tuple[list[str], list[list[Any]]]:
    """Header and rows: per metric, n / p50 / p95 / p99 / max in ms, for this run (and the baseline)."""
    cols = ["n", *(f"p{p} ms" for p in PERCENTILES), "max ms"]
    header = ["latency", *cols] + ([f"baseline {c}" for c in cols] if baseline is not None else [])
    rows = []
    for label, key, where in _METRICS:
        row = [label, *_stats(_samples(timings, key, where))]
        if baseline is not None:
            row += _stats(_samples(baseline, key, where))
        rows.append(row)
    return header, rows
