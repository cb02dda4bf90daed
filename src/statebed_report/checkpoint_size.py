"""The checkpoint's size over a run, from the run's own maintenance records.

Each pass records, per store it cleaned, the files and bytes the store holds afterwards
(`files_kept`, `bytes_kept` in `<run>/maintenance.jsonl`: from the listing the cleanup made
anyway). Summed over stores, each at its latest record (a pass that ran out of request
budget leaves a store at its previous value), per latest committed batch: the curve that
shows whether retention keeps the checkpoint bounded. The commit log is in it from its first
trim on (its row, store "commits", keeps the entries left). No records with those fields: no chart.
"""

from __future__ import annotations

from typing import Any, TypeGuard

import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = ["kept_per_batch", "size_figure"]


def kept_per_batch(rows: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """(latest batch, files, bytes) after each batch's pass, summed over every store seen so far."""
    usable = [
        r for r in rows if r.get("error") is None and all(_count(r.get(k)) for k in ("latest_batch", "pass_no", "files_kept", "bytes_kept"))
    ]
    latest: dict[str, tuple[int, int]] = {}
    out: dict[int, tuple[int, int]] = {}
    for r in sorted(usable, key=lambda r: (r["latest_batch"], r["pass_no"])):  # records from before these fields are left out
        latest[str(r.get("store"))] = (r["files_kept"], r["bytes_kept"])
        out[r["latest_batch"]] = (sum(f for f, _ in latest.values()), sum(b for _, b in latest.values()))
    return [(b, f, s) for b, (f, s) in sorted(out.items())]


def _count(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def size_figure(points: list[tuple[int, int, int]], retain: Any = None) -> go.Figure:
    """Two rows sharing the batch axis: state files kept, and their bytes."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=("objects", "bytes"))
    x = [p[0] for p in points]
    fig.add_trace(go.Scatter(x=x, y=[p[1] for p in points], name="state files kept", mode="lines", line={"color": "#0969da"}), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=[p[2] for p in points], name="bytes kept", mode="lines", line={"color": "#1a7f37"}), row=2, col=1)
    fig.update_yaxes(title_text="files", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="bytes", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text="latest committed batch at the maintenance pass", row=2, col=1)
    kept = f" (retain {retain})" if retain is not None else ""
    fig.update_layout(title=f"Checkpoint size after each maintenance pass{kept}", legend={"orientation": "h", "y": -0.2})
    return fig
