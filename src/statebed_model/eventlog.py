"""Spark's event log, read without Spark: task attempts, executors, jobs and stages.

A fault counts only if it provably fired, and the proof is Spark's own record: which
attempt of which task ran on which executor, whether it was a speculative copy, how it
ended. The job writes the log uncompressed (`spark.eventLog.compress=false`) under
`<run>/events/`: one JSON object per line, one file per application (`app-...` on a
standalone cluster, `local-...` in local mode), suffixed `.inprogress` while the driver
runs. A log being written may end in a partial line: it is skipped and the file is named
in `EventLog.partial`. Spark buffers the log and flushes it at job, stage and executor
events, so a running task may not be in it yet: wait on the run's own signals, read this
afterwards.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from statebed_base.errors import CorruptFileError, MissingFileError, UsageError
from statebed_store.naming import CRC_SUFFIX

__all__ = ["EventLog", "Executor", "Job", "QueryProgress", "Stage", "TaskAttempt", "read_event_log"]

BATCH_PROPERTY = "streaming.sql.batchId"  # set by Structured Streaming on every job of a micro-batch
_PROGRESS_EVENT = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
_COMPRESSED = (".lz4", ".lzf", ".snappy", ".zstd")


@dataclass(frozen=True)
class TaskAttempt:
    """One attempt of one task; `outcome` is Spark's end reason, None if no end was logged."""

    app: str
    task_id: int
    stage: int
    stage_attempt: int
    index: int  # the partition
    attempt: int
    executor: str
    host: str
    speculative: bool
    launch_ms: int
    finish_ms: int | None = None
    outcome: str | None = None  # "Success", "TaskKilled", "ExecutorLostFailure", "FetchFailed", ...
    batch: int | None = None  # the streaming micro-batch of its job, if any
    error: str | None = None  # an exception's class and first line, when `outcome` is ExceptionFailure

    @property
    def succeeded(self) -> bool:
        return self.outcome == "Success"

    @property
    def task(self) -> tuple[str, int, int, int]:
        """What the attempts of one task share: app, stage, stage attempt, index."""
        return (self.app, self.stage, self.stage_attempt, self.index)


@dataclass(frozen=True)
class Executor:
    app: str
    executor: str
    host: str
    added_ms: int
    removed_ms: int | None = None
    removed_reason: str | None = None


@dataclass(frozen=True)
class Job:
    app: str
    job: int
    stages: tuple[int, ...]
    batch: int | None
    submit_ms: int
    end_ms: int | None = None
    result: str | None = None  # "JobSucceeded", "JobFailed"; None if no end was logged


@dataclass(frozen=True)
class Stage:
    app: str
    stage: int
    attempt: int
    name: str
    tasks: int
    batch: int | None = None
    completed_ms: int | None = None
    failure: str | None = None


@dataclass(frozen=True)
class QueryProgress:
    """One micro-batch's progress as the streaming query reported it; `metrics` sums each custom
    metric of its state operators (e.g. `rocksdbNumSnapshotsAutoRepaired`)."""

    app: str
    batch: int
    metrics: dict[str, int]


@dataclass
class EventLog:
    tasks: list[TaskAttempt] = field(default_factory=list)
    executors: list[Executor] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)  # files whose last line was incomplete
    properties: dict[str, dict[str, str]] = field(default_factory=dict)  # app -> the Spark properties it ran with
    progress: list[QueryProgress] = field(default_factory=list)  # every query progress, in log order

    def attempts_of(self, task: tuple[str, int, int, int]) -> list[TaskAttempt]:
        """Every attempt of one task (see `TaskAttempt.task`), in launch order."""
        return sorted((t for t in self.tasks if t.task == task), key=lambda t: (t.launch_ms, t.attempt))

    def executor(self, executor: str, app: str | None = None) -> Executor:
        found = [e for e in self.executors if e.executor == executor and app in (None, e.app)]
        if len(found) != 1:
            raise UsageError(f"executor {executor!r} is {'ambiguous (name the app)' if found else 'not in the event log'}")
        return found[0]

    def speculative_successes(self, original_executor: str | None = None, app: str | None = None) -> list[tuple[TaskAttempt, TaskAttempt]]:
        """(original, copy) pairs: a speculative copy that succeeded, with each non-speculative
        attempt of the same task launched before it, optionally only originals on one executor."""
        out = []
        for copy in self.tasks:
            if not (copy.speculative and copy.succeeded) or app not in (None, copy.app):
                continue
            for orig in self.attempts_of(copy.task):
                if not orig.speculative and orig.launch_ms <= copy.launch_ms and original_executor in (None, orig.executor):
                    out.append((orig, copy))
        return out

    def copies_during(self, executor: str, app: str, start_ms: float, end_ms: float) -> list[tuple[TaskAttempt, TaskAttempt]]:
        """(original, copy) pairs a window on one executor (a pause) can be credited with: a
        speculative copy launched inside [start_ms, end_ms] of a task whose non-speculative
        attempt was running on `executor` when the window began (launched at or before
        start_ms, not ended before it). A copy launched after the window, of a task that ran
        elsewhere, or whose original started only after the window began, is not its doing."""
        out = []
        for copy in self.tasks:
            if not copy.speculative or copy.app != app or not start_ms <= copy.launch_ms <= end_ms:
                continue
            for orig in self.attempts_of(copy.task):
                running = orig.launch_ms <= start_ms and (orig.finish_ms is None or orig.finish_ms >= start_ms)
                if not orig.speculative and orig.executor == executor and running:
                    out.append((orig, copy))
                    break
        return out


