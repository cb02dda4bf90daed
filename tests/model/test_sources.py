"""The source seam: the ingest landing/ack contract (local and S3) and each source's ground truth."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from job_helpers import records

from statebed_base.errors import CorruptFileError, UsageError
from statebed_model.records import records_for
from statebed_model.rundir import RunDir, RunInfo, table_bytes
from statebed_model.sources import GeneratedSource, IngestSource, open_source
from statebed_store import Storage


def batch(first: int, n: int = 10) -> pa.Table:
    ids = list(range(first, first + n))
    return records(ids, [i % 5 for i in ids])


def test_land_writes_the_data_then_its_ack(storage: Storage) -> None:
    source = IngestSource(storage)
    acks = [source.land(batch(0)), source.land(batch(100, 3))]
    assert [a.seq for a in acks] == [0, 1] and source.landed() == [0, 1]
    assert acks[1].file == "data/000000000001.parquet" and acks[1].ids == [100, 101, 102]
    doc = json.loads(storage.read("acks/000000000001.json"))
    assert doc["schema"] == 1 and doc["seq"] == 1 and doc["records"] == 3 and doc["file"] == acks[1].file
    assert doc["ingested_at"].endswith("Z") and doc["ingested_at"] >= acks[0].ingested_at
    assert source.acks() == acks
    assert source.records(["000000000001.parquet"]).equals(batch(100, 3))


def test_concurrent_landers_never_share_a_sequence_number(tmp_path: Path) -> None:
    """Each lander picks the next free number; a create-only write that loses the race takes the next."""
    landers = [IngestSource(fresh_storage(tmp_path)) for _ in range(4)]
    barrier = threading.Barrier(4)

    def land_many(source: IngestSource, k: int) -> None:
        barrier.wait()
        for i in range(10):
            source.land(batch(1000 * k + 10 * i))

    threads = [threading.Thread(target=land_many, args=(s, k)) for k, s in enumerate(landers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    acks = landers[0].acks()
    assert [a.seq for a in acks] == list(range(40))
    for a in acks:  # every ack names the file holding exactly its records
        assert landers[0].records([a.file.removeprefix("data/")])["id"].to_pylist() == a.ids


def fresh_storage(root: Path) -> Storage:  # a fresh handle per lander, as separate services would have
    from statebed_store import open_storage

    return open_storage(root)


def test_ingest_ground_truth(tmp_path: Path) -> None:
    source = IngestSource(fresh_storage(tmp_path))
    source.land(batch(0))
    source.land(batch(100))
    source.landing.write("data/000000000002.parquet", table_bytes(batch(200)))  # landed, never acknowledged
    source.land(batch(300))
    source.land(batch(400))
    n = [IngestSource.data_name(seq).removeprefix("data/") for seq in range(5)]
    read = {0: [n[0], n[2]], 1: [n[3]], 2: [n[3]], 3: [n[4]]}
    truth = source.ground_truth(read, committed=[0, 1, 2])  # batch 3 read seq 4 but is not committed
    assert sorted(truth.inputs) == [0, 1, 2] and truth.inputs[0].num_rows == 20 and not truth.unknown
    by_kind = {f.kind: f for f in truth.findings}
    assert set(by_kind) == {"lost-acknowledged", "duplicated-acknowledged"}
    assert by_kind["lost-acknowledged"].records == list(range(100, 110))  # seq 1: older than seq 3, read by nobody
    assert by_kind["duplicated-acknowledged"].batches == [1, 2]
    assert any(n.startswith("not-yet-processed: 1 acknowledged file(s), 10 record(s)") for n in truth.notes)  # seq 4
    assert any("never acknowledged (seq [2])" in n for n in truth.notes)


def test_generated_ground_truth_needs_spark_s_log(tmp_path: Path) -> None:
    source = GeneratedSource(rows_per_batch=10, keyspace=3)
    truth = source.ground_truth({0: ["000000.parquet"], 1: ["000001.parquet", "000002.parquet"], 3: ["x.csv"]}, [0, 1, 2, 3])
    assert truth.inputs[1].equals(records_for(10, 30, 3)) and truth.inputs[0].equals(records_for(0, 10, 3))
    assert set(truth.unknown) == {2, 3} and "do not say which files batch 2 read" in truth.unknown[2] and "x.csv" in truth.unknown[3]


def test_open_source_from_run_json(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    old = RunInfo(workload="count", format="v2", partitions=1, checkpoint="checkpoint", params={"rows_per_batch": 7, "keyspace": 3})
    src = open_source(old, run)  # a run.json from before sources: the generator, from its params
    assert isinstance(src, GeneratedSource) and (src.rows_per_batch, src.keyspace) == (7, 3) and src.stream_dir() == tmp_path / "source"
    ingest = RunInfo(workload="count", format="v2", partitions=1, checkpoint="c", source={"kind": "ingest", "landing": str(tmp_path / "l")})
    src = open_source(ingest, run)
    assert isinstance(src, IngestSource) and src.stream_dir() == tmp_path / "l" / "data"
    with pytest.raises(UsageError, match="nothing has landed yet"):
        src.prepare(6)
    with pytest.raises(UsageError, match="unknown source"):
        open_source(RunInfo(workload="count", format="v2", partitions=1, checkpoint="c", source={"kind": "kafka"}), run)


def test_a_damaged_ack_is_named(tmp_path: Path) -> None:
    source = IngestSource(fresh_storage(tmp_path))
    source.land(batch(0))
    source.landing.write("acks/000000000000.json", b'{"schema": 1, "seq": 0}')
    with pytest.raises(CorruptFileError, match=r"acks/000000000000.json: not an ack record"):
        source.acks()
