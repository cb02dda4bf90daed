"""One run end to end: validate, set up the run directory, cluster and session, stream the
batches with progress, tear everything down and summarise. Judging the run is not the
job's business: the CLI (or a chaos experiment) composes a run with the verifiers.

Everything that can be checked before any state is written is checked first (workload,
storage reachable, checkpoint not holding another run's history), so bad input costs a
clear error and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO, cast

from statebed_base.errors import QueryFailedError, StatebedError, UsageError
from statebed_base.log import get_logger, kv
from statebed_model.partitioning import run_partitioner
from statebed_model.rundir import SPARK_CHECKPOINT, RunDir, RunInfo
from statebed_model.sources import GeneratedSource, Source, open_source
from statebed_model.workloads import get_workload
from statebed_store import CommitLog, S3Settings, failpoints, open_storage
from statebed_store.formats import to_run_json
from statebed_store.location import is_remote, parse_location
from statebed_store.naming import COMMITS_DIR
from statebed_store.partitioner import record_partitioner
from statebed_store.storage.base import Storage

from .cluster import StandaloneCluster
from .config import JobOptions
from .driver import BatchDriver, BatchOutcome
from .maintenance import Maintenance, OnPass, PassRecord
from .query import start_query

__all__ = ["METRICS_PORT_ENV", "RunSummary", "default_run_dir", "describe_run", "metrics_port_from_env", "run_job"]

log = get_logger("runner")


@dataclass
class RunSummary:
    run_dir: str
    checkpoint: str
    workload: str
    format: str
    cluster: str
    batches: int
    records: int
    seconds: float
    records_per_s: float
    steady_records_per_s: float  # batches 2..n: without the first batch's JVM and Python worker warm-up
    batch_p50_s: float | None
    batch_p99_s: float | None
    statuses: dict[str, int] = field(default_factory=dict)
    seed: int | None = None  # the run's seed (`--seed`): replays every task's random choices
    verdicts: dict[str, Any] = field(default_factory=dict)  # filled by whoever judges the run (the CLI)

    def to_json(self) -> dict[str, Any]:
        """The `--json` summary (the format under `mode`, as run.json has it)."""
        return to_run_json(dict(self.__dict__))


def default_run_dir(opts: JobOptions) -> Path:
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{opts.workload}-{opts.format}"


class _Progress:
    """One line on stderr, rewritten per batch (quiet when not a terminal: one line per batch)."""

    def __init__(self, total: int, out: TextIO = sys.stderr, enabled: bool = True) -> None:
        self.total, self.out, self.enabled = total, out, enabled
        self.done = 0
        self.records = 0
        self.t0 = time.perf_counter()

    def __call__(self, outcome: BatchOutcome) -> None:
        if outcome.status == "skipped":
            return
        self.done += 1
        self.records += outcome.records
        if not self.enabled:
            return
        el = time.perf_counter() - self.t0
        width = 24
        filled = int(width * min(self.done, self.total) / max(self.total, 1))
        rate = self.records / el if el > 0 else 0.0
        line = (
            f"[statebed] batch {outcome.batch_id + 1}/{self.total} {'#' * filled}{'.' * (width - filled)} "
            f"{outcome.status}, {outcome.seconds:.2f} s, {rate:,.0f} records/s"
        )
        end = "\r" if self.out.isatty() and self.done < self.total else "\n"
        print(line.ljust(100), end=end, file=self.out, flush=True)


def _check_checkpoint(storage: Storage, run: RunDir, opts: JobOptions, resume: bool) -> None:
    """Refuse a checkpoint that holds another run's history (before writing anything)."""
    log_ = CommitLog(storage)
    batches = log_.batch_ids()  # also proves the storage is reachable
    if not batches:
        return
    if not resume:
        raise UsageError(
            f"{storage.display(COMMITS_DIR)} already holds {len(batches)} committed batch(es) of another run: "
            f"use a new --checkpoint, or `statebed run --resume {run.root}` to continue that run"
        )
    latest = log_.read(batches[-1])
    if latest is not None and not opts.native and (latest.state_ids is not None) != opts.format.ids:
        kind = "V1" if latest.state_ids is None else "V2"
        raise UsageError(f"{storage.display(COMMITS_DIR)} was written in {kind} format; this run asks for {opts.format}")


