"""The report of a chaos matrix: the verdict table (fault × workload rows, one column per
format, coloured, each seed linking to its cell's report when the cell was kept), what each
cell actually observed (faults fired, speculative attempts, retries, reruns), wall time per
cell, the combinations skipped and how to replay the cells that are not valid."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from statebed_chaos.matrix_presets import FORMATS
from statebed_model.experimentdir import ExperimentDir
from statebed_verify import merge_verdicts

from . import html as h
from .records import MatrixRecords

__all__ = ["render_matrix"]

_COUNTS = ("speculative_attempts", "task_retries", "driver_restarts", "batch_reruns")
_COLORS = {"valid": "#1a7f37", "invalid": "#cf222e", "unknown": "#9a6700"}


def _cls(valid: Any) -> str:
    return h.VERDICT_CLASS.get(valid, "unknown") if isinstance(valid, (bool, str)) else "unknown"


def _link(run: dict[str, Any], links: dict[str, str]) -> str:
    label = f"s{run.get('seed')} {h.verdict_label(run.get('valid'))}"
    target = links.get(str(run.get("cell")))
    return f'<a href="{h.esc(target)}">{h.esc(label)}</a>' if target else h.esc(label)


def _verdict_table(runs: list[dict[str, Any]], skipped: list[dict[str, Any]], links: dict[str, str]) -> str:
    rows: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
    for r in runs:
        rows.setdefault((str(r.get("fault")), str(r.get("workload"))), {}).setdefault(str(r.get("format")), []).append(r)
    na = {(str(s.get("fault")), str(s.get("workload")), str(s.get("format"))): str(s.get("reason")) for s in skipped}
    for fault, workload, _fmt in na:
        rows.setdefault((fault, workload), {})
    present = {str(r.get("format")) for r in runs} | {format for _, _, format in na}
    formats = [*FORMATS, *sorted(present - set(FORMATS))]  # a record's older formats (`native`) keep their column
    out = []
    for (fault, workload), cols in rows.items():
        tds = [h.cell(fault), h.cell(workload)]
        for format in formats:
            mine = cols.get(format)
            if mine:
                merged = merge_verdicts(h.as_verdict(r.get("valid")) for r in mine)
                tds.append(f'<td class="{_cls(merged)}">' + "<br>".join(_link(r, links) for r in mine) + "</td>")
            elif (fault, workload, format) in na:
                tds.append(f'<td class="na" title="{h.esc(na[(fault, workload, format)])}">n/a</td>')
            else:
                tds.append("<td></td>")
        out.append(tds)
    return h.table(["fault", "workload", *formats], out, table_id="verdict-table", raw=True)


def _cells_table(runs: list[dict[str, Any]], links: dict[str, str]) -> str:
    rows = []
    for r in runs:
        obs = r.get("observed") or {}
        kinds = sorted({str(a.get("kind")) for a in r.get("anomalies") or [] if isinstance(a, dict)})
        report = f'<a href="{h.esc(links[str(r.get("cell"))])}">report</a>' if str(r.get("cell")) in links else "removed (valid)"
        rows.append(
            [
                h.cell(r.get("cell")),
                f'<td class="{_cls(r.get("valid"))}">{h.esc(h.verdict_label(r.get("valid")))}</td>',
                h.cell(", ".join(kinds)),
                h.cell(r.get("faults_fired")),
                *(h.cell(obs.get(k, "-")) for k in _COUNTS),
                h.cell(r.get("seconds", "-")),
                f"<td>{report}</td>",
            ]
        )
    headers = ["cell", "verdict", "anomalies", "faults fired", "speculative attempts", "task retries", "driver restarts", "batch reruns"]
    return h.table([*headers, "wall s", "report"], rows, table_id="cells", raw=True)


def _wall_figure(runs: list[dict[str, Any]]) -> go.Figure:
    labels = [h.verdict_label(r.get("valid")).lower() for r in runs]
    fig = go.Figure(
        go.Bar(
            x=[r.get("seconds") or 0 for r in runs],
            y=[str(r.get("cell")) for r in runs],
            orientation="h",
            marker={"color": [_COLORS.get(lab, _COLORS["unknown"]) for lab in labels]},
            text=labels,
            textposition="inside",
        )
    )
    fig.update_layout(title="Wall time per cell (colour: verdict)", xaxis_title="seconds", yaxis={"autorange": "reversed"})
    return fig


def _summary_line(s: dict[str, Any]) -> str:
    caught = {True: "caught", False: "NOT caught", None: "not in this selection"}.get(s.get("v1_caught"), "?")
    reasons = [str(r) for r in s.get("reasons") or []]  # why it fails (the matrix's own words), when it does
    return (
        f"{s.get('cells')} cells: {s.get('valid')} valid, {s.get('invalid')} invalid, {s.get('unknown')} unknown, in {s.get('seconds')} s; "
        f"every statebed V2 cell valid: {'yes' if s.get('v2_all_valid') else 'NO'}; V1 positive control {caught}"
        + (f"; fails because {'; '.join(reasons)}" if reasons else "")
        + _cell_time(s.get("cell_seconds"))
    )


def _cell_time(cell_seconds: Any) -> str:
    """The cells' own time, which a resumed matrix spreads over several invocations."""
    if not isinstance(cell_seconds, dict) or cell_seconds.get("median") is None:
        return ""
    return f". The cells took {cell_seconds.get('total')} s in all, {cell_seconds.get('median')} s the median cell"


