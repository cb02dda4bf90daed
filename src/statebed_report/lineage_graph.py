"""The lineage graph of a checkpoint, one partition at a time (a dropdown picks the partition).

Per partition: every (version, id) file set in storage (`statebed ls`'s listing), the committed
chain along the top (green; squares carry a snapshot; blue: files no kept commit entry names but a
committed batch's load plan reads, `ls`'s `needed`, such as the snapshot below a retained window),
files nothing needs below it (grey: orphans of losing attempts, labelled with the attempt records
that wrote them), an edge from
each file to the base its lineage names, and the anomalies of that partition circled in red.
V1 files have no ids: a version's one file may have been written by several attempts (the last
one wins, silently): those are marked "overwritten" in orange.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go

from statebed_model.attempts import AttemptRecord
from statebed_verify.history import Op

__all__ = ["Node", "default_partition", "lineage_figure", "partition_nodes", "uploaded_by"]

_UPLOADED = ("changelog.upload.after", "snapshot.upload.after")
_COLORS = {"committed": "#1a7f37", "needed": "#0969da", "orphan": "#8c959f", "overwritten": "#bf8700"}


@dataclass
class Node:
    version: int
    id: str | None
    committed: bool
    changelog: bool
    snapshot: bool
    base: tuple[int, str | None] | None  # the (version, id) this file builds on, from its lineage
    writers: list[str] = field(default_factory=list)  # attempts that wrote it
    anomalies: list[str] = field(default_factory=list)
    lane: int = 0
    needed: bool = False  # a committed batch's load plan reads one of its files (`ls`'s `needed`)

    @property
    def status(self) -> str:
        if not self.committed:
            return "needed" if self.needed else "orphan"
        return "overwritten" if self.id is None and len(self.writers) > 1 else "committed"

    @property
    def name(self) -> str:
        return f"v{self.version}" + (f" {self.id[:8]}" if self.id else "")


def _attempt_label(r: AttemptRecord, spark: dict[int | None, Op]) -> str:
    op = spark.get(r.task_attempt_id)
    extra = []
    if op is not None and op.fields.get("speculative"):
        extra.append("speculative")
    if op is not None and op.fields.get("executor") is not None:
        extra.append(f"executor {op.fields['executor']}")
    extra.append(f"store: {r.outcome}")
    if op is not None and op.fields.get("spark_outcome") not in (None, "Success"):
        extra.append(f"Spark: {op.fields['spark_outcome']}")
    return f"b{r.batch} p{r.partition} attempt {r.attempt} ({', '.join(extra)})"


def _writers(
    node: Node, partition: int, attempts: list[AttemptRecord], spark: dict[int | None, Op], wrote: frozenset[tuple[int, int, int]]
) -> list[str]:
    """Attempt records that wrote this file, the last to end last: by id (V2); V1 files carry no
    id, so every attempt of its version whose store commit returned ("ok") wrote it, and so did
    one a firing record shows past its upload (`wrote`: a zombie killed after its write)."""
    if node.id is not None:
        mine = [r for r in attempts if r.checkpoint_id == node.id]
    else:
        mine = [
            r
            for r in attempts
            if r.partition == partition and r.version == node.version and (r.outcome == "ok" or (r.batch, r.partition, r.attempt) in wrote)
        ]
    return [_attempt_label(r, spark) for r in sorted(mine, key=lambda r: (r.end is None, r.end or r.start))]


def _anomaly_hits(a: dict[str, Any], partition: int, node: Node) -> bool:
    """Whether an anomaly names this node: by id, or by version (its own or its batches' + 1).

    A state anomaly names keys and batches, not partitions or files: it is hung on the suspects
    its batches could have read, the V1 files several attempts overwrote (versions up to its last
    batch + 1) or, with a version, the uncommitted files of that version."""
    if a.get("partition") not in (None, partition):
        return False
    ids = [i for i in a.get("ids") or [] if i]
    if node.id is not None and node.id in ids:
        return True
    batches = [int(b) for b in a.get("batches") or [] if isinstance(b, int)]
    versions = {v for v in [a.get("version"), *(b + 1 for b in batches)] if isinstance(v, int)}
    if a.get("partition") is not None and not ids:
        return node.version in versions
    if a.get("partition") is None and not ids and node.status == "overwritten":
        return not batches or node.version <= max(batches) + 1
    return node.version in versions and not ids and node.status != "committed"


def uploaded_by(firings: Iterable[dict[str, Any]]) -> frozenset[tuple[int, int, int]]:
    """(batch, partition, attempt) of every attempt a firing record shows past a file's upload."""
    out: set[tuple[int, int, int]] = set()
    for f in firings:
        task = f.get("task")
        if f.get("failpoint") in _UPLOADED and isinstance(task, dict):
            b, p, a = task.get("batch"), task.get("partition"), task.get("attempt")
            if isinstance(b, int) and isinstance(p, int) and isinstance(a, int):
                out.add((b, p, a))
    return frozenset(out)


def partition_nodes(
    store: dict[str, Any],
    attempts: list[AttemptRecord],
    task_ops: Iterable[Op],
    anomalies: list[dict[str, Any]],
    wrote: frozenset[tuple[int, int, int]] = frozenset(),
) -> list[Node]:
    """The nodes of one store of `statebed ls`'s listing, with writers, anomalies and lanes;
    `wrote` (`uploaded_by`) adds V1 writers whose commit never returned."""
    partition = int(store["partition"])
    spark = {op.fields.get("task_attempt_id"): op for op in task_ops if op.type == "task-attempt"}
    nodes: list[Node] = []
    for v in store["versions"]:
        below = 0
        for e in v["ids"]:
            lineage = e.get("lineage") or []
            bases = [x for x in lineage if isinstance(x, dict) and x.get("version") is not None and x["version"] < v["version"]]
            base = (int(bases[-1]["version"]), bases[-1].get("id")) if bases else None
            node = Node(int(v["version"]), e.get("id"), bool(e.get("committed")), bool(e.get("changelog")), bool(e.get("snapshot")), base)
            node.needed = bool(e.get("needed"))
            node.writers = _writers(node, partition, attempts, spark, wrote)
            node.anomalies = [f"{a.get('check', '')} {a.get('kind')}".strip() for a in anomalies if _anomaly_hits(a, partition, node)]
            if node.status == "orphan":
                below += 1
                node.lane = -below
            nodes.append(node)
    return nodes


def default_partition(stores: list[dict[str, Any]], anomalies: list[dict[str, Any]]) -> int:
    """The store to show first: one with an anomaly on its graph, else one with orphans, else the first."""
    parts = [int(s["partition"]) for s in stores]
    for a in anomalies:
        if a.get("partition") in parts:
            return int(a["partition"])
    for s in stores:
        if any(not e.get("committed") and not e.get("needed") for v in s["versions"] for e in v["ids"]):
            return int(s["partition"])
    return parts[0] if parts else 0


def _hover(n: Node) -> str:
    lines = [
        f"version {n.version}" + (f", id {n.id}" if n.id else " (V1: no id)"),
        "committed"
        if n.committed
        else ("no kept commit names it, a committed load reads it: needed" if n.needed else "not committed: orphan"),
        "files: " + " + ".join(k for k, on in (("changelog", n.changelog), ("snapshot", n.snapshot)) if on),
    ]
    if n.base is not None:
        lines.append(f"builds on v{n.base[0]}" + (f" {str(n.base[1])[:8]}" if n.base[1] else ""))
    lines += [f"written by {w}" for w in n.writers] or ["no attempt record names it"]
    if n.status == "overwritten":
        lines.append(f"OVERWRITTEN: {len(n.writers)} attempts wrote this one file; the last write won")
    lines += [f"ANOMALY: {a}" for a in n.anomalies]
    return "<br>".join(lines)


def _label(n: Node) -> str:
    if n.status in ("committed", "needed") and not n.anomalies:
        return n.name
    who = n.writers[-1] if n.writers else "no attempt record"
    tag = "ANOMALY " if n.anomalies else ""
    return f"{tag}{n.name}<br>{'overwritten ' if n.status == 'overwritten' else 'orphan '}← {who.split(' (')[0]}"


def _traces(nodes: list[Node], visible: bool) -> list[go.Scatter]:
    at = {(n.version, n.id): n for n in nodes}
    chain = sorted((n for n in nodes if n.committed), key=lambda n: n.version)
    ex: list[float | None] = []
    ey: list[float | None] = []
    for n in nodes:
        base = at.get(n.base) if n.base is not None else None
        if base is None and n.id is None:  # V1: the previous version's one file
            base = next((b for b in chain if b.version == n.version - 1), None)
        if base is not None:
            ex += [base.version, n.version, None]
            ey += [base.lane, n.lane, None]
    out = [
        go.Scatter(x=ex, y=ey, mode="lines", line={"color": "#afb8c1", "width": 1.5}, hoverinfo="skip", showlegend=False, visible=visible)
    ]
    for status, color in _COLORS.items():
        mine = [n for n in nodes if n.status == status]
        if not mine:
            continue
        out.append(
            go.Scatter(
                x=[n.version for n in mine],
                y=[n.lane for n in mine],
                mode="markers+text",
                name=status,
                text=[_label(n) for n in mine],
                textposition="bottom center",
                hovertext=[_hover(n) for n in mine],
                hoverinfo="text",
                marker={
                    "color": color,
                    "size": [22 if n.anomalies else 15 for n in mine],
                    "symbol": ["square" if n.snapshot else "circle" for n in mine],
                    "line": {
                        "color": ["#cf222e" if n.anomalies else "#fff" for n in mine],
                        "width": [4 if n.anomalies else 1 for n in mine],
                    },
                },
                visible=visible,
            )
        )
    return out


def lineage_figure(per_partition: dict[int, list[Node]], first: int, title: str) -> go.Figure:
    """One set of traces per partition; the dropdown shows one set at a time."""
    fig = go.Figure()
    owner: list[int] = []
    for p, nodes in sorted(per_partition.items()):
        for t in _traces(nodes, p == first):
            fig.add_trace(t)
            owner.append(p)
    buttons = [
        {
            "label": f"partition {p}",
            "method": "update",
            "args": [{"visible": [o == p for o in owner]}, {"title.text": f"{title}: partition {p}"}],
        }
        for p in sorted(per_partition)
    ]
    lanes = [n.lane for nodes in per_partition.values() for n in nodes] or [0]
    fig.update_layout(
        title=f"{title}: partition {first}",
        updatemenus=[
            {
                "buttons": buttons,
                "active": sorted(per_partition).index(first) if first in per_partition else 0,
                "x": 1.0,
                "xanchor": "right",
                "y": 1.02,
                "yanchor": "bottom",
            }
        ],
        xaxis={"title": "version (= batch + 1)", "dtick": 1},
        yaxis={"title": "committed chain (0) / orphans below", "range": [min(lanes) - 1, 0.8], "dtick": 1, "zeroline": False},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig
