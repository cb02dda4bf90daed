"""The state verifier on in-process runs, with the seed appendix's V1 anomalies as positive controls.

Ground truth comes from the source (the generator, or the ingest service's acknowledged
records) and Spark's file source log, never from the driver's own input log.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from checkpoint_helpers import run_cli
from job_helpers import InProcessJob, partition_of, records

from statebed_job.config import JobOptions
from statebed_job.task import TaskResult, TaskSpec, run_partition
from statebed_model.rundir import table_bytes
from statebed_model.sources import IngestSource
from statebed_store import StoreId, default_uploader, failpoints
from statebed_verify.state import verify_state

pytestmark = pytest.mark.usefixtures("providers_closed")  # conftest.py: drained and closed after each test


def kinds(report) -> set[str]:  # type: ignore[no-untyped-def]
    return {a.kind for a in report.anomalies}


@pytest.mark.parametrize("workload", ["count", "bucket-collect", "sample3"])
@pytest.mark.parametrize("format", ["v2", "v1"])
def test_clean_runs_are_valid(tmp_path: Path, workload: str, format: str) -> None:
    job = InProcessJob(
        tmp_path / "run",
        JobOptions(workload=workload, format=format, batches=4, partitions=3, rows_per_batch=400, keyspace=50, snapshot_interval=2),
    )
    for b in range(4):
        assert job.batch(b).status == "committed"
    report = verify_state(job.run.root)
    assert report.valid is True, report.anomalies
    assert report.checked["batches"] == 4 and report.checked["records"] == 1600 and report.checked["state_entries"] > 0


def test_oracle_mismatch_names_keys_and_batches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = InProcessJob(tmp_path / "run", JobOptions(workload="count", batches=3, rows_per_batch=100, keyspace=20))
    job.batch(0)
    # The driver is handed batch 1 plus a record (key 7) the generator never made: it logs and applies it.
    job.batch(1, inputs=pa.concat_tables([job.source.records(["000001.parquet"]), records([10_000], [7], [5])]))
    job.batch(2)
    report = verify_state(job.run.root)
    assert report.valid is False
    mismatch = next(a for a in report.anomalies if a.kind == "state-mismatch")
    assert mismatch.keys == [7] and 1 in mismatch.batches and "key 7" in mismatch.detail
    assert any(a.kind == "output-mismatch" and a.batches == [1] for a in report.anomalies)
    log = next(a for a in report.anomalies if a.kind == "input-log-mismatch")  # the input log agreed with the driver, not the source
    assert log.batches == [1] and log.records == [10_000]
    code, out, _ = run_cli(capsys, "verify", "state", str(job.run.root), "--json")
    assert code == 1 and json.loads(out)["valid"] is False


def test_a_driver_that_drops_records_is_caught_from_the_generator(tmp_path: Path) -> None:
    """The driver loses half of batch 1 and its input log says so: an input log as ground truth would call this valid."""
    job = InProcessJob(tmp_path / "run", JobOptions(workload="bucket-collect", batches=2, rows_per_batch=100, keyspace=20))
    job.batch(0)
    job.batch(1, inputs=job.source.records(["000001.parquet"]).slice(0, 50))
    report = verify_state(job.run.root)
    assert report.valid is False
    lost = next(a for a in report.anomalies if a.kind == "lost-record")
    assert set(lost.batches) == {1} and set(lost.records) <= set(range(150, 200))
    log = next(a for a in report.anomalies if a.kind == "input-log-mismatch")
    assert log.batches == [1] and "50 missing from the log" in log.detail


def test_the_input_log_is_a_diagnostic_only(tmp_path: Path) -> None:
    job = InProcessJob(tmp_path / "run", JobOptions(workload="count", batches=2, rows_per_batch=50, keyspace=10))
    for b in range(2):
        job.batch(b)
    job.run.storage.delete([job.run.input_name(0)])
    report = verify_state(job.run.root)
    assert report.valid is True, report.anomalies
    assert report.checked["records"] == 100 and any("no input log for committed batch(es) [0]" in n for n in report.notes)


def test_missing_and_uncommitted_outputs(tmp_path: Path) -> None:
    job = InProcessJob(tmp_path / "run", JobOptions(workload="count", batches=3, rows_per_batch=100, keyspace=20))
    for b in range(3):
        job.batch(b)
    job.run.storage.delete([job.run.output_name(2)])
    job.run.write_output(7, job.run.read_output(1))
    report = verify_state(job.run.root)
    assert {(a.kind, tuple(a.batches)) for a in report.anomalies} >= {("missing-output", (2,)), ("uncommitted-output", (7,))}


def test_an_unknown_batch_source_makes_the_verdict_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without Spark's record of which file batch 0 read, its records are unknown: never valid."""
    job = InProcessJob(tmp_path / "run", JobOptions(workload="count", batches=2, rows_per_batch=50, keyspace=10))
    for b in range(2):
        job.batch(b)
    job.run.storage.delete(["spark-checkpoint/sources/0/0"])
    report = verify_state(job.run.root)
    assert report.valid == "unknown" and kinds(report) == {"missing-input"}
    assert report.anomalies[0].batches == [0] and "do not say which files batch 0 read" in report.anomalies[0].detail
    code, _, _ = run_cli(capsys, "verify", "state", str(job.run.root))
    assert code == 3


