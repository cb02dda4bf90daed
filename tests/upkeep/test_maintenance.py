"""Maintenance in the job (`statebed_job.maintenance`), on the real driver and tasks without Spark:
a speculative loser per batch leaves orphans; maintenance keeps the last `retain` committed
versions loadable, deletes the rest, records each pass, and never raises."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from job_helpers import InProcessJob

from statebed_base.errors import CorruptFileError, FieldError, UsageError
from statebed_job.config import JobOptions
from statebed_job.maintenance import Maintenance, PassRecord
from statebed_job.task import TaskResult, TaskSpec, run_partition
from statebed_report.reproduce import run_argv
from statebed_store import CommitLog, StoreFiles
from statebed_store.cleanup import cleanup_checkpoint
from statebed_store.inspection import discover_stores
from statebed_store.rebuild import rebuildability
from statebed_store.storage.base import FileInfo
from statebed_verify.lineage import verify_lineage
from statebed_verify.state import verify_state

BATCHES = 12
RETAIN = 3


pytestmark = pytest.mark.usefixtures("providers_closed")  # conftest.py: drained and closed after each test


def racing(job: InProcessJob) -> object:
    """Every partition on executor W; partition 0 also as a speculative copy on executor S (the loser)."""

    def schedule(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
        won = [run_partition(job.executor("W", spec), p, parts[p]) for p in range(spec.partitions)]
        run_partition(job.executor("S", spec), 0, parts[0], attempt=1)
        return won

    return schedule


def job_with_history(tmp_path: Path, batches: int = BATCHES, workload: str = "count") -> InProcessJob:
    opts = JobOptions(workload=workload, batches=batches, partitions=2, rows_per_batch=300, keyspace=50, snapshot_interval=4, seed=3)
    job = InProcessJob(tmp_path / "run", opts)
    for b in range(batches):
        job.batch(b, schedule=racing(job))  # type: ignore[arg-type]
    return job


def versions(job: InProcessJob) -> set[int]:
    return {n.version for s in discover_stores(job.storage) for n in StoreFiles(job.storage, s).files}


def test_a_pass_keeps_the_retained_range_and_deletes_the_rest(tmp_path: Path) -> None:
    job = job_with_history(tmp_path)
    assert min(versions(job)) == 1  # before: the whole history is there
    rows: list[PassRecord] = []
    m = Maintenance(job.storage, retain=RETAIN, interval_s=0, sst_grace_s=0, on_pass=rows.extend)
    assert m.run_pass() == []  # nothing committed seen yet: no pass
    m.committed(BATCHES - 1)
    records = m.run_pass()
    assert [r.error for r in records] == [None, None] and records == rows
    assert all(r.versions_kept == RETAIN and r.files_deleted > 0 and r.bytes_deleted > 0 and r.requests > 0 for r in records)
    assert records[0].orphans_deleted > 0  # partition 0's losing attempts in the retained range
    doc = rebuildability(job.storage)
    low = doc["rebuildable"][0][0]
    assert doc["rebuildable"] == [[low, BATCHES - 1]] and 0 < low <= BATCHES - RETAIN, doc  # the retained range, trimmed below
    assert min(versions(job)) >= BATCHES - RETAIN - 4 + 1  # at most a snapshot interval below the retained range
    assert verify_lineage(job.storage).valid
    # the next pass with nothing new committed is free; a new commit makes one that deletes nothing new
    assert m.run_pass() == []
    assert m.passes == 1 and m.failures == 0


def test_the_final_pass_cleans_every_store_again_past_the_budget_and_says_final(tmp_path: Path) -> None:
    """A clean stop: every store is cleaned once more at the last commit, though each was already
    cleaned there and the budget allows one store per pass; each row says `final`."""
    job = job_with_history(tmp_path, batches=6)
    rows: list[PassRecord] = []
    m = Maintenance(job.storage, retain=2, interval_s=0, sst_grace_s=0, max_requests=1, on_pass=rows.extend)
    m.committed(5)
    assert len(m.run_pass() + m.run_pass()) == 2 and m.run_pass() == []  # both stores clean at batch 5
    final = m.final_pass()
    assert sorted(r.store for r in final) == ["state/0/0", "state/0/1"] and all(r.final and r.error is None for r in final)
    assert rows[-2:] == final and not any(r.final for r in rows[:-2])
    assert verify_lineage(job.storage).valid


def test_a_final_pass_with_nothing_committed_does_nothing(tmp_path: Path) -> None:
    job = job_with_history(tmp_path, batches=2)
    m = Maintenance(job.storage, retain=2, interval_s=0, sst_grace_s=0)
    assert m.final_pass() == [] and m.passes == 0


def test_a_run_within_its_retention_gets_no_final_pass_and_keeps_its_losing_attempts(tmp_path: Path) -> None:
    job = job_with_history(tmp_path, batches=4)
    before = {n for s in discover_stores(job.storage) for n in StoreFiles(job.storage, s).files}
    m = Maintenance(job.storage, retain=4, interval_s=0, sst_grace_s=0)
    m.committed(3)
    assert m.final_pass() == [] and m.passes == 0
    assert {n for s in discover_stores(job.storage) for n in StoreFiles(job.storage, s).files} == before
    m = Maintenance(job.storage, retain=3, interval_s=0, sst_grace_s=0)  # one batch more than it retains: the pass runs
    m.committed(3)
    records = {r.store: r for r in m.final_pass()}
    assert records["state/0/0"].final and records["state/0/0"].orphans_deleted > 0  # partition 0's losing attempts


@pytest.mark.parametrize("workload", ["count", "sample3"])  # sample3: every committed version is judged, a trimmed one noted
def test_the_jobs_pass_trims_the_commit_log_below_the_retained_window_once_recorded(tmp_path: Path, workload: str) -> None:
    """Spark keeps `minBatchesToRetain` log entries; statebed's job too. The trim's row is recorded
    before the delete, so the verifiers still count every trimmed batch as committed."""
    job = job_with_history(tmp_path, workload=workload)
    rows: list[PassRecord] = []
    entries_when_recorded: list[list[int]] = []

    def on_pass(records: list[PassRecord]) -> None:
        entries_when_recorded.append(CommitLog(job.storage).batch_ids())
        rows.extend(records)
        job.run.write_maintenance([r.to_json() for r in rows])

    m = Maintenance(job.storage, retain=RETAIN, interval_s=0, sst_grace_s=0, on_pass=on_pass, trim_log=True)
    m.committed(BATCHES - 1)
    records = m.run_pass()
    trim = records[-1]
    below = BATCHES - RETAIN  # batches 9..11 commit the retained versions 10..12
    assert (trim.store, trim.trimmed_below, trim.files_deleted, trim.files_kept, trim.error) == ("commits", below, below, RETAIN, None)
    assert trim.bytes_deleted > 0 and trim.bytes_kept > 0
    assert entries_when_recorded == [list(range(BATCHES))]  # recorded while every entry was still there
    assert CommitLog(job.storage).batch_ids() == list(range(below, BATCHES))
    info = job.run.read_info()
    assert job.run.trimmed_below() == below and job.run.committed_batches(info) == list(range(BATCHES))
    assert verify_lineage(job.storage).valid is True
    state = verify_state(job.run)
    assert state.valid is True, state.anomalies
    assert any("trimmed by the run's maintenance" in n for n in state.notes)
    if workload == "sample3":
        assert any("batch 0 does not load" in n and "no commit-log entry" in n for n in state.notes), state.notes
    m.committed(BATCHES)  # a latest batch the log does not hold: no trim anchored on it
    assert [r.store for r in m.run_pass()] == ["state/0/0", "state/0/1"]
    assert CommitLog(job.storage).batch_ids() == list(range(below, BATCHES))


def test_statebed_cleanup_on_a_trimmed_log_keeps_from_its_first_entry(tmp_path: Path) -> None:
    """`statebed cleanup --retain 100` on a log the job trimmed: nothing below it loads, nothing is missing."""
    job = job_with_history(tmp_path)
    m = Maintenance(job.storage, retain=RETAIN, interval_s=0, sst_grace_s=0, on_pass=lambda _: None, trim_log=True)
    m.committed(BATCHES - 1)
    m.run_pass()
    done = cleanup_checkpoint(job.storage, 100, sst_orphan_grace_s=0)
    assert (done.latest_batch, done.first_retained) == (BATCHES - 1, BATCHES - RETAIN)
    assert verify_lineage(job.storage).valid is True


@pytest.mark.parametrize("recorder", ["none", "failing"])
def test_an_unrecorded_trim_deletes_nothing(tmp_path: Path, recorder: str) -> None:
    job = job_with_history(tmp_path, batches=6)

    def failing(records: list[PassRecord]) -> None:
        raise OSError("disk full")

    m = Maintenance(job.storage, retain=2, interval_s=0, sst_grace_s=0, on_pass=None if recorder == "none" else failing, trim_log=True)
    m.committed(5)
    records = m.run_pass()
    assert records[-1].store == "commits" and records[-1].trimmed_below == 4
    assert CommitLog(job.storage).batch_ids() == list(range(6))  # never trimmed without its record
    assert job.run.trimmed_below() == 0


def test_only_a_recorded_trim_without_error_counts(tmp_path: Path) -> None:
    job = job_with_history(tmp_path, batches=3)
    rows = [
        PassRecord(1, "state/0/0", 2, 2, trimmed_below=99).to_json(),  # not the log's row
        PassRecord(1, "commits", 2, 1, trimmed_below=7, error="OSError: listing failed").to_json(),
        PassRecord(2, "commits", 2, 1, trimmed_below=1).to_json(),
    ]
    job.run.write_maintenance(rows)
    assert job.run.trimmed_below() == 1
    assert job.run.committed_batches(job.run.read_info()) == [0, 1, 2]
    job.run.write_maintenance([PassRecord(3, "commits", 2, 1, trimmed_below=10**15).to_json()])  # never a range of 10^15
    with pytest.raises(
        CorruptFileError,
        match=r"maintenance.jsonl.*a trim below batch 1000000000000000, but the commit log holds its newest entry, batch 2",
    ):
        job.run.committed_batches(job.run.read_info())


def test_a_native_runs_log_that_spark_purged_counts_the_batches_below_its_first_entry(tmp_path: Path) -> None:
    """Spark purges its commit log below minBatchesToRetain: in a native run a first entry k means 0..k-1 committed;
    in statebed's runs only a recorded trim counts, never a log that merely starts late."""
    job = job_with_history(tmp_path, batches=5)
    log = CommitLog(job.storage)
    job.storage.delete([log.path(b) for b in (0, 1, 2)])  # as Spark's purge leaves it
    info = job.run.read_info()
    assert job.run.committed_batches(info) == [3, 4]  # statebed's log: a hole is a hole
    native = replace(info, format="native-v2")
    assert job.run.committed_batches(native) == [0, 1, 2, 3, 4]
    assert job.run.purged_below(native, [3, 4]) == 3 and job.run.purged_below(native, []) == 0