def read_event_log(path: str | os.PathLike[str]) -> EventLog:
    """Read a run's `events/` directory (every application in it) or one event log file."""
    p = Path(path)
    if not p.exists():
        raise MissingFileError(str(p), "no such event log file or directory")
    reader = _Reader()
    for f in _log_files(p):
        reader.read_file(f)
    return reader.finish()


def apps_of(path: str | os.PathLike[str]) -> set[str]:
    """The application ids whose event logs are in `path` (a file or the directory): the
    applications of one run, e.g. to tell its executors from another's on a shared cluster."""
    p = Path(path)
    return {_app_of(f) for f in _log_files(p)} if p.exists() else set()


def _log_files(p: Path) -> Iterator[Path]:
    """Plain event logs, oldest application first; rolling logs (`eventlog_v2_*/events_<n>_*`) in order."""
    if p.is_file():
        yield p
        return
    for f in sorted(p.iterdir()):
        if f.name.startswith(".") or f.name.endswith(CRC_SUFFIX):
            continue  # Hadoop's checksum sidecars
        if f.is_dir() and f.name.startswith("eventlog_v2_"):
            yield from sorted(f.glob("events_*"), key=lambda x: int(x.name.split("_")[1]))
        elif f.is_file():
            yield f


def _app_of(f: Path) -> str:
    name = f.parent.name[len("eventlog_v2_") :] if f.parent.name.startswith("eventlog_v2_") else f.name
    return name.removesuffix(".inprogress")


