"""Upload latency per kind of file (changelog, snapshot, commit log), and hedges sent and won.

A process records each upload as it finishes; whoever reports (a task, the driver) takes what
was recorded since the last take. Samples stay raw (milliseconds) so a run's percentiles can
be computed over all its batches: percentiles of percentiles would be wrong.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from ..naming import CHANGELOG, COMMITS_DIR, CRC_SUFFIX, SNAPSHOT, SST_DIR

__all__ = ["KINDS", "UploadStats", "kind_of", "merge_uploads", "percentile", "summarize_uploads"]

KINDS = ("changelog", "snapshot", "commit_log")
MAX_SAMPLES = 4096  # per kind between takes: a process nobody takes from must not grow without bound
QUANTILES = (("p50_ms", 50.0), ("p90_ms", 90.0), ("p99_ms", 99.0), ("p999_ms", 99.9))


def kind_of(path: str) -> str | None:
    """Which kind of upload a checkpoint-relative path is (a `.crc` sidecar counts as its file); None: not tracked."""
    if path.startswith(f"{COMMITS_DIR}/"):
        return "commit_log"
    name = path.rsplit("/", 1)[-1].removesuffix(CRC_SUFFIX)
    if name.endswith(f".{CHANGELOG}"):
        return "changelog"
    if name.endswith(f".{SNAPSHOT}") or f"/{SST_DIR}/" in f"/{path}":
        return "snapshot"
    return None


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered) / 100.0 - 1e-9))  # 99.9 % of 1000 is rank 999, not 1000
    return float(ordered[rank - 1])


class UploadStats:
    """Thread-safe: uploads finish on pool threads while a task or the driver takes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[str, dict[str, Any]] = {}

    def _part(self, kind: str) -> dict[str, Any]:
        return self._parts.setdefault(kind, {"ms": deque(maxlen=MAX_SAMPLES), "hedges_sent": 0, "hedges_won": 0})

    def record(self, kind: str, seconds: float, *, hedged: bool, won: bool) -> None:
        with self._lock:
            part = self._part(kind)
            part["ms"].append(round(seconds * 1000.0, 3))
            part["hedges_sent"] += int(hedged)
            part["hedges_won"] += int(won)

    def take(self) -> dict[str, dict[str, Any]]:
        """Everything recorded since the last take: {kind: {"ms": [...], "hedges_sent", "hedges_won"}}."""
        with self._lock:
            parts, self._parts = self._parts, {}
        return {kind: {**p, "ms": list(p["ms"])} for kind, p in parts.items()}


def merge_uploads(parts: Iterable[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Several takes (the tasks' and the driver's) as one."""
    out: dict[str, dict[str, Any]] = {}
    for part in parts:
        for kind, p in part.items():
            acc = out.setdefault(kind, {"ms": [], "hedges_sent": 0, "hedges_won": 0})
            acc["ms"] += list(p.get("ms", []))
            acc["hedges_sent"] += int(p.get("hedges_sent", 0))
            acc["hedges_won"] += int(p.get("hedges_won", 0))
    return out


def summarize_uploads(parts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind: n, p50/p90/p99/p999/max in ms, hedges sent and won, and the raw samples (`ms`)."""
    out: dict[str, dict[str, Any]] = {}
    for kind, p in sorted(parts.items()):
        ms = list(p["ms"])
        row: dict[str, Any] = {"n": len(ms)}
        for name, q in QUANTILES:
            row[name] = percentile(ms, q) if ms else None
        row["max_ms"] = max(ms) if ms else None
        row.update(hedges_sent=p["hedges_sent"], hedges_won=p["hedges_won"], ms=ms)
        out[kind] = row
    return out