def test_losing_attempts_files_are_gone_after_a_pass(tmp_path: Path) -> None:
    job = job_with_history(tmp_path, batches=6)
    m = Maintenance(job.storage, retain=2, interval_s=0, sst_grace_s=0)
    m.committed(5)
    m.run_pass()
    log_ids = {job.driver.log.read(b).id_for(0, 0) for b in range(6)}  # type: ignore[union-attr]
    left = {n.id for n in StoreFiles(job.storage, discover_stores(job.storage)[0]).files}
    assert left <= log_ids  # partition 0: only committed attempts' files are left


def test_the_request_budget_bounds_a_pass_and_the_next_pass_goes_on(tmp_path: Path) -> None:
    job = job_with_history(tmp_path, batches=6)
    m = Maintenance(job.storage, retain=2, interval_s=0, sst_grace_s=0, max_requests=1)
    m.committed(5)
    first, second = m.run_pass(), m.run_pass()
    assert [r.store for r in first] == ["state/0/0"] and [r.store for r in second] == ["state/0/1"]
    assert m.run_pass() == []  # both stores clean at batch 5: nothing to do


def test_a_pass_reads_each_commit_entry_once_and_keeps_only_the_retained_window(tmp_path: Path) -> None:
    """Commit-log entries never change once written: the first pass reads the `retain` entries,
    later passes only the new batch's, so a pass costs the same at --retain 3 and 100."""
    job = job_with_history(tmp_path)
    reads: list[str] = []
    real = job.storage.read

    def counted(path: str, start: int = 0, length: int | None = None) -> bytes:
        reads.append(path)
        return real(path, start, length)

    job.storage.read = counted  # type: ignore[method-assign]
    m = Maintenance(job.storage, retain=RETAIN, interval_s=0, sst_grace_s=0)
    m.committed(BATCHES - 2)
    m.run_pass()
    first = [p for p in reads if p.startswith("commits/")]
    assert len(first) == RETAIN and set(first) == {
        f"commits/{b}" for b in range(BATCHES - 1 - RETAIN, BATCHES - 1)
    }  # once, for both stores
    reads.clear()
    m.committed(BATCHES - 1)
    m.run_pass()
    assert [p for p in reads if p.startswith("commits/")] == [f"commits/{BATCHES - 1}"]
    assert sorted(m._commits) == list(range(BATCHES - RETAIN, BATCHES))  # older entries dropped


