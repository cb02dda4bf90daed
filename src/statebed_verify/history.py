"""The history of a chaos run: one JSON object per line, every operation and fault.

Jepsen's shape: each op has a `type` (what it is), `start`/`end` times (Unix seconds;
`end` null while it runs or when it never ended) and an `outcome`:

- `ok`: it happened and completed (a committed batch, a task attempt that succeeded, a
  fault that was delivered);
- `fail`: it certainly did not take effect (a task attempt Spark reports failed, a fault
  whose target was gone);
- `info`: unknown (a task attempt killed mid-commit, a driver that died mid-batch).

Op types: `fault` (id, kind, facts), `driver` (a driver process: pid, exit code),
`batch` (batch, status), `task-attempt` (batch, partition, version, checkpoint_id,
base_id, attempt, speculative, executor, host, outcome from Spark). Appends are one
write(2) each on an O_APPEND file, so the nemesis and the runner can share it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from statebed_base.errors import CorruptFileError
from statebed_base.jsonsafe import loads_strict

__all__ = ["History", "Op", "read_history"]

Outcome = Literal["ok", "fail", "info"]


@dataclass
class Op:
    type: str
    start: float
    end: float | None = None
    outcome: Outcome = "info"
    fields: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "start": round(self.start, 6),
            "end": None if self.end is None else round(self.end, 6),
            "outcome": self.outcome,
            **self.fields,
        }

    @staticmethod
    def from_json(doc: dict[str, Any]) -> Op:
        rest = {k: v for k, v in doc.items() if k not in ("type", "start", "end", "outcome")}
        return Op(
            str(doc["type"]), float(doc["start"]), None if doc.get("end") is None else float(doc["end"]), doc.get("outcome", "info"), rest
        )


class History:
    """Append-only JSONL at `path`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def append(self, op: Op) -> None:
        line = (json.dumps(op.to_json(), sort_keys=False, default=str) + "\n").encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)

    def record(self, type: str, outcome: Outcome, start: float, end: float | None = None, **fields: Any) -> Op:
        op = Op(type, start, time.time() if end is None else end, outcome, fields)
        self.append(op)
        return op

    def ops(self, type: str | None = None) -> list[Op]:
        return [op for op in read_history(self.path) if type in (None, op.type)]


def read_history(path: str | os.PathLike[str]) -> Iterator[Op]:
    """The ops of a history file in file order; a malformed line is a CorruptFileError naming it."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        return
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        doc = loads_strict(line, file=f"{p}:{n}", what="history line")
        if not isinstance(doc, dict) or "type" not in doc or "start" not in doc:
            raise CorruptFileError(f"{p}:{n}", "not a history op (needs type and start)")
        yield Op.from_json(doc)