def _links(rec: MatrixRecords, runs: list[dict[str, Any]], out: Path) -> dict[str, str]:
    """Cell name → an href to its report relative to the matrix report (`html.safe_href`: no
    directory name can make it a `javascript:` link), for every kept cell that has one."""
    links: dict[str, str] = {}
    for r in runs:
        target = ExperimentDir(str(r.get("run_dir") or "")).report
        href = h.safe_href(os.path.relpath(target, out.parent)) if r.get("run_dir") and target.exists() else None
        if href:
            links[str(r.get("cell"))] = href
    for d in rec.cells:  # a matrix in progress: the cells present so far
        report = ExperimentDir(d).report
        href = h.safe_href(os.path.relpath(report, out.parent)) if report.exists() else None
        if href:
            links.setdefault(d.name, href)
    return links


def _in_progress_runs(rec: MatrixRecords) -> list[dict[str, Any]]:
    runs = []
    for d in rec.cells:
        cell = ExperimentDir(d)
        v = cell.read_verdict() if cell.verdict.exists() else {"valid": "running"}
        runs.append(
            {
                "cell": d.name,
                "valid": v.get("valid"),
                "anomalies": v.get("anomalies") or [],
                "faults_fired": v.get("faults_fired"),
                "seconds": v.get("seconds"),
            }
        )
    return runs


def render_matrix(rec: MatrixRecords, out: Path, notes: list[str]) -> str:
    """The page of a matrix; `out` is where it will be written (links are relative to it)."""
    doc = rec.doc or {}
    s = doc.get("summary") or {}
    runs = [r for r in doc.get("runs") or [] if isinstance(r, dict)] if rec.doc is not None else _in_progress_runs(rec)
    links = _links(rec, runs, out)
    body = [
        "<p>Each cell is one chaos experiment: a fault kind injected into a streaming workload on a store format (statebed V2, "
        "the legacy V1 as the positive control, Spark's native store), judged against a fault-free baseline. The matrix passes when "
        "every statebed V2 cell is valid <i>and</i> the V1 control is caught (invalid): if V1 never failed, the faults would be too "
        "weak for a valid V2 to mean anything.</p>"
    ]
    if rec.in_progress is not None:
        body.append(f'<div class="progress" id="in-progress">{h.esc(rec.in_progress)}: {len(rec.cells)} cell(s) so far</div>')
    else:
        ok = s.get("exit_code") == 0
        body.append(
            f'<div class="verdict {"valid" if ok else "invalid"}" id="verdict">Matrix {h.esc(s.get("preset"))}: {"PASS" if ok else "FAIL"} — {h.esc(_summary_line(s))}</div>'
        )
    if rec.doc is not None:
        body.append(h.section("Verdicts: fault × workload × format", _verdict_table(runs, s.get("skipped") or [], links), ident="verdicts"))
    body.append(h.section("Cells: what each one observed", _cells_table(runs, links), ident="cells-section"))
    if runs:
        body.append(h.section("Wall time", h.figure(_wall_figure(runs), "wall", 160 + 28 * len(runs)), ident="wall-section"))
    failing = s.get("failing") or []
    if failing:
        text = "\n".join(f"{f.get('reproduce')}    # {f.get('cell')}: {h.verdict_label(f.get('valid'))}" for f in failing)
        body.append(h.section("Reproduce the cells that are not valid", h.code(text), ident="reproduce"))
    extra = [*(s.get("notes") or []), *notes]
    if extra:
        body.append(h.section("Notes", "<ul>" + "".join(f"<li>{h.esc(n)}</li>" for n in extra) + "</ul>", ident="notes"))
    return h.page(f"statebed chaos matrix: {s.get('preset', rec.root.name)}", str(rec.root), body, kind="matrix")
