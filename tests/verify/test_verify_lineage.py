"""The lineage verifier, proven by positive controls: each damage must be reported as its kind."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from checkpoint_helpers import commit, ref_of, rewrite_changelog, run_cli

from statebed_store import (
    CheckpointRef,
    CommitLog,
    SnapshotUploader,
    StateStoreProvider,
    Storage,
    StoreFiles,
    StoreId,
    StoreOptions,
    open_storage,
)
from statebed_store.checksum import make_sidecar
from statebed_store.commitlog import render_commit
from statebed_store.lineage import lineage_to_json
from statebed_store.lz4block import compress, decompress
from statebed_verify import KINDS, verify_lineage
from statebed_verify.restart_files import KINDS as RESTART_KINDS

FIXTURES = Path(__file__).parents[1] / "fixtures"
PARTS = 3


@dataclass
class Built:
    storage: Storage
    committed: list[dict[int, CheckpointRef]] = field(default_factory=list)  # per partition: version -> ref
    losers: dict[tuple[int, int], CheckpointRef] = field(default_factory=dict)  # (partition, version) -> ref

    def path(self, p: int, ref: CheckpointRef, kind: str = "changelog") -> str:
        return StoreId(0, p).path(f"{ref.version}_{ref.id}.{kind}")


def build(storage: Storage, options: StoreOptions, tmp: Path, versions: int = 10, format: str = "v2") -> Built:
    """A driver over 3 partitions; partition 1 gets a losing attempt at version 4."""
    uploader = SnapshotUploader()
    opts = options.with_(snapshot_interval=4, format=format)
    execs = [StateStoreProvider(storage, StoreId(0, p), opts.with_(local_dir=tmp / "exec"), uploader=uploader) for p in range(PARTS)]
    spec = StateStoreProvider(storage, StoreId(0, 1), opts.with_(local_dir=tmp / "spec"), uploader=uploader)
    log = CommitLog(storage)
    out = Built(storage, [{0: CheckpointRef(0)} for _ in range(PARTS)])
    for v in range(1, versions + 1):
        ids = []
        for p in range(PARTS):
            base = out.committed[p][v - 1]
            if p == 1 and v == 4:
                out.losers[(1, 4)] = ref_of(commit(spec, base, {b"p1-k": b"loser"}))
            ref = ref_of(commit(execs[p], base, {b"p%d-k%d" % (p, v % 5): b"v%d" % v}))  # a key lives in one partition
            out.committed[p][v] = ref
            ids.append([ref.id])
        log.write(v - 1, {0: ids} if format == "v2" else None)
    assert uploader.drain(30)
    for e in [*execs, spec]:
        e.close()
    return out


@pytest.fixture
def built(storage: Storage, options: StoreOptions, tmp_path: Path) -> Built:
    return build(storage, options, tmp_path)


def kinds(report) -> set[str]:  # type: ignore[no-untyped-def]
    return {a.kind for a in report.anomalies}


def test_a_healthy_checkpoint_is_valid_and_lists_its_orphan(built: Built) -> None:
    report = verify_lineage(built.storage, all_versions=True)
    assert report.valid is True and report.anomalies == [] and report.format == "v2"
    assert report.checked == {"operators": 1, "partitions": PARTS, "versions": 10}
    assert [(o["partition"], o["version"], o["id"]) for o in report.orphans] == [(1, 4, built.losers[(1, 4)].id)]
    assert set(report.to_json()) >= {"valid", "format", "checked", "anomalies", "orphans"}


def test_commit_log_pointing_at_an_orphan_is_a_fork(built: Built) -> None:
    """The driver 'committed' the losing attempt of version 4: version 5 was built on the other one."""
    s, loser = built.storage, built.losers[(1, 4)]
    ids = [[built.committed[p][4].id] for p in range(PARTS)]
    ids[1] = [loser.id]
    s.write("commits/3", render_commit({0: ids}))
    report = verify_lineage(s)
    assert report.valid is False
    # 5 says its base is the real winner; 6-8 (lineage back to the snapshot at 4) pass through it.
    assert {(a.kind, a.partition, a.version) for a in report.anomalies} == {
        ("lineage-break", 1, 5),
        ("non-linear-lineage", 1, 6),
        ("non-linear-lineage", 1, 7),
        ("non-linear-lineage", 1, 8),
    }
    a = next(a for a in report.anomalies if a.kind == "lineage-break")
    assert (a.operator, a.partition, a.version) == (0, 1, 5)
    assert a.ids == [built.committed[1][4].id, loser.id]
    assert a.files == [s.display(built.path(1, built.committed[1][5]))]
    # the real winner of version 4 is now the orphan
    assert (1, 4, built.committed[1][4].id) in [(o["partition"], o["version"], o["id"]) for o in report.orphans]


def test_lineage_that_skips_a_version(built: Built) -> None:
    c = built.committed[2]
    bad = lineage_to_json([c[4], c[6]])  # version 7's lineage without 5
    rewrite_changelog(built.storage, built.path(2, c[7]), bad)
    report = verify_lineage(built.storage)
    a = next(a for a in report.anomalies if a.kind == "non-linear-lineage")
    assert (a.partition, a.version) == (2, 7) and "increasing by one" in a.detail
    # reported once (the version's own file), although every sound committed version is planned now
    assert {(a.kind, a.version) for a in report.anomalies} == {("non-linear-lineage", 7)}


def test_lineage_through_an_uncommitted_attempt(built: Built) -> None:
    """Version 6's lineage names the loser of version 4 before its (correct) base 5."""
    c, loser = built.committed[1], built.losers[(1, 4)]
    rewrite_changelog(built.storage, built.path(1, c[6]), lineage_to_json([loser, c[5]]))
    report = verify_lineage(built.storage)
    a = next(a for a in report.anomalies if a.kind == "non-linear-lineage")
    assert (a.partition, a.version) == (1, 6) and a.ids == [loser.id, c[4].id]