@contextlib.contextmanager
def _master(opts: JobOptions, run: RunDir, master: str | None) -> Iterator[str]:
    if master is not None:
        yield master
    elif opts.cluster == "local":
        yield "local[2]"
    else:
        cluster = StandaloneCluster(run.cluster, workers=opts.workers)
        st = cluster.up()
        try:
            yield st.master_url
        finally:
            cluster.down()


def describe_run(run_dir: str | Path, opts: JobOptions) -> RunDir:
    """Write the run description (`run.json`, not started) that `python -m statebed_job RUN_DIR` runs:
    how a harness starts a job without a command line (chaos, load)."""
    run = RunDir(run_dir)
    if run.exists():
        raise UsageError(f"{run.root} already holds a run: use --resume to continue it, or another run directory")
    run.create(_new_info(opts, started=False))
    return run


def _new_info(opts: JobOptions, *, started: bool = True) -> RunInfo:
    get_workload(opts.workload)
    return RunInfo(
        workload=opts.workload,
        format=opts.format,
        partitions=opts.partitions,
        checkpoint=SPARK_CHECKPOINT
        if opts.native and not is_remote(opts.checkpoint)
        else opts.checkpoint,  # native: Spark's, here or in a bucket
        params=opts.to_json(),
        source=_source_description(opts),
        started=started,
    )


def _saved_options(run: RunDir, info: RunInfo) -> JobOptions:
    try:
        return JobOptions.from_json(info.params)
    except (TypeError, UsageError) as e:
        raise UsageError(f"{run.info_path}: the saved run parameters are unusable ({e})") from None


def _resumed(run: RunDir, opts: JobOptions | None) -> tuple[RunInfo, JobOptions]:
    """The saved run and the options it continues with (`opts`: asked anew, checked against the saved)."""
    info = run.read_info()
    saved = _saved_options(run, info)
    if opts is None:
        return info, replace(saved, slow_task=None)  # the slow attempt was the first driver's
    if (saved.workload, saved.format, saved.partitions) != (opts.workload, opts.format, opts.partitions):
        raise UsageError(
            f"{run.root} ran {saved.workload}/{saved.format} on {saved.partitions} partitions; "
            f"resume it with the same --workload, --format and --partitions (asked {opts.workload}/{opts.format}/{opts.partitions})"
        )
    if opts.checkpoint != saved.checkpoint:
        raise UsageError(f"{run.root} keeps its state in {saved.checkpoint}; a resumed run cannot move it (asked {opts.checkpoint})")
    if opts.batches < saved.batches:
        raise UsageError(f"{run.root} already asked for {saved.batches} batches; --batches cannot shrink on resume")
    return info, opts


def _described(run: RunDir) -> tuple[RunInfo, JobOptions]:
    """A run directory a harness described and nobody started yet."""
    info = run.read_info()
    if info.started:
        raise UsageError(f"{run.root} already holds a started run: resume it (--resume), or describe a new one")
    return info, _saved_options(run, info)


