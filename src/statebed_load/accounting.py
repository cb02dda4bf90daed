"""Every acknowledged record against the committed batches, and ingest→commit latency.

Ground truth is the ingest service's acknowledgement log (`IngestSource.acks`), never what
the job wrote: a record is committed when a committed batch (the commit log) read its file
(Spark's file source log). After a drained run, an acknowledged record no committed batch
read is lost; one read by two committed batches (or an id acknowledged twice) is doubled;
an id a client was answered 200 for that is not in the ack log is a false ack. Latency of a
record: its batch's `committed_at` (the driver's timing record) minus its ack's `ingested_at`.
"""

from __future__ import annotations

import calendar
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from statebed_base.errors import CorruptFileError
from statebed_model.rundir import RunDir
from statebed_model.sources import Ack, IngestSource, batch_reads

__all__ = ["Accounting", "account", "percentiles", "summary_latency"]


@dataclass
class Accounting:
    acknowledged: int = 0
    committed: int = 0  # records in committed batches (acknowledged or not)
    lost: list[int] = field(default_factory=list)  # acknowledged ids no committed batch read
    duplicated: list[int] = field(default_factory=list)
    false_acks: list[int] = field(default_factory=list)  # answered 200 to a client, absent from the ack log
    unacknowledged_committed: int = 0  # landed without an ack (the service died in between), then committed
    # (commit time, ingest time, records) per acknowledged file a committed batch read
    latencies: list[tuple[float, float, int]] = field(default_factory=list)
    ack_times: list[tuple[float, int]] = field(default_factory=list)  # (ingested_at, records) per ack


def _epoch(iso: str) -> float:
    """`2026-11-23T18:00:14.580355Z` as epoch seconds."""
    whole, _, frac = iso.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + (float(f"0.{frac}") if frac else 0.0)


def account(run: RunDir, source: IngestSource, client_logs: list[Path] = []) -> Accounting:  # noqa: B006 (never mutated)
    info = run.read_info()
    committed = run.committed_batches(info)
    read = batch_reads(run.query_storage(info))
    readers: dict[int, list[int]] = {}  # seq -> committed batches that read its file
    for b in committed:
        for name in read.get(b, []):
            stem = name.removesuffix(".parquet")
            if stem.isdigit():
                readers.setdefault(int(stem), []).append(b)
    commit_at = _commit_times(run)
    acks = source.acks()
    out = Accounting(acknowledged=sum(a.records for a in acks))
    ids = Counter(i for a in acks for i in a.ids)
    out.duplicated = sorted(i for i, n in ids.items() if n > 1)
    by_seq: dict[int, Ack] = {a.seq: a for a in acks}
    for a in acks:
        batches = readers.get(a.seq, [])
        at = _epoch(a.ingested_at)
        out.ack_times.append((at, a.records))
        if not batches:
            out.lost += a.ids
        elif len(batches) > 1:
            out.duplicated += a.ids
        if batches and batches[0] in commit_at:
            out.latencies.append((commit_at[batches[0]], at, a.records))
    unacked = [seq for seq in readers if seq not in by_seq]
    if unacked:
        out.unacknowledged_committed = source.records([IngestSource.data_name(s).removeprefix("data/") for s in unacked]).num_rows
    out.committed = sum(by_seq[s].records for s in readers if s in by_seq) + out.unacknowledged_committed
    out.false_acks = sorted(_client_acked(client_logs) - set(ids))
    return out


def _commit_times(run: RunDir) -> dict[int, float]:
    """Batch -> when it committed (the first committed timing record of the batch)."""
    out: dict[int, float] = {}
    for t in run.timings():
        if t.get("status") == "committed" and isinstance(t.get("committed_at"), int | float):
            out.setdefault(int(t["batch"]), float(t["committed_at"]))
    return out


def _client_acked(paths: list[Path]) -> set[int]:
    """Every id clients were answered 200 for (their `--acked-log` lines)."""
    out: set[int] = set()
    for p in paths:
        if not p.exists():
            continue
        lines = p.read_text().splitlines()
        for n, line in enumerate(lines, 1):
            try:
                out.update(int(i) for i in json.loads(line)["ids"])
            except (ValueError, KeyError, TypeError):
                if n < len(lines):  # a client killed mid-write leaves at most a partial last line
                    raise CorruptFileError(str(p), f"line {n} is not an acknowledged {{seq, ids}}") from None
    return out


def percentiles(samples: list[tuple[float, int]]) -> dict[str, float | None]:
    """Weighted p50/p95/p99 of (value, weight) samples, in the samples' unit; None when empty."""
    s = sorted(samples)
    total = sum(w for _, w in s)
    out: dict[str, float | None] = {}
    for name, q in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99)):
        if not total:
            out[name] = None
            continue
        need, acc = q * total, 0
        for v, w in s:
            acc += w
            if acc >= need:
                out[name] = round(v, 1)
                break
    return out


def summary_latency(acc: Accounting) -> dict[str, float | None]:
    """Ingest→commit percentiles over every committed acknowledged record, in ms."""
    return percentiles([((c - i) * 1000, n) for c, i, n in acc.latencies])
