"""Reading Spark's file-source log (plain and compacted entries) and the generated source's files."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from statebed_base.errors import CorruptFileError, MissingFileError
from statebed_model.records import records_for
from statebed_model.sources import GeneratedSource, batch_reads, batch_source_files, source_log
from statebed_store.storage import LocalStorage


def entry(path: str, batch: int) -> str:
    return json.dumps({"path": f"file://{path}", "timestamp": 1, "batchId": batch})


def offsets(tmp_path: Path, batch: int, log_offset: int) -> None:
    d = tmp_path / "offsets"
    d.mkdir(exist_ok=True)
    (d / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{{}}}}\n{{"logOffset":{log_offset}}}')


def test_plain_and_compacted_entries(tmp_path: Path) -> None:
    log = tmp_path / "sources" / "0"
    log.mkdir(parents=True)
    (log / "8").write_text("v1\n" + entry("/in/8.parquet", 8) + "\n")
    # Spark compacts every 10th batch: 9.compact holds all entries so far, batch 9's included.
    (log / "9.compact").write_text("v1\n" + "\n".join(entry(f"/in/{b}.parquet", b) for b in range(10)) + "\n")
    (log / "10").write_text("v1\n" + entry("/in/a%20b.parquet", 10) + "\n")  # Spark's paths are URIs
    for b in range(7, 12):
        offsets(tmp_path, b, b)  # Spark purged offsets 0..6 (minBatchesToRetain); no drift: entry b is batch b
    storage = LocalStorage(tmp_path)
    assert batch_source_files(storage, 8, "sources/0") == ["8.parquet"]
    assert batch_source_files(storage, 9, "sources/0") == ["9.parquet"]
    with pytest.raises(MissingFileError, match="no entry 11"):
        batch_source_files(storage, 11, "sources/0")
    with pytest.raises(MissingFileError, match="no file source offset for batch 12"):
        batch_source_files(storage, 12, "sources/0")
    # The whole log: entries 0..7 only in the compaction (Spark deleted their plain entries), no entry twice.
    assert source_log(storage, "sources/0") == {**{b: [f"{b}.parquet"] for b in range(10)}, 10: ["a b.parquet"]}
    assert batch_reads(storage, "sources/0") == {**{b: [f"{b}.parquet"] for b in range(10)}, 10: ["a b.parquet"]}  # 11: unknown
    (log / "11").write_text("v1\n{not json\n")
    with pytest.raises(CorruptFileError, match="sources/0/11"):
        source_log(storage, "sources/0")


def test_a_batch_replanned_after_a_kill_reads_every_entry_its_offset_range_covers(tmp_path: Path) -> None:
    """The driver died after the source logged entry 4 but before offsets/4: the restarted query
    logged entry 5 and planned batch 4 over entries 4 and 5 (seen on Spark 4.3.0 under corrupt-row)."""
    log = tmp_path / "sources" / "0"
    log.mkdir(parents=True)
    for e in range(6):
        (log / str(e)).write_text("v1\n" + entry(f"/in/{e}.parquet", e) + "\n")
    for b, end in enumerate([0, 1, 2, 3, 5]):
        offsets(tmp_path, b, end)
    storage = LocalStorage(tmp_path)
    assert batch_source_files(storage, 4, "sources/0") == ["4.parquet", "5.parquet"]
    assert batch_reads(storage, "sources/0") == {
        0: ["0.parquet"],
        1: ["1.parquet"],
        2: ["2.parquet"],
        3: ["3.parquet"],
        4: ["4.parquet", "5.parquet"],
    }
    for b in range(3):  # Spark purged the oldest offsets: with a drift somewhere below, entry b need not be batch b
        (tmp_path / "offsets" / str(b)).unlink()
    offsets(tmp_path, 3, 4)
    assert batch_reads(storage, "sources/0") == {4: ["5.parquet"]}
    offsets(tmp_path, 5, 5)  # a no-data batch: the offset did not move
    assert batch_reads(storage, "sources/0")[5] == []


def test_generated_source_is_one_ordered_file_per_batch(tmp_path: Path) -> None:
    source = GeneratedSource(rows_per_batch=50, keyspace=7, directory=tmp_path / "source")
    assert source.prepare(3) == 3
    files = sorted((tmp_path / "source").glob("*.parquet"))
    before = [f.stat().st_mtime_ns for f in files]
    assert source.prepare(3) == 3 and [f.stat().st_mtime_ns for f in files] == before  # a resumed run keeps its files
    assert [f.name for f in files] == ["000000.parquet", "000001.parquet", "000002.parquet"]
    assert before == sorted(before)  # Spark's file source takes the oldest first
    assert pq.read_table(files[1]).equals(records_for(50, 100, 7))
    assert source.records(["000001.parquet"]).equals(pq.read_table(files[1]))  # ground truth without reading the file
    ids = records_for(0, 1000, 7)
    assert len(set(ids["id"].to_pylist())) == 1000 and set(ids["key"].to_pylist()) == set(range(7))


@pytest.mark.slow
def test_a_spark_run_reads_what_has_landed_and_a_resume_reads_what_landed_since(tmp_path: Path) -> None:
    """Real Spark over an ingest landing area: each landed file is one batch; every acknowledged record is judged."""
    from job_helpers import records
    from spark_runs import statebed, summary

    from statebed_model.sources import IngestSource
    from statebed_store import open_storage
    from statebed_verify.state import verify_state

    landing = IngestSource(open_storage(tmp_path / "landing"))

    def land(first: int) -> None:
        ids = list(range(first, first + 500))
        landing.land(records(ids, [i % 40 for i in ids], [i % 9 for i in ids]))

    for k in range(3):
        land(1000 * k)
    run_dir = tmp_path / "run"
    args = ["--workload", "bucket-collect", "--source", "ingest", "--landing", str(tmp_path / "landing"), "--json"]
    proc = statebed("run", "--run-dir", str(run_dir), *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc)
    assert s["batches"] == 3 and s["records"] == 1500 and s["verdicts"]["state"]["valid"] is True
    land(5000)
    land(6000)
    assert any(n.startswith("not-yet-processed: 2 acknowledged file(s), 1000 record(s)") for n in verify_state(run_dir).notes)
    proc = statebed("run", "--run-dir", str(run_dir), "--resume", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary(proc)["batches"] == 5
    report = verify_state(run_dir)
    assert report.valid is True and report.checked["records"] == 2500 and not report.notes, report.notes
    proc = statebed("run", "--run-dir", str(tmp_path / "empty"), "--source", "ingest", "--landing", str(tmp_path / "nothing"))
    assert proc.returncode == 2 and "nothing has landed yet" in proc.stderr and not (tmp_path / "empty" / "run.json").exists()
