"""The report of one run: a `statebed run` directory or a chaos experiment's directory.

Verdict first (with each anomaly as data and each scheduled fault's evidence), then what
happened over time (timeline, throughput and latency with the fault windows), latency
percentiles, the lineage graph, the fault-free baseline next to this run, the load section
when a load run wrote one, and the command that reproduces the run.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statebed_base.errors import StatebedError
from statebed_job.config import JobOptions
from statebed_model.experimentdir import ExperimentDir, control_file
from statebed_store import open_storage
from statebed_store.failpoint_control import Control
from statebed_store.formats import from_run_json
from statebed_store.inspection import list_checkpoint
from statebed_verify import Composite, merge_verdicts, summarise, verify_run
from statebed_verify.history import Op

from . import html as h
from .checkpoint_size import kept_per_batch, size_figure
from .lineage_graph import default_partition, lineage_figure, partition_nodes, uploaded_by
from .load_section import find_series, load_figure, read_series
from .records import ExperimentRecords, RunRecords
from .reproduce import run_argv
from .throughput import latency_rows, throughput_figure
from .timeline import describe, fault_windows, rows_height, start_of, timeline_figure

__all__ = ["RunView", "render_run", "view_of_experiment", "view_of_run"]

_ANOMALY_FIELDS = ("check", "kind", "operator", "partition", "version", "ids", "files", "keys", "batches", "records", "detail")


@dataclass
class RunView:
    """What a run report shows, whether it came from a plain run or a chaos experiment."""

    kind: str  # "run" or "experiment"
    title: str
    root: Path
    valid: Any  # True / False / "unknown"; None: not judged (in progress)
    run: RunRecords | None
    history: list[Op]
    reproduce: str
    reasons: list[str] = field(default_factory=list)
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)
    baseline: RunRecords | None = None
    baseline_equal: bool | None = None
    in_progress: str | None = None
    notes: list[str] = field(default_factory=list)


def view_of_run(rec: RunRecords, composite: Composite | None = None) -> RunView:
    """A plain run: judged here by both verifiers (unless it is still running or `composite` is given)."""
    view = RunView("run", f"statebed run: {rec.info.workload} on {rec.info.format}", rec.root, None, rec, rec.ops, _run_command(rec))
    view.in_progress, view.notes = rec.in_progress, list(rec.notes)
    if rec.in_progress is not None and composite is None:
        view.reasons.append("not judged: the run is still in progress")
        return view
    composite = composite if composite is not None else verify_run(rec.root)
    view.valid = composite.valid
    view.checks = summarise(composite)
    view.anomalies = [{"check": name, **a.to_json()} for name, r in composite.reports.items() for a in r.anomalies]
    view.reasons = [f"{name}: {n}" for name, r in composite.reports.items() for n in r.notes][:20]
    if rec.load_verdict is not None:  # a load run's verdict also counts every acknowledged record
        view.valid = rec.load_verdict.get("valid", "unknown")
        view.checks = rec.load_verdict.get("checks") or view.checks
        view.reasons = [str(r) for r in rec.load_verdict.get("reasons") or []] + view.reasons
    return view


def view_of_experiment(rec: ExperimentRecords) -> RunView:
    """A chaos experiment: its verdict.json says what was judged; the records show why."""
    v = rec.verdict or {}
    name = str(rec.experiment.get("name", rec.root.name))
    seed = v.get("seed", rec.experiment.get("seed"))
    reproduce = str(v.get("reproduce") or ExperimentDir(rec.root).reproduce(seed))
    view = RunView(
        "experiment",
        f"chaos experiment: {name}",
        rec.root,
        v.get("valid") if rec.verdict else None,
        rec.faulted,
        rec.faulted.ops if rec.faulted else rec.history,
        reproduce,
    )
    view.reasons = [str(r) for r in v.get("reasons") or []]
    view.anomalies = [a for a in v.get("anomalies") or [] if isinstance(a, dict)]
    view.faults = [f for f in v.get("faults") or [] if isinstance(f, dict)]
    view.checks = v.get("checks") or {}
    view.baseline, view.baseline_equal = rec.baseline, v.get("baseline_equal")
    view.in_progress, view.notes = rec.in_progress, [*rec.notes, *(rec.faulted.notes if rec.faulted else [])]
    if rec.in_progress is not None:
        view.reasons.insert(0, "not judged yet: the experiment is still in progress")
    return view


def _run_command(rec: RunRecords) -> str:
    """The `statebed run` line that replays this run (same seed, same sizes) into a new directory."""
    known = {f.name for f in dataclasses.fields(JobOptions)}
    saved = from_run_json(rec.info.params)
    params = {"workload": rec.info.workload, "format": rec.info.format, **{k: v for k, v in saved.items() if k in known}}
    try:
        argv = run_argv(JobOptions(**params))
    except (TypeError, ValueError, StatebedError) as e:  # a run.json written by hand or by another version
        return shlex.join(["statebed", "run", "--run-dir", f"{rec.root}-replay"]) + f"  # the saved parameters do not replay: {e}"
    return shlex.join(["statebed", "run", "--run-dir", f"{rec.root}-replay", *argv])


# -- sections --------------------------------------------------------------------------------


_INTRO = {
    "run": (
        "statebed ran a Spark Structured Streaming job whose state lives in the store under test, then judged it: "
        "<b>lineage</b> checks that the committed checkpoint is one linear, loadable history of (version, id) files; "
        "<b>state</b> checks that the final state is exactly what the committed input must produce."
    ),
    "experiment": (
        "A chaos experiment runs the same streaming job twice with the same seed and input: once without faults (the "
        "<b>baseline</b>) and once while the faults below are injected. The faulted run is valid only if every check "
        "passes (lineage, state, attempts: every file traced to the task attempt that wrote it; baseline: the same "
        "final state) <i>and</i> every fault provably fired; a fault without proof makes it unknown, never valid."
    ),
}


def _what_ran(view: RunView) -> str:
    if view.run is None:
        return ""
    p = view.run.info.params
    stores = {"v2": "statebed, checkpoint format V2", "v1": "statebed, legacy format V1 (the positive control)"}
    rows: list[list[Any]] = [
        ["workload", view.run.info.workload],
        ["store", stores.get(view.run.info.format, "Spark's own RocksDB store (V2)")],
        ["batches × records", f"{p.get('batches')} × {p.get('rows_per_batch')}"],
        ["partitions", view.run.info.partitions],
        ["cluster", f"{p.get('cluster')}" + (f", {p.get('workers')} workers" if p.get("cluster") == "standalone" else "")],
        ["seed", p.get("seed")],
    ]
    return h.table(["what ran", ""], rows, table_id="what-ran")


def _verdict(view: RunView) -> str:
    parts = [f"<p>{_INTRO[view.kind]}</p>"]
    if view.in_progress is not None:
        parts.append(f'<div class="progress" id="in-progress">{h.esc(view.in_progress)}</div>')
    if view.valid is None:
        parts.append('<div class="verdict unknown" id="verdict">Verdict: not judged yet</div>')
    else:
        counts = f"{len(view.anomalies)} anomal{'y' if len(view.anomalies) == 1 else 'ies'}"
        fired = ""
        if view.faults:
            fired = f"; faults fired {sum(1 for f in view.faults if f.get('fired') is True)} of {len(view.faults)}"
        parts.append(
            f'<div class="verdict {h.VERDICT_CLASS.get(view.valid, "unknown")}" id="verdict">Verdict: {h.esc(h.verdict_label(view.valid))}'
            f" — {counts}{fired}</div>"
        )
    if view.reasons:
        parts.append("<ul>" + "".join(f"<li>{h.esc(r)}</li>" for r in view.reasons) + "</ul>")
    if view.checks:
        rows = [
            [name, h.verdict_label(c.get("valid")), _count(c.get("anomalies")), c.get("kinds") or c.get("error") or ""]
            for name, c in view.checks.items()
        ]
        parts.append(h.table(["check", "verdict", "anomalies", "kinds"], rows, table_id="checks"))
    parts.append(_what_ran(view))
    if view.baseline_equal is not None:
        parts.append(f"<p>Final state equal to the fault-free baseline's: <b>{'yes' if view.baseline_equal else 'NO'}</b></p>")
    return h.section("Verdict", "".join(parts), ident="verdict-section")


def _count(value: Any) -> Any:
    return len(value) if isinstance(value, list) else "-" if value is None else value


def _anomalies(view: RunView) -> str:
    if not view.anomalies:
        body = '<p id="anomalies">No anomalies.</p>'
    else:
        fields = [k for k in _ANOMALY_FIELDS if k in ("check", "kind") or any(a.get(k) not in (None, [], "") for a in view.anomalies)]
        rows = [[a.get(k) if a.get(k) not in (None, []) else "" for k in fields] for a in view.anomalies]
        body = h.table(fields, rows, table_id="anomalies")
    return h.section(f"Anomalies ({len(view.anomalies)})", body, ident="anomalies-section")


def _faults(view: RunView, t0: float | None) -> str:
    if not view.faults and not any(op.type == "fault" for op in view.history):
        return ""
    windows = {w.id: w for w in fault_windows(view.history)}
    rows = []
    # without a verdict's evidence (a run in progress, a load run) the history's faults, proof unknown yet
    faults = view.faults or [{"id": w.id, "kind": w.kind, "fired": "not judged", "detail": f"inject {w.outcome}"} for w in windows.values()]
    for f in faults:
        w = windows.get(str(f.get("id")))
        when = "-" if w is None or t0 is None else f"{w.start - t0:.2f} s → {w.end - t0:.2f} s"
        proof = f"<details><summary>{len(f.get('proof') or [])} fact(s)</summary>{h.code(_pretty(f.get('proof')))}</details>"
        rows.append(
            [
                h.cell(f.get("id")),
                h.cell(f.get("kind")),
                h.cell(f.get("at")),
                h.cell(f.get("fired")),
                h.cell(when),
                h.cell(f.get("detail")),
                f"<td>{proof}</td>",
            ]
        )
    body = h.table(
        ["fault", "kind", "scheduled at", "fired", "window (since start)", "evidence", "proof"], rows, table_id="faults", raw=True
    )
    return h.section("Faults and their evidence", body, ident="faults-section")


def _pretty(doc: Any) -> str:
    return json.dumps(doc, indent=1, default=str, ensure_ascii=False)


def _timeline(view: RunView, t0: float) -> str:
    windows = fault_windows(view.history)
    fig = timeline_figure(view.history, windows, t0)
    body = h.figure(fig, "timeline", rows_height(view.history))
    if windows:
        rows = [list(d.values()) for d in describe(windows, t0)]
        body += h.table(["fault", "kind", "injected at s", "until s", "healed", "outcome"], rows, table_id="fault-windows")
    return h.section("Timeline", body, ident="timeline-section")


def _throughput(view: RunView, t0: float) -> str:
    base = None
    if view.baseline is not None and (bt0 := start_of(view.baseline.ops)) is not None:
        base = (view.baseline.ops, bt0)
    assert view.run is not None
    if not any(op.type == "batch" for op in view.history):
        return h.section("Throughput and latency", '<p class="note">No batch has been committed.</p>', ident="throughput-section")
    fig = throughput_figure(view.history, t0, fault_windows(view.history), base)
    header, rows = latency_rows(view.run.timings, view.baseline.timings if view.baseline is not None else None)
    body = h.figure(fig, "throughput", 520) + "<h3>Latency percentiles (committed batches)</h3>" + h.table(header, rows, table_id="latency")
    return h.section("Throughput and latency", body, ident="throughput-section")


def _lineage(view: RunView) -> str:
    assert view.run is not None
    rec = view.run
    try:
        listing = list_checkpoint(open_storage(rec.run.checkpoint(rec.info)))
    except StatebedError as e:
        return h.section("Lineage", f'<p class="note">The checkpoint cannot be listed: {h.esc(e)}</p>', ident="lineage-section")
    stores = [s for s in listing["stores"] if s["operator"] == 0]
    if not stores:
        return h.section("Lineage", '<p class="note">No state files yet.</p>', ident="lineage-section")
    try:
        wrote = uploaded_by(Control(control_file(rec.root)).firings())
    except (StatebedError, OSError):
        wrote = frozenset()  # no firing log to read: writers are the attempts whose commit returned
    per = {int(s["partition"]): partition_nodes(s, rec.attempts, rec.ops, view.anomalies, wrote) for s in stores}
    marked = [p for p, nodes in sorted(per.items()) if any(n.anomalies for n in nodes)]
    first = marked[0] if marked else default_partition(stores, view.anomalies)
    fig = lineage_figure(per, first, f"Checkpoint lineage ({listing['format']})")
    lanes = min((n.lane for nodes in per.values() for n in nodes), default=0)
    note = (
        '<p class="note">Green: the committed chain; squares hold a snapshot; grey: files no commit names (orphans), labelled with the attempt '
        "that wrote them; orange: a V1 file written by more than one attempt (overwritten); a red ring: an anomaly names it. "
        "Pick a partition with the menu at the top right; hover a node for its id, lineage and writers.</p>"
    )
    return h.section("Lineage", note + h.figure(fig, "lineage", 380 + 60 * (-lanes)), ident="lineage-section")


def _checkpoint_size(view: RunView) -> str:
    """Files and bytes the stores keep after each maintenance pass; nothing when the run has no such records."""
    assert view.run is not None
    try:
        points = kept_per_batch(view.run.run.maintenance())
    except StatebedError as e:
        return h.section("Checkpoint size", f'<p class="note">{h.esc(e)}</p>', ident="checkpoint-size-section")
    if not points:
        return ""
    note = (
        '<p class="note">From the run\'s maintenance records (<code>maintenance.jsonl</code>): the state files, sidecars and SSTs '
        "every store holds after its pass, summed over the stores. The commit log (one object per batch, never cleaned) is not counted.</p>"
    )
    fig = size_figure(points, view.run.info.params.get("retain"))
    return h.section("Checkpoint size", note + h.figure(fig, "checkpoint-size", 520), ident="checkpoint-size-section")


def _summary(rec: RunRecords) -> dict[str, Any]:
    batches = [op for op in rec.ops if op.type == "batch" and op.fields.get("status") == "committed" and op.end]
    secs = [(op.end or op.start) - op.start for op in batches]
    records = sum(int(op.fields.get("records") or 0) for op in batches)
    wall = max(op.end or 0 for op in batches) - min(op.start for op in batches) if batches else 0.0
    return {
        "committed batches": len(batches),
        "records": records,
        "wall s (first batch start → last commit)": round(wall, 2),
        "records/s (in batches)": round(records / sum(secs), 1) if secs and sum(secs) > 0 else "-",
        "batch p50 s": round(statistics.median(secs), 3) if secs else "-",
        "batch max s": round(max(secs), 3) if secs else "-",
        "task attempts": sum(1 for op in rec.ops if op.type == "task-attempt"),
        "speculative attempts": sum(1 for op in rec.ops if op.type == "task-attempt" and op.fields.get("speculative")),
    }


def _baseline(view: RunView) -> str:
    if view.kind != "experiment":
        return ""
    if view.baseline is None:
        return h.section("Baseline", '<p class="note">No fault-free baseline run for this experiment.</p>', ident="baseline-section")
    assert view.run is not None
    mine, base = _summary(view.run), _summary(view.baseline)
    rows = [[k, mine[k], base[k]] for k in mine]
    verdicts = (view.checks.get("baseline") or {}).get("verdicts") or {}
    rows.append(
        [
            "verdict",
            h.verdict_label(view.valid),
            h.verdict_label(merge_verdicts(h.as_verdict(c.get("valid")) for c in verdicts.values()) if verdicts else "unknown"),
        ]
    )
    body = (
        h.table(["", "faulted run", "fault-free baseline"], rows, table_id="baseline")
        + f'<p class="note">Baseline: {h.esc(view.baseline.root)}</p>'
    )
    return h.section("Faulted run next to the fault-free baseline", body, ident="baseline-section")


def _load(view: RunView, t0: float | None) -> str:
    path = find_series(view.root, *([view.run.root] if view.run is not None else []))
    if path is None:
        return ""
    rows = read_series(path)
    if not rows:
        return h.section("Load", f'<p class="note">{h.esc(path)} has no rows yet.</p>', ident="load-section")
    start = t0 if t0 is not None else float(rows[0]["t"])
    fig = load_figure(rows, start, fault_windows(view.history))
    return h.section("Load", h.figure(fig, "load", 640) + f'<p class="note">From {h.esc(path)}</p>', ident="load-section")


def render_run(view: RunView) -> str:
    """The page of one run or experiment."""
    t0 = start_of(view.history)
    body = [_verdict(view), _anomalies(view), _faults(view, t0)]
    if view.run is not None and t0 is not None:
        body += [_timeline(view, t0), _throughput(view, t0)]
    if view.run is not None:
        body += [_lineage(view), _checkpoint_size(view)]
    body += [_baseline(view), _load(view, t0)]
    again = "same seed, same input, same faults" if view.kind == "experiment" else "same seed, same input, into a new directory"
    body.append(h.section("Reproduce", f"<p>This command runs it again ({again}):</p>" + h.code(view.reproduce), ident="reproduce"))
    if view.notes:
        body.append(h.section("Notes", "<ul>" + "".join(f"<li>{h.esc(n)}</li>" for n in view.notes) + "</ul>", ident="notes"))
    return h.page(view.title, str(view.root), body, kind=view.kind)
