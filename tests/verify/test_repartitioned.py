"""Checkpoints Spark 4.3 repartitioned offline (`spark._streamingCheckpointManager.repartition`,
issue 35 #5): the partition count changes at a batch of its own, and every check reads the count
of the batch that committed a version. Fixtures made once by `tests/fixtures/make_native_fixtures.py
--repartition AT:N` (committed tarballs): `up`, agg and dedup_agg grown from 3 to 5 partitions as
batch 5; `down`, agg shrunk from 5 to 2 partitions as batch 5; `v1`, agg on checkpoint format 1
grown from 3 to 5 as batch 5 (`--conf spark.sql.streaming.stateStore.checkpointFormatVersion=1`:
Spark repartitions V1 only when the session's format is 1)."""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest
from checkpoint_helpers import run_cli
from snapshot_surgery import rewrite_snapshot, snapshot_rows

from statebed_store import CommitLog, StoreFiles, StoreId, open_storage
from statebed_store.cleanup import cleanup_checkpoint
from statebed_store.column_families import column_family_names_at
from statebed_store.partitioner import checkpoint_partitioning
from statebed_store.rebuild import rebuildability, require_rebuildable
from statebed_verify import verify_lineage, verify_repartition
from statebed_verify.partitions import partition_anomalies

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

import judge_mutations

NATIVE = Path(__file__).parents[1] / "fixtures" / "native"
FIXTURES = {"up": "spark-4.3.0-repartitioned", "down": "spark-4.3.0-repartitioned-down", "v1": "spark-4.3.0-repartitioned-v1"}
CASES = [("up", "agg", 3, 5), ("up", "dedup_agg", 3, 5), ("down", "agg", 5, 2)]


