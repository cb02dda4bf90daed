"""Per-attempt records: what each statebed task attempt did, in its own words.

    <run>/attempts/b<batch>-p<partition>-a<attempt>-t<taskAttemptId>-pid<pid>.json

(Spark numbers task attempts per application, so the pid keeps a resumed run's records
apart from those of the driver that died; outside Spark, `...-pid<pid>-<start µs>.json`.)

A task writes its record before it loads (outcome "info": it may still run, or it died
without a word), again once loaded with the checkpoint id it is about to write (V2), and
atomically rewrites it when it ends: "ok" after its commit, "fail" with the error's first
line. The record names the checkpoint id the attempt wrote, so every file
in storage can be attributed to an attempt and exactly one attempt per (batch, partition)
matches the commit log. Whether an attempt was speculative is Spark's knowledge: see the
event log (`eventlog.py`). Native runs have no records. Records live on local disk (the
run's `local` side, next to Spark's own files); writing one never fails the task.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statebed_base.errors import CorruptFileError, StatebedError
from statebed_base.jsonsafe import loads_strict
from statebed_base.localfs import atomic_write
from statebed_base.log import get_logger, kv

__all__ = ["ATTEMPTS_DIR", "OUTCOMES", "AttemptRecord", "read_attempts", "write_end", "write_loaded", "write_start"]

log = get_logger("attempts")
ATTEMPTS_DIR = "attempts"  # under the run's local root
OUTCOMES = ("info", "ok", "fail")


@dataclass(frozen=True)
class AttemptRecord:
    batch: int
    partition: int
    attempt: int  # Spark's attemptNumber
    stage: int | None
    task_attempt_id: int | None  # Spark's taskAttemptId: unique within the application
    host: str
    pid: int
    start: float  # epoch seconds
    end: float | None = None
    version: int | None = None  # the version the attempt commits (batch + 1)
    checkpoint_id: str | None = None  # the id it writes, known once loaded (None for V1 or before its load)
    base_id: str | None = None
    outcome: str = "info"
    error: str | None = None

    @property
    def file_name(self) -> str:
        # Outside Spark (no task id) the start time keeps a rerun's record apart from the first's.
        task = f"t{self.task_attempt_id}-pid{self.pid}" if self.task_attempt_id is not None else f"pid{self.pid}-{int(self.start * 1e6)}"
        return f"b{self.batch}-p{self.partition}-a{self.attempt}-{task}.json"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def write_start(
    directory: Path,
    *,
    batch: int,
    partition: int,
    attempt: int,
    stage: int | None = None,
    task_attempt_id: int | None = None,
    version: int | None = None,
    base_id: str | None = None,
) -> AttemptRecord:
    """Record that an attempt began (outcome "info"); returns the record for `write_end`."""
    host = os.environ.get("SPARK_LOCAL_IP") or socket.gethostname()
    rec = AttemptRecord(
        batch, partition, attempt, stage, task_attempt_id, host, os.getpid(), round(time.time(), 6), None, version, None, base_id
    )
    _write(directory, rec)
    return rec


def write_loaded(directory: Path, started: AttemptRecord, checkpoint_id: str) -> AttemptRecord:
    """Record the id the attempt is about to write: an attempt killed after its upload still owns its files."""
    rec = dataclasses.replace(started, checkpoint_id=checkpoint_id)
    _write(directory, rec)
    return rec


def write_end(
    directory: Path, started: AttemptRecord, outcome: str, *, checkpoint_id: str | None = None, error: BaseException | None = None
) -> AttemptRecord:
    """Rewrite the attempt's record with how it ended: "ok" or "fail" (with the error's first line)."""
    if outcome not in OUTCOMES[1:]:
        raise ValueError(f"an attempt ends ok or fail, not {outcome!r}")
    rec = dataclasses.replace(
        started, end=round(time.time(), 6), outcome=outcome, checkpoint_id=checkpoint_id, error=None if error is None else _one_line(error)
    )
    _write(directory, rec)
    return rec


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def _write(directory: Path, rec: AttemptRecord) -> None:
    """Publish the record atomically; a failure is logged, never raised (a record must not fail its task)."""
    try:
        atomic_write(directory / rec.file_name, (json.dumps(rec.to_json(), sort_keys=True) + "\n").encode())
    except (OSError, StatebedError) as e:
        log.warning("cannot write an attempt record", extra=kv(file=str(directory / rec.file_name), error=str(e)))


def read_attempts(run_root: Path) -> list[AttemptRecord]:
    """Every attempt record of a run, by (batch, partition, start); [] when there are none.

    Raises CorruptFileError naming a record that is not one (records are written atomically)."""
    directory = Path(run_root) / ATTEMPTS_DIR
    if not directory.is_dir():
        return []
    records = [_read(f) for f in directory.glob("*.json")]
    return sorted(records, key=lambda r: (r.batch, r.partition, r.start))


def _read(path: Path) -> AttemptRecord:
    doc = loads_strict(path.read_bytes(), file=str(path), what="attempt record")
    if not isinstance(doc, dict):
        raise CorruptFileError(str(path), "an attempt record must be a JSON object")
    try:
        rec = AttemptRecord(**doc)
    except TypeError as e:
        raise CorruptFileError(str(path), f"unexpected or missing fields ({e})") from None
    if rec.outcome not in OUTCOMES or not all(isinstance(v, int) for v in (rec.batch, rec.partition, rec.attempt)):
        raise CorruptFileError(str(path), f"not an attempt record (outcome {rec.outcome!r})")
    return rec