def run_job(
    run_dir: str | Path | None,
    opts: JobOptions | None = None,
    *,
    resume: bool = False,
    master: str | None = None,
    s3: S3Settings | None = None,
    progress: bool = True,
    metrics_port: int | None = None,
) -> RunSummary:
    """One run into `run_dir`: a new one with `opts`; `opts` None: the run `run_dir` describes
    (`describe_run`); `resume`: continue the saved run (`opts`, if given, checked against it)."""
    if run_dir is None and opts is None:
        raise UsageError("a run needs its options or a run directory that describes it")
    run = RunDir(run_dir or default_run_dir(cast(JobOptions, opts)))
    described = opts is None and not resume
    if resume:
        info, opts = _resumed(run, opts)
    elif opts is None:
        info, opts = _described(run)
    else:
        if run.exists():
            raise UsageError(f"{run.root} already holds a run: use --resume to continue it, or another --run-dir")
        info = _new_info(opts)
    if info.source and info.source != _source_description(opts):
        raise UsageError(f"{run.root} read the source {info.source}; a resumed run cannot change it (asked {_source_description(opts)})")
    loc = run.checkpoint_location(info)
    if s3 is None and is_remote(loc):
        s3 = S3Settings.from_env()  # a described run: the endpoint and keys come with the environment
    run.s3 = run.s3 or s3  # what reads the checkpoint back in this process (the native readers' check) uses them too
    storage = open_storage(parse_location(loc, s3), create_bucket=is_remote(loc))
    if not opts.native:
        _check_checkpoint(storage, run, opts, resume)
    source = open_source(info, run, s3)
    if opts.continuous:
        Path(source.stream_dir()).mkdir(parents=True, exist_ok=True)  # Spark needs the directory; files come later
    else:
        opts = replace(opts, batches=source.prepare(opts.batches))  # ingest: the files that have landed
    info.params, info.started = opts.to_json(), True
    if resume or described:
        run.save_info(info)
    else:
        run.create(info)
    bar = _Progress(opts.batches, enabled=progress)
    statuses: dict[str, int] = {}

    metrics = _start_metrics(run, metrics_port)
    on_pass = _record_passes(run, metrics, resume)

    def on_batch(outcome: BatchOutcome) -> None:
        statuses[outcome.status] = statuses.get(outcome.status, 0) + 1
        bar(outcome)
        if metrics is not None:
            metrics(outcome)

    t0 = time.perf_counter()
    try:
        with _master(opts, run, master) as master_url:
            progress_rows = _stream(run, opts, source, storage, s3, master_url, on_batch, lambda: bar.records, on_pass)
    finally:
        if metrics is not None:
            metrics.close()
    seconds = time.perf_counter() - t0
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress_rows if "durationMs" in p]
    records = bar.records  # Spark's numInputRows counts a source read twice in statebed mode (input log + tasks)
    summary = RunSummary(
        run_dir=str(run.root),
        checkpoint=loc,
        workload=opts.workload,
        format=opts.format,
        cluster=opts.cluster if master is None else master,
        batches=len(run.committed_batches(info, storage)),
        records=records,
        seconds=round(seconds, 3),
        records_per_s=round(records / sum(durations), 1) if durations else 0.0,
        steady_records_per_s=round(records * (len(durations) - 1) / len(durations) / sum(durations[1:]), 1) if len(durations) > 1 else 0.0,
        batch_p50_s=round(statistics.median(durations), 3) if durations else None,
        batch_p99_s=round(_p99(durations), 3) if durations else None,
        statuses=statuses,
        seed=opts.seed,
    )
    log.info("run finished", extra=kv(run=str(run.root), seconds=summary.seconds))
    return summary


METRICS_PORT_ENV = "STATEBED_METRICS_PORT"  # set by `chaos run --prometheus` for the drivers it starts


def metrics_port_from_env(given: int | None) -> int | None:
    """`given` (--metrics-port), else STATEBED_METRICS_PORT (a harness asking its drivers for /metrics)."""
    env = os.environ.get(METRICS_PORT_ENV, "")
    if given is not None or not env:
        return given
    if not env.isdigit() or int(env) > 65535:
        raise UsageError(f"{METRICS_PORT_ENV}={env!r}: expected a TCP port 0..65535")
    return int(env)


def _start_metrics(run: RunDir, port: int | None) -> Any:
    """The driver's /metrics on loopback (port 0: any free one), its URL in `<run>/driver-metrics.json`."""
    if port is None:
        return None
    from .driver_metrics import DriverMetrics
    from .session import failpoint_control

    m = DriverMetrics(port, failpoint_control(run))
    url = f"http://127.0.0.1:{m.server.server_port}/metrics"
    run.storage.write("driver-metrics.json", json.dumps({"url": url}).encode())
    log.info("driver metrics", extra=kv(url=url))
    return m


def _record_passes(run: RunDir, metrics: Any, resume: bool) -> OnPass:
    """Each maintenance pass into `<run>/maintenance.jsonl` (and /metrics when it is served)."""
    rows = run.maintenance() if resume else []

    def on_pass(records: list[PassRecord]) -> None:
        rows.extend(r.to_json() for r in records)
        run.write_maintenance(rows)
        if metrics is not None:
            metrics.maintenance(records)

    return on_pass


def _start_maintenance(storage: Storage, driver: BatchDriver | None, opts: JobOptions, on_pass: OnPass) -> Maintenance | None:
    """statebed's stores only: in native mode Spark runs its own maintenance."""
    if driver is None:
        return None
    o = driver.store_options
    m = Maintenance(
        storage,
        retain=o.retain_versions,
        interval_s=opts.maintenance_interval_s,
        sst_grace_s=o.sst_orphan_grace_s,
        on_pass=on_pass,
        trim_log=True,
    )
    m.start()
    return m


