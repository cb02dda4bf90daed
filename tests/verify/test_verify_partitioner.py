"""Cross-partition state is caught: every key in partition p's state belongs to p (issue 24, item 12).

The damage: partition 1's committed version-1 changelog copied, with its sidecar, over
partition 0's, in a checkpoint written before sidecars named their store (so no sidecar or
lineage check can tell: version 1's lineage is empty in every partition). The lineage and
state verifiers report a `misplaced-key` anomaly (and `cross-partition-key`: partition 1
holds those keys too), `ls --rebuildable` no longer vouches for partition 0, and `dump`
refuses to serve it. Spark's own checkpoints stay valid under the
partitioner their metadata implies, and a doctored copy is caught the same way.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from checkpoint_helpers import run_cli
from job_helpers import InProcessJob
from shared_runs import SharedRun

from statebed_job.config import JobOptions
from statebed_model.partitioning import run_partitioner
from statebed_store import CheckpointRef, CommitLog, Storage, StoreFiles, StoreId, open_storage
from statebed_store.changelog import parse_changelog
from statebed_store.checksum import make_sidecar
from statebed_store.naming import CHANGELOG, StateFileName
from statebed_store.partitioner import record_partitioner
from statebed_verify import verify_lineage, verify_state

PARTS = 3


pytestmark = pytest.mark.usefixtures("providers_closed")  # conftest.py: drained and closed after each test


def old_style_sidecars(root: Path) -> None:
    """Rewrite every state file's sidecar as sidecars were before they named their store and (version, id)."""
    for side in root.glob("state/**/*.crc"):
        if not side.name.startswith("."):
            data = side.with_name(side.name.removesuffix(".crc")).read_bytes()
            side.write_bytes(make_sidecar(data, {"executorId": "driver", "taskInfo": ""}))


def committed_path(storage: Storage, store: StoreId, batch: int) -> str:
    rec = CommitLog(storage).read(batch)
    assert rec is not None
    return store.path(StateFileName(rec.version, rec.id_for(store.operator, store.partition), CHANGELOG).name)


def copy_over(storage: Storage, src: StoreId, dst: StoreId, batch: int = 0) -> list[bytes]:
    """Partition `src`'s committed changelog of `batch`, and its sidecar, over `dst`'s; returns the keys it holds."""
    a, b = committed_path(storage, src, batch), committed_path(storage, dst, batch)
    for suffix in ("", ".crc"):
        storage.write(b + suffix, storage.read(a + suffix))
    keys = parse_changelog(storage.read(b), file=b).columns()[1]
    assert keys, f"{a} holds no records: nothing to misplace"
    return keys


@pytest.fixture
def job(tmp_path: Path) -> InProcessJob:
    """A 3-batch count run over 3 partitions, its partitioner recorded as `statebed run` does, old-style sidecars."""
    job = InProcessJob(tmp_path / "run", JobOptions(workload="count", batches=3, partitions=PARTS, rows_per_batch=300, keyspace=60))
    record_partitioner(job.storage, run_partitioner("count", PARTS))
    for b in range(3):
        assert job.batch(b).status == "committed"
    old_style_sidecars(Path(job.storage.url))
    return job


def test_a_healthy_run_passes_the_partition_check(job: InProcessJob, capsys: pytest.CaptureFixture[str]) -> None:
    """The positive side: the check ran (no 'not made' note) and found every key at home."""
    report = verify_lineage(job.storage, all_versions=True)
    assert report.valid is True and not report.anomalies and not [n for n in report.notes if "partition check" in n], report.notes
    assert verify_state(job.run.root).valid is True
    code, out, err = run_cli(capsys, "ls", job.storage.url, "--rebuildable", "--json")
    assert code == 0 and json.loads(out)["rebuildable"] == [[0, 2]] and "partition check" not in err