# -- an ingest source: the acknowledged records are the ground truth ----------------------------


def ingest_job(tmp_path: Path, **kw: object) -> InProcessJob:
    opts = JobOptions(source="ingest", landing=str(tmp_path / "landing"), partitions=2, keyspace=20, **kw)  # type: ignore[arg-type]
    return InProcessJob(tmp_path / "run", opts)


def landed(first: int, n: int = 30) -> pa.Table:
    ids = list(range(first, first + n))
    return records(ids, [i % 20 for i in ids], [i % 7 for i in ids])


@pytest.mark.parametrize("workload", ["count", "bucket-collect"])
def test_an_ingest_run_is_valid_and_later_landings_are_pending(tmp_path: Path, workload: str) -> None:
    job = ingest_job(tmp_path, workload=workload)
    for b in range(3):
        job.batch(b, land=landed(100 * b))
    assert isinstance(job.source, IngestSource)
    job.source.land(landed(900, 5))  # acknowledged after the last committed batch: not yet processed
    report = verify_state(job.run.root)
    assert report.valid is True, report.anomalies
    assert report.checked["records"] == 90
    assert any(n.startswith("not-yet-processed: 1 acknowledged file(s), 5 record(s)") for n in report.notes)


def test_an_acknowledged_file_no_batch_read_is_lost(tmp_path: Path) -> None:
    job = ingest_job(tmp_path, workload="count")
    assert isinstance(job.source, IngestSource)
    skipped = job.source.land(landed(500, 4))  # seq 0: acknowledged, but batch 0 reads seq 1
    job.batch(0, land=landed(0))
    job.batch(1, land=landed(100))
    report = verify_state(job.run.root)
    assert report.valid is False
    lost = next(a for a in report.anomalies if a.kind == "lost-acknowledged")
    assert lost.records == [500, 501, 502, 503] and skipped.file in lost.detail


def test_acknowledged_records_missing_from_the_landed_file_are_lost(tmp_path: Path) -> None:
    """The landed file lost records after its ack (storage damage): the ack still promises them."""
    job = ingest_job(tmp_path, workload="bucket-collect")
    assert isinstance(job.source, IngestSource)
    ack = job.source.land(landed(0))
    job.source.landing.write(ack.file, table_bytes(landed(0, 28)))
    job.batch(0)  # Spark's source picks the landed file up
    report = verify_state(job.run.root)
    assert report.valid is False
    lost = next(a for a in report.anomalies if a.kind == "lost-acknowledged")
    assert lost.records == [28, 29] and lost.batches == [0]