class _Reader:
    """Accumulates one or more files' events; `finish` links tasks and stages to batches."""

    def __init__(self) -> None:
        self.log = EventLog()
        self.open: dict[tuple[str, int], TaskAttempt] = {}
        self.executors: dict[tuple[str, str], Executor] = {}
        self.jobs: dict[tuple[str, int], Job] = {}
        self.stages: dict[tuple[str, int, int], Stage] = {}

    def read_file(self, f: Path) -> None:
        if f.name.endswith(_COMPRESSED) or f.name.removesuffix(".inprogress").endswith(_COMPRESSED):
            raise CorruptFileError(str(f), "compressed event log: run with spark.eventLog.compress=false")
        app = _app_of(f)
        for n, event in _events(f, self.log.partial):
            try:
                self.handle(app, event)
            except (KeyError, TypeError, ValueError) as e:
                raise CorruptFileError(str(f), f"line {n}: {event.get('Event')} without the field {e}") from None

    def handle(self, app: str, e: dict[str, Any]) -> None:
        handler = {
            "SparkListenerTaskStart": self.start_task,
            "SparkListenerTaskEnd": self.end_task,
            "SparkListenerExecutorAdded": self.add_executor,
            "SparkListenerExecutorRemoved": self.remove_executor,
            "SparkListenerJobStart": self.start_job,
            "SparkListenerJobEnd": self.end_job,
            "SparkListenerStageSubmitted": self.stage,
            "SparkListenerStageCompleted": self.stage,
            "SparkListenerEnvironmentUpdate": self.environment,
            _PROGRESS_EVENT: self.progress,
        }.get(str(e.get("Event")))
        if handler is not None:
            handler(app, e)

    def environment(self, app: str, e: dict[str, Any]) -> None:
        props = e["Spark Properties"]
        pairs = props.items() if isinstance(props, dict) else props  # Spark writes a JSON object; older logs pairs
        self.log.properties[app] = {str(k): str(v) for k, v in pairs}

    def progress(self, app: str, e: dict[str, Any]) -> None:
        p = e["progress"]
        metrics: dict[str, int] = {}
        for op in p.get("stateOperators") or []:
            for name, value in (op.get("customMetrics") or {}).items():
                if isinstance(value, int) and not isinstance(value, bool):
                    metrics[name] = metrics.get(name, 0) + value
        self.log.progress.append(QueryProgress(app, int(p["batchId"]), metrics))

    def start_task(self, app: str, e: dict[str, Any]) -> None:
        t = _attempt(app, e)
        self.open[(app, t.task_id)] = t

    def add_executor(self, app: str, e: dict[str, Any]) -> None:
        ex = Executor(app, str(e["Executor ID"]), str(e["Executor Info"]["Host"]), int(e["Timestamp"]))
        self.executors[(app, ex.executor)] = ex

    def remove_executor(self, app: str, e: dict[str, Any]) -> None:
        key = (app, str(e["Executor ID"]))
        if key in self.executors:
            self.executors[key] = replace(self.executors[key], removed_ms=int(e["Timestamp"]), removed_reason=e.get("Removed Reason"))

    def start_job(self, app: str, e: dict[str, Any]) -> None:
        batch = (e.get("Properties") or {}).get(BATCH_PROPERTY)
        stages = tuple(int(s) for s in e["Stage IDs"])
        job = Job(app, int(e["Job ID"]), stages, None if batch is None else int(batch), int(e["Submission Time"]))
        self.jobs[(app, job.job)] = job

    def end_job(self, app: str, e: dict[str, Any]) -> None:
        key = (app, int(e["Job ID"]))
        if key in self.jobs:
            self.jobs[key] = replace(self.jobs[key], end_ms=int(e["Completion Time"]), result=str(e["Job Result"]["Result"]))

    def end_task(self, app: str, e: dict[str, Any]) -> None:
        info = e["Task Info"]
        start = self.open.pop((app, int(info["Task ID"])), None) or _attempt(app, e)  # a trimmed log may lack the start
        reason = e["Task End Reason"]
        error = (
            f"{reason.get('Class Name')}: {str(reason.get('Description') or '').splitlines()[0][:300]}" if "Class Name" in reason else None
        )
        done = replace(start, finish_ms=int(info["Finish Time"]), outcome=str(reason["Reason"]), error=error)
        self.log.tasks.append(done)

    def stage(self, app: str, e: dict[str, Any]) -> None:
        info = e["Stage Info"]
        st = Stage(app, int(info["Stage ID"]), int(info["Stage Attempt ID"]), str(info.get("Stage Name", "")), int(info["Number of Tasks"]))
        if info.get("Completion Time") is not None:
            st = replace(st, completed_ms=int(info["Completion Time"]), failure=info.get("Failure Reason"))
        self.stages[(app, st.stage, st.attempt)] = st

    def finish(self) -> EventLog:
        batch_of = {(j.app, s): j.batch for j in self.jobs.values() for s in j.stages}
        tasks = [*self.log.tasks, *self.open.values()]  # attempts with no end logged: outcome None
        self.log.tasks = sorted((replace(t, batch=batch_of.get((t.app, t.stage))) for t in tasks), key=lambda t: (t.app, t.task_id))
        self.log.stages = [replace(s, batch=batch_of.get((s.app, s.stage))) for s in self.stages.values()]
        self.log.executors = list(self.executors.values())
        self.log.jobs = list(self.jobs.values())
        return self.log


def _attempt(app: str, e: dict[str, Any]) -> TaskAttempt:
    info = e["Task Info"]
    return TaskAttempt(
        app=app,
        task_id=int(info["Task ID"]),
        stage=int(e["Stage ID"]),
        stage_attempt=int(e["Stage Attempt ID"]),
        index=int(info["Index"]),
        attempt=int(info["Attempt"]),
        executor=str(info["Executor ID"]),
        host=str(info["Host"]),
        speculative=bool(info["Speculative"]),
        launch_ms=int(info["Launch Time"]),
    )


def _events(f: Path, partial: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, event) for each line; a broken line is an error unless it is an unterminated last one."""
    try:
        text = f.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CorruptFileError(str(f), f"cannot read the event log: {e}") from None
    lines = text.split("\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines):  # no newline after it: still being written
                partial.append(str(f))
                return
            raise CorruptFileError(str(f), f"line {n} is not JSON") from None
        if not isinstance(event, dict):
            raise CorruptFileError(str(f), f"line {n} is not a JSON object")
        yield n, event