def extracted(tmp_path: Path, which: str) -> Path:
    with tarfile.open(NATIVE / f"{FIXTURES[which]}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / FIXTURES[which]


@pytest.mark.parametrize(("which", "query", "before", "after"), CASES)
def test_a_repartitioned_checkpoint_is_valid_under_each_batchs_partition_count(
    tmp_path: Path, which: str, query: str, before: int, after: int
) -> None:
    root = extracted(tmp_path, which) / query
    storage = open_storage(root)
    log = CommitLog(storage)
    assert [log.read(b).partition_count(0) for b in log.batch_ids()] == [before] * 5 + [after] * 4  # type: ignore[union-attr]
    report = verify_lineage(storage, all_versions=True)
    assert report.valid is True, report.to_json()["anomalies"]
    assert not report.orphans and not [n for n in report.notes if "partition check not made" in n], report.notes
    gone = range(after, before) if before > after else range(before, after)
    versions = "6..9" if before > after else "1..5"
    for p in gone:  # the partitions a side of the repartition does not have
        assert any(f"partition {p} store default: not part of the batches committing version(s) {versions}" in n for n in report.notes)


def test_a_key_is_checked_against_the_count_of_the_batch_that_committed_it(tmp_path: Path) -> None:
    """Partition 4's files after the repartition hold keys Murmur3 routes to 4 of 5: under the
    count the operator's metadata still records (3) every one of them would be misplaced."""
    storage = open_storage(extracted(tmp_path, "up") / "agg")
    store = StoreId(0, 4)
    files = StoreFiles(storage, store)
    refs = [r for r in files.refs() if r.version in (6, 7, 9)]  # version 8 changed no key of this partition
    parts = checkpoint_partitioning(storage)
    assert parts.get(store) is not None and parts.get(store).partitions == 3  # type: ignore[union-attr]
    assert partition_anomalies(parts, store, files, refs, [], {r.version: 5 for r in refs}) == []
    wrong = partition_anomalies(parts, store, files, refs, [], {r.version: 3 for r in refs})
    assert {a.version for a in wrong} == {r.version for r in refs} and all(a.kind == "misplaced-key" for a in wrong)


def test_a_file_past_the_drop_of_its_partition_is_left_behind_by_the_repartition(tmp_path: Path) -> None:
    root = extracted(tmp_path, "down") / "agg"
    store = root / "state" / "0" / "3"
    (five,) = [f for f in store.iterdir() if f.name.startswith("5_") and f.name.endswith(".changelog")]
    stray = store / "7_0b7e3c1a-0000-4000-8000-000000000007.changelog"
    shutil.copyfile(five, stray)
    report = verify_lineage(open_storage(root))
    assert report.valid is True, report.to_json()["anomalies"]
    (orphan,) = report.orphans
    assert (orphan["partition"], orphan["version"]) == (3, 7)
    assert orphan["why"] == "left behind by a repartition: the batch committing version 7 has 2 partition(s)"


def test_dump_serves_the_stores_of_the_batch_it_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = extracted(tmp_path, "up") / "agg"
    for batch, parts in ((3, {0, 1, 2}), (8, {0, 1, 2, 3, 4})):
        code, out, err = run_cli(capsys, "dump", str(root), "--batch", str(batch))
        assert code == 0, err
        rows = [json.loads(line) for line in out.splitlines()]
        assert {r["partition"] for r in rows} <= parts and len(rows) == len({r.get("key", r.get("key_b64")) for r in rows})
    expected = json.loads((root.parent / "agg.expected.json").read_text())["counts"]
    assert len(rows) == len(expected)  # the final state: each key once, across the five partitions
    code, _, err = run_cli(capsys, "dump", str(root), "--operator", "0", "--partition", "4", "--batch", "2")
    assert code == 2 and "batch 2 committed 3 partition(s) of operator 0" in err and "a repartition" in err


def test_every_batch_stays_rebuildable_across_the_repartition(tmp_path: Path) -> None:
    storage = open_storage(extracted(tmp_path, "up") / "agg")
    doc = rebuildability(storage)
    assert doc["rebuildable"] == [[0, 8]], doc
    by_partition = {s["partition"]: s["rebuildable"] for s in doc["stores"]}
    assert by_partition == {0: [[0, 8]], 1: [[0, 8]], 2: [[0, 8]], 3: [[5, 8]], 4: [[5, 8]]}
    assert {c.store.partition for c in require_rebuildable(storage, 3)} == {0, 1, 2}  # what a rewind to batch 3 checks


@pytest.mark.parametrize(("which", "query"), [("up", "agg"), ("down", "agg")])
def test_cleanup_keeps_every_needed_file_across_the_repartition(tmp_path: Path, which: str, query: str) -> None:
    root = extracted(tmp_path, which) / query
    storage = open_storage(root)
    needed, _, _ = judge_mutations.needed_files(root)
    plan = cleanup_checkpoint(storage, None, dry_run=True, sst_orphan_grace_s=0)  # keep what the commit log keeps
    proposed = {d for st in plan.stores for d in st.deleted}
    assert len(plan.stores) == 5 and not {storage.display(p) for p in needed} & proposed
    assert verify_lineage(storage).valid is True


@pytest.mark.parametrize("which", ["up", "down"])
def test_an_older_snapshot_under_the_repartitions_name_is_a_repartition_mismatch(tmp_path: Path, which: str) -> None:
    """The repartition writes version 6 as snapshots with no changelog: no replay route reaches them, and
    partition 0's older snapshot (copied with its sidecar) holds keys a later batch overwrites. The rows
    over all partitions before and after the repartition differ (the mutation benchmark's two false valids)."""
    root = extracted(tmp_path, which) / "agg"
    store = root / "state" / "0" / "0"
    (six,) = store.glob("6_*.zip")
    older = max(store.glob("[1-5]_*.zip"), key=lambda f: int(f.name.split("_")[0]))
    for suffix in ("", ".crc"):
        shutil.copyfile(f"{older}{suffix}", f"{six}{suffix}")
    report = verify_lineage(open_storage(root))
    assert report.valid is False
    (found,) = report.anomalies
    assert (found.kind, found.operator, found.version, found.batches) == ("repartition-mismatch", 0, 6, [4, 5])
    assert str(six) in found.files and "a repartition moves rows" in found.detail


# -- `statebed verify repartition`: a correct repartition, and hand-corrupted ones ------------------


def _corrupted(tmp_path: Path, change: str, which: str = "up") -> tuple[Path, bytes]:
    """The `up` (or `v1`) agg fixture (3 -> 5 partitions as batch 5, version 6) with one key of the
    new partition 0 moved to partition 3, dropped, or duplicated into partition 3: whole, correct
    files (`snapshot_surgery`), only the rows differ. Returns the checkpoint and the key."""
    root = extracted(tmp_path, which) / "agg"
    p0, p3 = StoreId(0, 0), StoreId(0, 3)
    rows = snapshot_rows(root, p0, 6)
    key = sorted(rows)[0]
    if change in ("moved", "dropped"):
        rewrite_snapshot(root, p0, 6, lambda r: {k: v for k, v in r.items() if k != key})
    if change in ("moved", "duplicated"):
        rewrite_snapshot(root, p3, 6, lambda r: {**r, key: rows[key]})
    return root, key


def test_a_correct_repartition_is_valid_and_a_checkpoint_without_one_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = extracted(tmp_path, "up") / "agg"
    report = verify_repartition(open_storage(root))
    assert report.valid is True
    doc = report.to_json()
    assert [(r["operator"], r["batch"], r["version"], r["partitions"], r["valid"]) for r in doc["repartitions"]] == [
        (0, 5, 6, {"before": 3, "after": 5}, True)
    ]
    assert run_cli(capsys, "verify", "repartition", str(root), "--json")[0] == 0
    plain = tmp_path / "plain"
    with tarfile.open(NATIVE / "spark-4.3.0.tar.gz") as tar:
        tar.extractall(plain, filter="data")
    code, out, _ = run_cli(capsys, "verify", "repartition", str(plain / "spark-4.3.0" / "agg"), "--json")
    assert code == 3 and json.loads(out)["valid"] == "unknown" and json.loads(out)["repartitions"] == []


@pytest.mark.parametrize("which", ["up", "v1"])
@pytest.mark.parametrize(
    ("change", "placement", "rows"),
    [("moved", False, True), ("dropped", True, False), ("duplicated", False, False)],
)
def test_a_key_moved_dropped_or_duplicated_by_the_repartition_is_caught(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, placement: bool, rows: bool, which: str
) -> None:
    root, key = _corrupted(tmp_path, change, which)
    code, out, _ = run_cli(capsys, "verify", "repartition", str(root), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["valid"] is False
    (rp,) = doc["repartitions"]
    lineage = True if which == "up" else "unknown"  # a V1 entry records no ids
    assert rp["valid"] is False and rp["checks"] == {"placement": placement, "rows": rows, "lineage": lineage}, rp["anomalies"]
    assert all(a["version"] == 6 and a["operator"] == 0 for a in rp["anomalies"])


def test_a_v1_repartition_is_found_in_the_offset_log_and_judged_but_its_lineage_is_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A V1 commit names no partitions: the count each batch ran with is its offset log entry's
    `spark.sql.shuffle.partitions`. Placement and rows are checked as on V2; the lineage cannot be."""
    root = extracted(tmp_path, "v1") / "agg"
    storage = open_storage(root)
    log = CommitLog(storage)
    assert [log.read(b).partition_count(0) for b in log.batch_ids()] == [None] * 11  # type: ignore[union-attr]
    code, out, _ = run_cli(capsys, "verify", "repartition", str(root), "--json")
    doc = json.loads(out)
    assert code == 3 and doc["valid"] == "unknown" and doc["anomalies"] == []
    (rp,) = doc["repartitions"]
    assert (rp["batch"], rp["partitions"], rp["valid"]) == (5, {"before": 3, "after": 5}, "unknown")
    assert rp["checks"] == {"placement": True, "rows": True, "lineage": "unknown"}
    report = verify_lineage(storage)
    assert report.valid == "unknown" and report.anomalies == [] and not report.orphans
    assert any("partition 4 store default: not part of the batches committing version(s) 1..5" in n for n in report.notes)


def test_a_transform_with_state_repartition_renumbers_column_families_and_is_valid(tmp_path: Path) -> None:
    """Spark 4.3's repartition of a transformWithState query (tests/fixtures/native/
    spark-4.3.0-repartitioned-tws.tar.gz, written by tests/native_operators/repartition_operators.py
    --only tws: 2 -> 3 partitions as batch 9) assigns the column family ids afresh: the same rows
    carry other key prefixes before and after. They are compared by family name, so the repartition
    is valid (compared by raw bytes, every moved row looked lost and new: repartition-mismatch)."""
    with tarfile.open(NATIVE / "spark-4.3.0-repartitioned-tws.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    root = tmp_path / "spark-4.3.0-repartitioned-tws" / "tws"
    files = StoreFiles(open_storage(root), StoreId(0, 0))
    before, after = column_family_names_at(files, 9), column_family_names_at(files, 10)
    assert set(before.values()) == set(after.values()) and before != after
    report = verify_repartition(open_storage(root))
    assert report.valid is True, report.anomalies
    assert [(r["batch"], r["partitions"]) for r in report.to_json()["repartitions"]] == [(9, {"before": 2, "after": 3})]