class Broken:
    """A storage whose listing fails: maintenance must log, count and record it, never raise."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.url = "broken"

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def list_dirs(self, directory: str) -> list[str]:
        raise OSError("storage down")

    def list(self, directory: str) -> list[FileInfo]:
        raise OSError("storage down")


def test_a_failing_pass_is_counted_not_raised(tmp_path: Path) -> None:
    job = job_with_history(tmp_path, batches=2)
    m = Maintenance(Broken(job.storage), retain=1, interval_s=0)  # type: ignore[arg-type]
    m.committed(1)
    records = m.run_pass()
    assert m.failures == 1 and records[0].error is not None and "storage down" in records[0].error


def test_the_background_thread_runs_a_pass_after_a_commit(tmp_path: Path) -> None:
    job = job_with_history(tmp_path, batches=6)
    import threading

    done = threading.Event()
    m = Maintenance(job.storage, retain=2, interval_s=0, sst_grace_s=0, on_pass=lambda rows: done.set())
    m.start()
    try:
        m.committed(5)
        assert done.wait(60)
    finally:
        m.stop()
    assert m.passes == 1
    low = rebuildability(job.storage)["rebuildable"][0][0]
    assert rebuildability(job.storage)["rebuildable"] == [[low, 5]] and 0 < low <= 4


@pytest.mark.parametrize(
    ("field", "value"), [("retain", 0), ("retain", True), ("maintenance_interval_s", -1), ("maintenance_interval_s", float("nan"))]
)
def test_bad_options_are_usage_errors(field: str, value: object) -> None:
    with pytest.raises(FieldError, match="^(retain|maintenance_interval_s) must be") as e:
        JobOptions(**{field: value})  # type: ignore[arg-type]
    assert e.value.field == field and isinstance(e.value, UsageError)


def test_run_argv_round_trips_the_maintenance_options() -> None:
    opts = JobOptions(retain=7, maintenance_interval_s=0.5, seed=1)
    argv = run_argv(opts)
    assert argv[argv.index("--retain") + 1] == "7" and argv[argv.index("--maintenance-interval") + 1] == "0.5"


def test_the_run_directory_keeps_every_pass(tmp_path: Path) -> None:
    job = job_with_history(tmp_path, batches=3)
    assert job.run.maintenance() == []
    rows = [PassRecord(1, "0/0/default", 2, 2, files_deleted=3).to_json(), PassRecord(2, "0/1/default", 2, 2).to_json()]
    job.run.write_maintenance(rows)
    assert job.run.maintenance() == rows


def test_each_pass_reaches_the_driver_metrics(tmp_path: Path) -> None:
    import urllib.request

    from statebed_job.driver_metrics import DriverMetrics

    metrics = DriverMetrics(0, tmp_path / "failpoints" / "control.json")
    try:
        metrics.maintenance([PassRecord(1, "state/0/0", 5, 2, files_deleted=4, bytes_deleted=900, requests=6, seconds=0.01)])
        metrics.maintenance([PassRecord(2, "state/0/1", 6, 2, requests=3, error="OSError: down")])
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics.server.server_port}/metrics", timeout=30) as r:
            lines = r.read().decode().splitlines()
    finally:
        metrics.close()
    for line in (
        "statebed_maintenance_passes_total 2.0",
        "statebed_maintenance_deleted_files_total 4.0",
        "statebed_maintenance_deleted_bytes_total 900.0",
        "statebed_maintenance_requests_total 9.0",
        "statebed_maintenance_failures_total 1.0",
        "statebed_maintenance_store_seconds_count 2.0",
    ):
        assert line in lines, line