def test_a_changelog_copied_from_another_partition_is_caught(job: InProcessJob, capsys: pytest.CaptureFixture[str]) -> None:
    s = job.storage
    p0, p1 = StoreId(0, 0), StoreId(0, 1)
    foreign = copy_over(s, p1, p0)
    shown = s.display(committed_path(s, p0, 0))

    report = verify_lineage(s)
    assert report.valid is False
    [a] = [a for a in report.anomalies if a.kind == "misplaced-key"]
    assert (a.operator, a.partition, a.version) == (0, 0, 1) and a.files == [shown]
    assert a.keys and set(a.keys) <= {int.from_bytes(k, "big") for k in foreign}
    assert "belong to partition(s) 1" in a.detail and "spark-murmur3 over 3 partitions" in a.detail
    code, out, _ = run_cli(capsys, "verify", "lineage", s.url, "--json")
    assert code == 1 and sorted(x["kind"] for x in json.loads(out)["anomalies"]) == ["cross-partition-key", "misplaced-key"]

    state = verify_state(job.run.root)  # the final state replays version 1 (no snapshot yet)
    assert state.valid is False
    [m] = [a for a in state.anomalies if a.kind == "misplaced-key"]
    assert (m.partition, m.version) == (0, 3) and m.keys
    [x] = [a for a in state.anomalies if a.kind == "cross-partition-key"]  # partition 1 holds them too, no hash needed
    assert (x.partition, x.version) == (0, 3) and "partitions 0, 1 of operator 0 at version 3" in x.detail, x
    assert x.keys and set(x.keys) <= {k.hex() for k in foreign}

    code, out, err = run_cli(capsys, "ls", s.url, "--rebuildable", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["rebuildable"] == []
    [st] = [x for x in doc["stores"] if x["partition"] == 0]
    assert st["rebuildable"] == [] and st["firstUnrebuildable"]["file"] == shown
    assert "belong to partition(s) 1" in st["firstUnrebuildable"]["reason"]
    assert all(x["rebuildable"] == [[0, 2]] for x in doc["stores"] if x["partition"] != 0)

    for args in (["--batch", "0"], ["--operator", "0", "--partition", "0", "--batch", "0"], ["--operator", "0", "--partition", "0"]):
        code, out, err = run_cli(capsys, "dump", s.url, *args)
        assert code == 2 and out == "" and s.display(p0.dir) in err and "belong to partition(s) 1" in err, (args, err)
    code, out, _ = run_cli(capsys, "dump", s.url, "--operator", "0", "--partition", "1", "--batch", "0")
    assert code == 0 and out.count("\n") == len(foreign)  # partition 1 itself is served


def test_without_a_recorded_partitioner_the_check_is_not_made_and_says_so(job: InProcessJob) -> None:
    s = job.storage
    s.delete(["partitioner.json"])
    copy_over(s, StoreId(0, 1), StoreId(0, 0))
    report = verify_lineage(s)
    assert report.valid is False  # was valid: "partition check not made" (no hash known)
    [a] = report.anomalies  # the invariant that needs no partitioner: no key in two partitions at one version
    assert (a.kind, a.operator, a.version) == ("cross-partition-key", 0, 1) and a.keys, a
    assert "partitions 0, 1" in a.detail and len(a.files) == 2, a.detail
    assert any(n.startswith("partition check not made: the checkpoint records no partitioner") for n in report.notes), report.notes


def test_a_demo_checkpoint_records_its_partitioner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "demo"
    code, _, err = run_cli(capsys, "demo", "--checkpoint", str(ckpt), "--batches", "3", "--partitions", "3", "--rows", "300")
    assert code == 0, err
    assert json.loads((ckpt / "demo.json").read_text())["partitioner"] == {"scheme": "blake2b32", "partitions": 3, "key": "bytes"}
    storage = open_storage(ckpt)
    clean = verify_lineage(storage)
    assert clean.valid is True and not [n for n in clean.notes if "partition check" in n], clean.notes
    old_style_sidecars(ckpt)
    foreign = copy_over(storage, StoreId(0, 2), StoreId(0, 0))
    found = verify_lineage(storage).anomalies
    assert {(a.kind, a.partition, a.version) for a in found} == {("misplaced-key", 0, 1), ("cross-partition-key", 0, 1)}
    [a] = [a for a in found if a.kind == "misplaced-key"]
    assert set(a.keys) <= {k.decode() for k in foreign}


# -- Spark's own checkpoints ---------------------------------------------------------------------


@pytest.mark.parametrize("spark", ["4.1.4", "4.3.0"])
@pytest.mark.parametrize("query", ["agg", "dedup_agg", "join"])
def test_spark_fixtures_keep_every_key_at_home(native: dict[str, Path], spark: str, query: str, capsys: pytest.CaptureFixture[str]) -> None:
    storage = open_storage(native[spark] / query)
    report = verify_lineage(storage, all_versions=True)
    assert report.valid is True and not report.anomalies, report.to_json()["anomalies"]
    assert not [n for n in report.notes if "partition check" in n], report.notes
    code, out, err = run_cli(capsys, "ls", str(native[spark] / query), "--rebuildable", "--json")
    assert code == 0 and json.loads(out)["rebuildable"] and "partition check" not in err


@pytest.mark.parametrize(("query", "store"), [("agg", "default"), ("join", "left-keyWithIndexToValue")])
def test_a_doctored_spark_checkpoint_is_caught(native: dict[str, Path], tmp_path: Path, query: str, store: str) -> None:
    """A Spark 4.3 checkpoint with one partition's version-1 changelog copied over another's (sidecar rewritten
    without its creator, which names the Spark task): every other check passes, the partition check does not."""
    root = tmp_path / query
    shutil.copytree(native["4.3.0"] / query, root)
    storage = open_storage(root)
    names = ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"]
    idx = names.index(store) if query == "join" else 0
    src, dst = StoreId(0, 1, store), StoreId(0, 0, store)
    rec = CommitLog(storage).read(0)
    assert rec is not None
    path = {s: s.path(StateFileName(1, rec.id_for(0, s.partition, idx), CHANGELOG).name) for s in (src, dst)}
    data = storage.read(path[src])
    assert parse_changelog(data, file=path[src]).columns()[1], "partition 1's first changelog holds no records"
    storage.write(path[dst], data)
    storage.write(path[dst] + ".crc", make_sidecar(data))
    assert StoreFiles(storage, dst).verified_changelog_header(CheckpointRef(1, rec.id_for(0, 0, idx))).lineage == ()  # passes
    report = verify_lineage(storage)
    assert report.valid is False
    found = {(a.kind, a.operator, a.partition, a.version) for a in report.anomalies}
    assert found >= {("misplaced-key", 0, 0, 1), ("cross-partition-key", 0, 0, 1)}, found
    # and the next snapshot of partition 0 no longer agrees with the (doctored) changelogs before it
    assert {k for k, *_ in found} <= {"misplaced-key", "cross-partition-key", "snapshot-mismatch"}, found
    [a] = [a for a in report.anomalies if a.kind == "misplaced-key"]
    assert a.files == [storage.display(path[dst])] and a.keys and all(isinstance(k, list) and isinstance(k[0], str) for k in a.keys)


# -- a real `statebed run` (Spark's repartition routes the records) -------------------------------


@pytest.mark.slow
def test_a_real_run_records_its_partitioner_obeys_it_and_a_copied_changelog_is_caught(tmp_path: Path, local_v2_run: SharedRun) -> None:
    """The session's shared real run (count, 3 partitions): Spark's own `repartition(3, key)` must agree with the
    recorded partitioner on every key (else the clean run would be invalid); then the issue's damage on a copy of it."""
    assert local_v2_run.returncode == 0, local_v2_run.stderr[-3000:]
    run_dir = tmp_path / "run"
    shutil.copytree(local_v2_run.out, run_dir, symlinks=True)
    ckpt = run_dir / "checkpoint"
    assert json.loads((ckpt / "partitioner.json").read_text())["operators"] == {
        "0": {"scheme": "spark-murmur3", "partitions": 3, "key": "i64be"}
    }
    storage = open_storage(ckpt)
    clean = verify_lineage(storage, all_versions=True)
    assert clean.valid is True and not [n for n in clean.notes if "partition check" in n], clean.notes
    assert verify_state(run_dir).valid is True

    old_style_sidecars(ckpt)
    copy_over(storage, StoreId(0, 1), StoreId(0, 0))
    # the known partitioner places the foreign keys; the partitioner-free invariant sees them in two partitions
    found = {(a.kind, a.partition, a.version) for a in verify_lineage(storage).anomalies}
    assert found == {("misplaced-key", 0, 1), ("cross-partition-key", 0, 1)}
    state = verify_state(run_dir)
    assert state.valid is False and ("misplaced-key", 0) in {(a.kind, a.partition) for a in state.anomalies}
