"""Reading Spark's file-source log (plain and compacted entries) and the generated source."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from statebed_job.config import JobOptions
from statebed_job.query import batch_source_files, generate_source, source_dir
from statebed_model.records import records_for
from statebed_model.rundir import RunDir
from statebed_store.errors import StatebedError


def entry(path: str, batch: int) -> str:
    return json.dumps({"path": f"file://{path}", "timestamp": 1, "batchId": batch})


def test_plain_and_compacted_entries(tmp_path: Path) -> None:
    log = tmp_path / "sources" / "0"
    log.mkdir(parents=True)
    (log / "8").write_text("v1\n" + entry("/in/8.parquet", 8) + "\n")
    # Spark compacts every 10th batch: 9.compact holds all entries so far, batch 9's included.
    (log / "9.compact").write_text("v1\n" + "\n".join(entry(f"/in/{b}.parquet", b) for b in range(10)) + "\n")
    assert batch_source_files(tmp_path, 8) == ["/in/8.parquet"]
    assert batch_source_files(tmp_path, 9) == ["/in/9.parquet"]
    with pytest.raises(StatebedError, match="no entry for batch 10"):
        batch_source_files(tmp_path, 10)


def test_generated_source_is_one_ordered_file_per_batch(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    opts = JobOptions(batches=3, rows_per_batch=50, keyspace=7)
    assert generate_source(run, opts) == 3
    assert generate_source(run, opts) == 0  # idempotent: a resumed run keeps its files
    files = sorted(source_dir(run).glob("*.parquet"))
    assert [f.name for f in files] == ["000000.parquet", "000001.parquet", "000002.parquet"]
    assert [f.stat().st_mtime for f in files] == sorted(f.stat().st_mtime for f in files)
    assert pq.read_table(files[1]).equals(records_for(50, 100, 7))
    ids = records_for(0, 1000, 7)
    assert len(set(ids["id"].to_pylist())) == 1000 and set(ids["key"].to_pylist()) == set(range(7))