def test_missing_committed_changelog_without_snapshot(built: Built) -> None:
    c = built.committed[0]
    built.storage.delete([built.path(0, c[10])])  # latest: no snapshot at 10
    report = verify_lineage(built.storage)
    assert kinds(report) == {"missing-checkpoint"}  # reported once: no plan is looked for a missing file
    miss = next(a for a in report.anomalies if a.kind == "missing-checkpoint")
    assert (miss.partition, miss.version, miss.ids) == (0, 10, [c[10].id])
    assert miss.files == [built.storage.display(built.path(0, c[10]))]


def test_missing_changelog_in_the_middle_breaks_the_plan(built: Built) -> None:
    c = built.committed[2]
    built.storage.delete([built.path(2, c[9])])
    report = verify_lineage(built.storage)
    assert {(a.kind, a.partition, a.version) for a in report.anomalies} == {("missing-checkpoint", 2, 9), ("unplannable", 2, 10)}


@pytest.mark.parametrize("damage", ["truncated", "flipped-byte", "empty", "unknown-format"])
def test_damaged_files_are_unreadable(built: Built, damage: str) -> None:
    s, ref = built.storage, built.committed[1][6]
    path = built.path(1, ref)
    data = s.read(path)
    if damage == "truncated":
        s.write(path, data[: len(data) // 2])
    elif damage == "flipped-byte":
        s.write(path, data[:30] + bytes([data[30] ^ 0x40]) + data[31:])
    elif damage == "empty":
        s.write(path, b"")
    else:
        payload, _ = decompress(data, file=path)
        new = compress(b"\x00\x02v9" + payload[4:])
        s.write(path, new)
        s.write(path + ".crc", make_sidecar(new))
    report = verify_lineage(s)
    a = next(a for a in report.anomalies if a.kind == "unreadable-file")
    assert (a.partition, a.version) == (1, 6) and a.files == [s.display(path)]
    assert report.valid is False


def test_commit_gap(built: Built) -> None:
    built.storage.delete(["commits/4"])
    report = verify_lineage(built.storage)
    gap = [a for a in report.anomalies if a.kind == "commit-gap"]
    assert [(a.version, a.operator) for a in gap] == [(5, None)]
    assert "batch 4" in gap[0].detail


def test_v1_checkpoint_is_unknown(
    local_storage: Storage, options: StoreOptions, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build(local_storage, options, tmp_path, versions=4, format="v1")
    report = verify_lineage(local_storage)
    assert report.valid == "unknown" and report.format == "v1" and "no lineage to check" in report.notes[0]
    code, out, _ = run_cli(capsys, "verify", "lineage", local_storage.url, "--json")
    assert code == 3 and json.loads(out)["valid"] == "unknown"


def test_cli_exit_codes_and_json(local_storage: Storage, options: StoreOptions, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    built = build(local_storage, options, tmp_path)
    code, out, _ = run_cli(capsys, "verify", "lineage", built.storage.url, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["valid"] is True and len(doc["orphans"]) == 1
    built.storage.delete([built.path(0, built.committed[0][10])])
    code, out, _ = run_cli(capsys, "verify", "lineage", built.storage.url)
    assert code == 1 and "INVALID" in out and "missing-checkpoint" in out
    code, _, err = run_cli(capsys, "verify", "lineage", str(tmp_path / "nope"))
    assert code == 2 and "no such directory" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run_cli(capsys, "verify", "lineage", str(empty))
    assert code == 2 and "no commit log" in err


def test_a_crashing_checker_is_unknown(
    local_storage: Storage, options: StoreOptions, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    build(local_storage, options, tmp_path, versions=2)

    def boom(*a: object, **k: object) -> None:
        raise RuntimeError("bug in a checker")

    monkeypatch.setattr("statebed_cli.commands.verify.verify_lineage", boom)
    code, out, _ = run_cli(capsys, "verify", "lineage", local_storage.url, "--json")
    assert code == 3 and json.loads(out)["valid"] == "unknown" and "bug in a checker" in json.loads(out)["error"]


def test_every_declared_anomaly_kind_is_produced_and_no_other(
    local_storage: Storage, options: StoreOptions, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One damage per partition plus a commit gap: the kinds reported are exactly `KINDS`, in the CLI's JSON too."""
    built = build(local_storage, options, tmp_path)
    s, c = built.storage, built.committed
    s.write("commits/3", render_commit({0: [[c[0][4].id], [built.losers[(1, 4)].id], [c[2][4].id]]}))  # fork on 1
    s.delete([built.path(0, c[0][10])])  # missing, unplannable
    s.write(built.path(2, c[2][6]), b"")  # unreadable
    for suffix in ("", ".crc"):  # foreign: partition 1's changelog and sidecar copied over partition 0's
        s.write(built.path(0, c[0][2]) + suffix, s.read(built.path(1, c[1][2]) + suffix))
    s.delete(["commits/8"])  # gap
    copied = s.read(built.path(0, c[0][3]))  # cross-partition: partition 0's keys in partition 2's file of version 3
    s.write(built.path(2, c[2][3]), copied)
    s.write(built.path(2, c[2][3]) + ".crc", make_sidecar(copied))
    s.write("partitioner.json", b'{"operators": {"0": {"scheme": "blake2b32", "partitions": 1, "key": "bytes"}}}')  # misplaced: 1, 2
    reported = {a.kind for a in verify_lineage(s, all_versions=True).anomalies}
    # statebed's zips name their version: tests/verify/test_judge.py forges Spark's; no repartition here (tests/verify/test_repartitioned.py);
    # a store directory has no query files (tests/verify/test_restart_files.py damages Spark's)
    expected = set(KINDS) - {"snapshot-mismatch", "repartition-mismatch", *RESTART_KINDS}
    assert reported == expected
    code, out, _ = run_cli(capsys, "verify", "lineage", s.url, "--all-versions", "--json")
    assert code == 1 and {a["kind"] for a in json.loads(out)["anomalies"]} == expected


# -- Spark's own checkpoints ---------------------------------------------------------------------


@pytest.mark.parametrize("spark", ["4.1.4", "4.3.0"])
@pytest.mark.parametrize("query", ["agg", "dedup_agg", "join"])
def test_spark_native_fixtures_are_valid(native: dict[str, Path], spark: str, query: str) -> None:
    report = verify_lineage(open_storage(native[spark] / query), all_versions=True)
    assert report.valid is True, report.to_json()["anomalies"]
    assert report.orphans == []
    ops = {"agg": 1, "dedup_agg": 2, "join": 1}[query]
    assert report.checked["operators"] == ops and report.checked["partitions"] == 3 * ops


def test_forged_join_commit_log_names_the_store(native: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "join"
    shutil.copytree(native["4.3.0"] / "join", root)
    storage = open_storage(root)
    rec = CommitLog(storage).read(5)
    assert rec is not None and rec.state_ids is not None
    ids = {op: [list(p) for p in parts] for op, parts in rec.state_ids.items()}
    ids[0][2][3] = "0badc0de-0000-0000-0000-000000000000"  # right-keyWithIndexToValue of partition 2
    (root / "commits" / "5").write_bytes(render_commit(ids))
    report = verify_lineage(storage)
    assert {(a.kind, a.partition, a.version) for a in report.anomalies} == {
        ("missing-checkpoint", 2, 6),
        ("lineage-break", 2, 7),
        ("non-linear-lineage", 2, 8),
    }
    assert all("right-keyWithIndexToValue" in a.detail for a in report.anomalies)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_spark_checkpoint_made_here_verifies_then_fails_when_forged(tmp_path: Path) -> None:
    """A real Spark (pyspark 4.3, local mode) V2 checkpoint: valid as written, invalid once forged."""
    out = tmp_path / "native"
    cmd = [
        sys.executable,
        str(FIXTURES / "make_native_fixtures.py"),
        str(out),
        "--only",
        "agg",
        "--batches",
        "4",
        "--pause",
        "1.1",
        "--settle",
        "2.5",
        "--skip-verify",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    storage = open_storage(out / "agg")
    report = verify_lineage(storage, all_versions=True)
    assert report.valid is True and report.checked["versions"] == 4 and report.format == "v2"
    # Forge: batch 1 "commits" partition 0 at version 2 with an id no task produced, as a
    # driver without Spark 4.3's base-id check could after a mixed-up rerun.
    rec = CommitLog(storage).read(1)
    assert rec is not None and rec.state_ids is not None
    ids = {op: [list(p) for p in parts] for op, parts in rec.state_ids.items()}
    good = ids[0][0][0]
    ids[0][0][0] = "11111111-2222-3333-4444-555555555555"
    (out / "agg" / "commits" / "1").write_bytes(render_commit(ids))
    report = verify_lineage(storage)
    assert report.valid is False
    assert {(a.kind, a.partition, a.version) for a in report.anomalies} >= {("missing-checkpoint", 0, 2), ("lineage-break", 0, 3)}
    assert any(o["id"] == good for o in report.orphans)
    assert StoreFiles(storage, StoreId(0, 0)).has_changelog(CheckpointRef(2, good))


def test_sparks_retention_excuses_only_versions_below_its_window(native: dict[str, Path], tmp_path: Path) -> None:
    """Spark's retention deletes only versions <= F + 1 (F: the first kept commit entry; see
    `statebed_store.retention`). Inside the window the commit log keeps, a committed version with no
    file is `missing-checkpoint` however many snapshots surround it (it was a note before: a false valid)."""

    def fresh(name: str, first_entry: int = 0) -> Path:
        root = tmp_path / name
        shutil.copytree(native["4.3.0"] / "agg", root)
        for b in range(first_entry):  # as Spark's purge leaves it
            for log in ("commits", "offsets"):
                (root / log / str(b)).unlink()
        return root

    def drop(root: Path, version: int) -> None:
        for f in (root / "state" / "0" / "0").iterdir():
            if f.name.startswith(f"{version}_") and f.name.endswith((".changelog", ".changelog.crc")):
                f.unlink()

    def found(root: Path) -> set[tuple[str, int | None, int | None]]:
        return {(a.kind, a.partition, a.version) for a in verify_lineage(open_storage(root)).anomalies}

    whole = fresh("whole")
    drop(whole, 3)  # between the snapshots of 2 and 4, the log kept whole (0..9)
    assert found(whole) == {("missing-checkpoint", 0, 3)}
    purged = fresh("purged", first_entry=4)  # the log starts at batch 4: versions <= 5 may be gone
    drop(purged, 5)  # the version the first kept entry committed (the log keeps one entry more than the state)
    report = verify_lineage(open_storage(purged))
    assert report.valid is True, report.to_json()["anomalies"]
    assert any("version(s) 5 have no files, below the retained window" in n for n in report.notes), report.notes
    drop(purged, 7)  # F + 3: inside the window, no retention deletes it
    assert found(purged) == {("missing-checkpoint", 0, 7)}
    shutil.rmtree(purged / "offsets")  # statebed's layout, no retention record: every kept entry is required
    (purged / "metadata").unlink()  # nor the query's own files (statebed keeps them in the run's spark-checkpoint/)
    assert found(purged) == {("missing-checkpoint", 0, 5), ("missing-checkpoint", 0, 7)}


def test_a_statebed_store_is_resumable_only_judged_with_its_query_checkpoint(
    local_storage: Storage, options: StoreOptions, tmp_path: Path, native: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """statebed's store keeps Spark's query files apart (a run's spark-checkpoint/): without them
    `resumable` is unknown; with `--query` they are checked, and statebed's commit log must be
    Spark's latest commit or the planned batch after it."""
    built = build(local_storage, options, tmp_path)  # batches 0..9, as Spark's agg fixture
    query = tmp_path / "spark-checkpoint"
    shutil.copytree(native["4.3.0"] / "agg", query, ignore=shutil.ignore_patterns("state"))
    assert verify_lineage(built.storage).resumable == "unknown"
    report = verify_lineage(built.storage, query=open_storage(query))
    assert report.valid is True and report.resumable is True, report.resumable_reasons
    code, out, _ = run_cli(capsys, "verify", "lineage", built.storage.url, "--query", str(query), "--json")
    assert code == 0 and json.loads(out)["resumable"] is True
    built.storage.delete(["commits/9"])  # statebed's log behind Spark's commit of batch 9: that batch's state is lost
    report = verify_lineage(built.storage, query=open_storage(query))
    assert report.valid is False and report.resumable is False
    assert [a.kind for a in report.anomalies] == ["inconsistent-query-file"]
    assert "behind Spark's latest commit 9" in report.anomalies[0].detail
    (query / "metadata").unlink()  # a damaged query file is named in the query checkpoint
    report = verify_lineage(built.storage, query=open_storage(query))
    assert any(a.kind == "missing-query-file" and a.files == [str(query / "metadata")] for a in report.anomalies)
    (query / "commits" / "9").write_text("v2\n{")  # Spark's own latest commit cut short: named there, not in statebed's log
    report = verify_lineage(built.storage, query=open_storage(query))
    assert any(a.kind == "damaged-query-file" and a.files == [str(query / "commits" / "9")] for a in report.anomalies)
    code, _, err = run_cli(capsys, "verify", "lineage", built.storage.url, "--query", str(tmp_path / "nowhere"))
    assert code == 2 and "--query" in err and err.count("\n") == 1
