"""The timeline of a run: drivers, batches and task attempts as bars, faults as shaded windows.

Times are seconds since `t0` (the run's first recorded op); each figure carries `t0` in its
layout's `meta` so a reader (or a test) can map a bar back to the history's epoch seconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from statebed_verify.history import Op

__all__ = ["FaultWindow", "add_fault_windows", "attempt_kind", "fault_windows", "start_of", "timeline_figure"]

# task-attempt categories, in legend order, with their colours
KINDS = {
    "original": "#0969da",
    "speculative": "#bf8700",
    "failed": "#cf222e",
    "killed": "#8c959f",
    "no end recorded": "#8250df",
}
_BATCH = {"committed": "#1a7f37", "re-emitted": "#4ac26b"}


@dataclass(frozen=True)
class FaultWindow:
    """A fault from its inject to its heal (or the end of its inject when it never healed)."""

    id: str
    kind: str
    start: float
    end: float
    outcome: str
    healed: bool


def fault_windows(history: Iterable[Op]) -> list[FaultWindow]:
    """One window per injected fault, as the history recorded it."""
    ops = [op for op in history if op.type == "fault"]
    out = []
    for inj in (op for op in ops if op.fields.get("phase", "inject") == "inject"):
        fid = str(inj.fields.get("id"))
        heal = next((op for op in ops if op.fields.get("phase") == "heal" and str(op.fields.get("id")) == fid and op.outcome == "ok"), None)
        end = heal.start if heal is not None else inj.end if inj.end is not None else inj.start
        out.append(FaultWindow(fid, str(inj.fields.get("kind")), inj.start, end, inj.outcome, heal is not None))
    return out


def start_of(ops: Iterable[Op]) -> float | None:
    starts = [op.start for op in ops]
    return min(starts) if starts else None


def attempt_kind(op: Op) -> str:
    """How a task attempt ended, as the timeline colours it."""
    if op.fields.get("spark_outcome") == "TaskKilled":
        return "killed"
    if op.outcome == "fail":
        return "failed"
    if op.outcome == "info":
        return "no end recorded"
    return "speculative" if op.fields.get("speculative") else "original"


def add_fault_windows(fig: go.Figure, windows: list[FaultWindow], t0: float, *, label: bool = True) -> None:
    """Shade each window on every subplot; an instantaneous fault is a thin red band."""
    for w in windows:
        text = {"annotation_text": f"{w.id} {w.kind}", "annotation_position": "top left"} if label else {}
        fig.add_vrect(
            x0=w.start - t0,
            x1=w.end - t0,
            fillcolor="#cf222e",
            opacity=0.15,
            line={"color": "#cf222e", "width": 1},
            layer="below",
            name=f"fault {w.id}",
            row="all",
            **text,
        )


def _lane(op: Op) -> tuple[int, int]:
    return (int(op.fields.get("partition") or 0), int(op.fields.get("attempt") or 0))


def _row(op: Op) -> str:
    p, a = _lane(op)
    return f"p{p} · attempt {a}"


def _hover(op: Op, t0: float) -> str:
    f = op.fields
    keys = ("batch", "partition", "attempt", "speculative", "executor", "host", "pid", "version", "spark_outcome", "store_outcome", "error")
    lines = [f"{k}: {f[k]}" for k in keys if f.get(k) is not None]
    for k in ("checkpoint_id", "base_id"):
        if f.get(k):
            lines.append(f"{k}: {str(f[k])[:13]}…")
    end = "running / never ended" if op.end is None else f"{op.end - t0:.2f} s"
    return "<br>".join([f"{op.start - t0:.2f} s → {end}", *lines])


def _bars(ops: list[Op], t0: float, now: float, rows: list[str], name: str, color: str, text: list[str]) -> go.Bar:
    ends = [op.end if op.end is not None else now for op in ops]
    return go.Bar(
        name=name,
        orientation="h",
        y=rows,
        base=[op.start - t0 for op in ops],
        x=[max(e - op.start, 0.02) for op, e in zip(ops, ends)],
        marker={"color": color, "line": {"width": 0.5, "color": "#fff"}},
        text=text,
        textposition="inside",
        insidetextanchor="middle",
        hovertext=[_hover(op, t0) for op in ops],
        hoverinfo="text",
    )


def timeline_figure(ops: list[Op], windows: list[FaultWindow], t0: float) -> go.Figure:
    """Driver processes, batches, then one row per (partition, attempt number)."""
    now = max([op.end or op.start for op in ops] + [t0])
    fig = go.Figure()
    drivers = [op for op in ops if op.type == "driver"]
    if drivers:
        text = [f"pid {op.fields.get('pid')} exit {op.fields.get('exit_code')}" for op in drivers]
        fig.add_trace(_bars(drivers, t0, now, ["driver"] * len(drivers), "driver process", "#57606a", text))
    batches = [op for op in ops if op.type == "batch"]
    for status, color in _BATCH.items():
        mine = [op for op in batches if op.fields.get("status") == status]
        if mine:
            fig.add_trace(
                _bars(mine, t0, now, ["batches"] * len(mine), f"batch {status}", color, [f"b{op.fields.get('batch')}" for op in mine])
            )
    attempts = [op for op in ops if op.type == "task-attempt"]
    for kind, color in KINDS.items():
        mine = [op for op in attempts if attempt_kind(op) == kind]
        if mine:
            text = [f"b{op.fields.get('batch')} e{op.fields.get('executor', '?')}" for op in mine]
            fig.add_trace(_bars(mine, t0, now, [_row(op) for op in mine], f"attempt: {kind}", color, text))
    lanes = sorted({_lane(op) for op in attempts}, reverse=True)
    order = [f"p{p} · attempt {a}" for p, a in lanes] + ["batches", "driver"]
    add_fault_windows(fig, windows, t0)
    fig.update_layout(
        barmode="overlay",
        title="Timeline: drivers, batches and task attempts (bar text: batch, executor); faults shaded",
        xaxis_title="seconds since the run started",
        yaxis={"categoryorder": "array", "categoryarray": order},
        legend={"orientation": "h", "y": -0.18},
        meta={"t0": t0},
    )
    return fig


def rows_height(ops: list[Op]) -> int:
    rows = {_lane(op) for op in ops if op.type == "task-attempt"}
    return 220 + 34 * (len(rows) + 2)


def describe(windows: list[FaultWindow], t0: float) -> list[dict[str, Any]]:
    """The windows as the page lists them under the timeline (what the shading should show)."""
    return [
        {
            "fault": w.id,
            "kind": w.kind,
            "inject": round(w.start - t0, 3),
            "until": round(w.end - t0, 3),
            "healed": w.healed,
            "outcome": w.outcome,
        }
        for w in windows
    ]