def test_rerun_of_a_committed_batch_is_not_recomputed(tmp_path: Path) -> None:
    job = InProcessJob(tmp_path / "run", JobOptions(workload="bucket-collect", batches=3, rows_per_batch=200, keyspace=30))
    job.batch(0)
    job.batch(1)
    job.run.storage.delete([job.run.output_name(1)])  # the driver died between the commit log and the sink
    calls = []

    def never(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
        calls.append(spec)
        return []

    assert job.batch(1, schedule=never).status == "re-emitted"
    assert calls == [] and job.run.has_output(1)
    job.batch(2)
    assert verify_state(job.run.root).valid is True


def test_not_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "verify", "state", str(tmp_path))
    assert code == 2 and "not a run directory" in err
    (tmp_path / "run.json").write_text("{broken")
    code, _, err = run_cli(capsys, "verify", "state", str(tmp_path))
    assert code == 2 and "run.json" in err and "not valid JSON" in err


# -- the seed appendix, as positive controls: V1 corrupts, V2 does not ---------------------------


def two_attempts_first_snapshot_wins(job: InProcessJob, first: str, second: str) -> Callable:  # type: ignore[type-arg]
    """Batch schedule: attempt on `first` (snapshot uploaded), then on `second` (snapshot lost); the driver takes the second."""

    def schedule(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
        run_partition(job.executor(first, spec), 0, parts[0], attempt=0, task_info="attempt 0")
        assert default_uploader().drain(60)
        with failpoints.armed("snapshot.upload.before", "drop"):
            winner = run_partition(job.executor(second, spec), 0, parts[0], attempt=1, task_info="attempt 1")
            assert default_uploader().drain(60)
        return [winner]

    return schedule


def on(job: InProcessJob, executor: str) -> Callable:  # type: ignore[type-arg]
    def schedule(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
        with failpoints.armed("snapshot.upload.before", "drop"):  # the appendix: batch 2 is a changelog only
            r = run_partition(job.executor(executor, spec), 0, parts[0])
            assert default_uploader().drain(60)
        return [r]

    return schedule


@pytest.mark.parametrize("format", ["v1", "v2"])
def test_appendix_lost_foo(tmp_path: Path, format: str) -> None:
    """Batch 1's attempts bucket the records differently; attempt A's snapshot wins the file name
    in V1 while the committed attempt B's local state carries on; the restart replays A's
    snapshot with B's changelog. Records are lost and doubled in V1; V2 loads B's lineage."""
    opts = JobOptions(workload="bucket-collect", format=format, batches=2, partitions=1, rows_per_batch=64, keyspace=8, snapshot_interval=1)
    job = InProcessJob(tmp_path / "run", opts)
    job.batch(0, schedule=two_attempts_first_snapshot_wins(job, "A", "B"))
    job.batch(1, schedule=on(job, "B"))
    report = verify_state(job.run.root)
    if format == "v1":
        assert report.valid is False
        found = kinds(report)
        assert {"lost-record", "duplicated-record"} & found, report.anomalies
        lost = next((a for a in report.anomalies if a.kind == "lost-record"), None)
        if lost is not None:
            assert lost.records and set(lost.batches) <= {0}
    else:
        assert report.valid is True, report.anomalies


@pytest.mark.parametrize("format", ["v1", "v2"])
def test_appendix_four_of_three(tmp_path: Path, format: str) -> None:
    """Two attempts of batch 1 drop different elements of each key's sample (X's snapshot is
    the one written, Y is committed); batch 2 continues on Y's local state and writes a
    changelog of deletes and adds against it. V1's restart replays it on X's snapshot: a
    sample of 4, or elements missing, as in the appendix. V2 follows Y's lineage."""
    keys = 200
    opts = JobOptions(
        workload="sample3",
        format=format,
        batches=3,
        partitions=1,
        keyspace=keys,
        snapshot_interval=1,
        source="ingest",
        landing=str(tmp_path / "in"),
    )
    job = InProcessJob(tmp_path / "run", opts)
    k = list(range(keys))
    job.batch(0, land=records([1_000_000 + i for i in range(3 * keys)], k * 3))  # (A, B, C) per key
    job.batch(1, land=records([2_000_000 + i for i in k], k), schedule=two_attempts_first_snapshot_wins(job, "X", "Y"))
    job.batch(2, land=records([3_000_000 + i for i in k], k), schedule=on(job, "Y"))
    report = verify_state(job.run.root)
    if format == "v1":
        assert report.valid is False
        assert {"sample-oversize", "sample-foreign-element", "sample-undersize", "output-mismatch"} & kinds(report), report.anomalies
    else:
        assert report.valid is True, report.anomalies


# -- the cross-partition key invariant on the final state (issue 35) -----------------------------


def misroute(job: InProcessJob, key: int, src: int, dst: int) -> Callable:  # type: ignore[type-arg]
    """Batch schedule: the first record of `key` in partition `src` is handed to partition `dst`'s task
    instead (a shuffle that routed one record wrong); every other record goes where it belongs."""

    def schedule(spec: TaskSpec, parts: list[pa.Table]) -> list[TaskResult]:
        i = parts[src]["key"].to_pylist().index(key)
        parts = [*parts]
        parts[dst] = pa.concat_tables([parts[dst], parts[src].slice(i, 1)])
        parts[src] = pa.concat_tables([parts[src].slice(0, i), parts[src].slice(i + 1)])
        return [run_partition(job.executor("e0", spec), p, parts[p]) for p in range(spec.partitions)]

    return schedule


@pytest.mark.parametrize("format", ["v2", "v1"])
def test_a_key_in_two_partitions_of_the_final_state_is_caught(tmp_path: Path, format: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Positive control: at the last batch one record of a key partition 1 updates in that batch reaches
    partition 0 instead. Both final states load; the key is in two partitions at the final version.
    Negative control: the same run with every record routed right is valid."""
    opts = JobOptions(workload="count", format=format, batches=3, partitions=3, rows_per_batch=300, keyspace=60, snapshot_interval=2)
    clean, bad = InProcessJob(tmp_path / "clean", opts), InProcessJob(tmp_path / "bad", opts)
    for b in range(3):
        assert clean.batch(b).status == "committed"
    for b in range(2):
        assert bad.batch(b).status == "committed"
    keys = partition_of(bad.source.records(["000002.parquet"]), 3)[1]["key"].to_pylist()
    key = next(k for k in keys if keys.count(k) > 1)  # partition 1 keeps updating it in the last batch
    assert bad.batch(2, schedule=misroute(bad, key, src=1, dst=0)).status == "committed"

    report = verify_state(clean.run.root)
    assert report.valid is True and "cross-partition-key" not in kinds(report), report.anomalies
    assert report.checked["partitions"] == 3 and report.checked["state_entries"] == 60

    report = verify_state(bad.run.root)
    assert report.valid is False
    [a] = [a for a in report.anomalies if a.kind == "cross-partition-key"]
    stored = key.to_bytes(8, "big", signed=True)  # the count state's key: the long, big-endian
    assert (a.operator, a.partition, a.version, a.keys) == (0, 0, 3, [stored.hex()]), a
    assert a.files == [bad.storage.display(StoreId(0, p).dir) for p in (0, 1)] and len(a.ids) == 2
    assert all((i is None) == (format == "v1") for i in a.ids), a.ids
    assert "1 key(s) are in the state of partitions 0, 1 of operator 0 at version 3" in a.detail
    assert "misplaced-key" in kinds(report)  # the known partitioner says the same of partition 0's copy
    code, out, _ = run_cli(capsys, "verify", "state", str(bad.run.root), "--json")
    assert code == 1 and [x["keys"] for x in json.loads(out)["anomalies"] if x["kind"] == "cross-partition-key"] == [[stored.hex()]]