def _spark_error(e: BaseException, what: str, driver: BatchDriver | None = None) -> StatebedError:
    """Spark and py4j errors as one line a user can act on (the JVM's trace stays in the cause).

    Spark wraps an error of our own `foreachBatch` in its own; the driver keeps the original,
    so a protocol violation or an injected fault keeps its class (and exit code).
    """
    if driver is not None and driver.failure is not None:
        return driver.failure
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    python = [m for m in map(_PYTHON_ERROR.match, lines) if m]  # a task's own error, from the worker's traceback
    if python:
        return QueryFailedError(f"{what}: a task failed: {python[-1].group(1)}: {python[-1].group(2)}")
    return QueryFailedError(f"{what}: {lines[0] if lines else type(e).__name__}")


# The last line of a Python traceback Spark embeds in its error: `statebed_base.errors.InjectedFault: ...`.
_PYTHON_ERROR = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Z]\w*(?:Error|Exception|Fault)): (.+)$")


def _source_description(opts: JobOptions) -> dict[str, Any]:
    """What run.json records of the source, so the verifier can rebuild its ground truth."""
    if opts.source == "ingest":
        assert opts.landing is not None
        return {"kind": "ingest", "landing": opts.landing if is_remote(opts.landing) else os.path.abspath(opts.landing)}
    return GeneratedSource(opts.rows_per_batch, opts.keyspace).describe()


def _stream(
    run: RunDir,
    opts: JobOptions,
    source: Source,
    storage: Storage,
    s3: S3Settings | None,
    master_url: str,
    on_batch: Any,
    committed: Callable[[], int],
    on_pass: OnPass,
) -> list[dict[str, Any]]:
    """Start the session and the query, wait until every batch ran, stop the session."""
    from .session import build_session, failpoint_control
    from .task import close_providers

    try:
        spark = build_session(opts, run, master_url, s3)
    except Exception as e:
        if type(e).__module__.startswith(("pyspark", "py4j")):
            raise _spark_error(e, "Spark did not start") from e
        raise
    previous_control = failpoints.use_control(failpoint_control(run))  # the driver follows it too
    driver: BatchDriver | None = None
    maintenance: Maintenance | None = None
    try:
        driver = None if opts.native else BatchDriver(run, opts, storage, s3)
        if driver is not None:  # once Spark runs: a run that never started leaves no checkpoint behind
            record_partitioner(storage, run_partitioner(opts.workload, opts.partitions))  # what the verifiers check keys against
        maintenance = _start_maintenance(storage, driver, opts, on_pass)

        def batch_done(outcome: BatchOutcome) -> None:
            on_batch(outcome)
            if maintenance is not None and outcome.status in ("committed", "re-emitted"):
                maintenance.committed(outcome.batch_id)

        query = start_query(spark, run, opts, source, driver, batch_done)
        try:
            if opts.continuous:
                _until_stopped(query, opts, committed)
            else:
                query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
            raise
        if query.exception() is not None:
            raise _spark_error(query.exception(), "the streaming query failed", driver)  # type: ignore[arg-type]
        if maintenance is not None:  # a clean end: what the retention promises, no more
            maintenance.final_pass()
        if opts.native:  # while the session is up: Spark's state data source against statebed's reader
            from .native_reader import check_readers

            check_readers(spark, run)
        return [p for p in query.recentProgress if p.get("numInputRows")] if query.recentProgress else []
    except Exception as e:
        if type(e).__module__.startswith(("pyspark", "py4j")):
            raise _spark_error(e, "the streaming query failed", driver) from e
        raise
    finally:
        if maintenance is not None:
            maintenance.stop()
        failpoints.use_control(previous_control)
        close_providers()
        spark.stop()


def _until_stopped(query: Any, opts: JobOptions, committed: Callable[[], int]) -> None:
    """A continuous run: wait for a stop condition, then drain what has landed and stop the query."""
    deadline = None if opts.duration_s is None else time.monotonic() + opts.duration_s
    stop_file = None if opts.stop_file is None else Path(opts.stop_file)
    while not query.awaitTermination(0.2):  # raises if the query failed
        if (
            (deadline is not None and time.monotonic() >= deadline)
            or (stop_file is not None and stop_file.exists())
            or (opts.until_records is not None and committed() >= opts.until_records)
        ):
            log.info("stop condition met: draining what has landed", extra=kv(stop_file=str(stop_file)))
            query.processAllAvailable()
            query.stop()
            return


def _p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]
