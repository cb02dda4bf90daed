"""After a run: add to its history what the run's own records say happened, so one file tells
the story: every batch run (from the driver's timing records), every task attempt (statebed's
attempt records joined with Spark's event log: speculative flag, executor, Spark's outcome;
native runs from the event log alone). Fault and driver ops are recorded live.
"""

from __future__ import annotations

from typing import Any

from statebed_base.errors import StatebedError
from statebed_model.attempts import AttemptRecord, read_attempts
from statebed_model.eventlog import EventLog, TaskAttempt, read_event_log
from statebed_model.rundir import RunDir

from .history import History, Op, Outcome

__all__ = ["add_run_ops"]

_OK = {"committed": "ok", "re-emitted": "ok"}


def add_run_ops(history: History, run: RunDir) -> list[str]:
    """Append batch and task-attempt ops; returns notes on what could not be read."""
    notes: list[str] = []
    _batches(history, run, notes)
    try:
        log = read_event_log(run.events)
    except StatebedError as e:
        notes.append(f"no event log: {e}")
        log = EventLog()
    if run.read_info().format.native:
        for t in log.tasks:
            _op(history, "task-attempt", _spark_outcome(t), t.launch_ms / 1000, _end(t), **_spark_fields(t))
        return notes
    spark: dict[tuple[Any, ...], TaskAttempt] = {(t.batch, t.stage, t.task_id): t for t in log.tasks}
    for r in read_attempts(run.root):
        match = spark.get((r.batch, r.stage, r.task_attempt_id))
        fields: dict[str, Any] = {
            "batch": r.batch,
            "partition": r.partition,
            "attempt": r.attempt,
            "version": r.version,
            "checkpoint_id": r.checkpoint_id,
            "base_id": r.base_id,
            "store_outcome": r.outcome,
            "host": r.host,
            "pid": r.pid,
            "stage": r.stage,
            "task_attempt_id": r.task_attempt_id,
            "error": r.error,
        }
        if match is not None:
            fields.update(speculative=match.speculative, executor=match.executor, spark_outcome=match.outcome)
        _op(history, "task-attempt", _outcome(r, match), r.start, r.end, **fields)
    return notes


def _batches(history: History, run: RunDir, notes: list[str]) -> None:
    try:
        names = sorted(f.name for f in run.storage.list("timings") if f.name.endswith(".json"))
        timings = [(n, t) for n, t in zip(names, run.timings())]
    except StatebedError as e:
        notes.append(f"timing records unreadable: {e}")
        return
    for name, t in timings:
        end = int(name.removesuffix(".json").rsplit("-", 1)[1]) / 1e9
        status = str(t.get("status"))
        fields = {k: t[k] for k in ("batch", "status", "records", "attempts") if k in t}
        _op(history, "batch", "ok" if status in _OK else "info", end - float(t.get("seconds", 0.0)), end, **fields)


def _op(history: History, type: str, outcome: Outcome, start: float, end: float | None, **fields: Any) -> None:
    history.append(Op(type, start, end, outcome, fields))


def _outcome(r: AttemptRecord, t: TaskAttempt | None) -> Outcome:
    if t is not None and t.outcome is not None:
        return _spark_outcome(t)
    return "ok" if r.outcome == "ok" else "fail" if r.outcome == "fail" else "info"


def _spark_outcome(t: TaskAttempt) -> Outcome:
    return "info" if t.outcome is None else "ok" if t.succeeded else "fail"


def _end(t: TaskAttempt) -> float | None:
    return None if t.finish_ms is None else t.finish_ms / 1000


def _spark_fields(t: TaskAttempt) -> dict[str, Any]:
    return {
        "batch": t.batch,
        "partition": t.index,
        "attempt": t.attempt,
        "stage": t.stage,
        "task_attempt_id": t.task_id,
        "speculative": t.speculative,
        "executor": t.executor,
        "host": t.host,
        "spark_outcome": t.outcome,
        "app": t.app,
    }
