"""The lineage verifier's coverage: every committed store, every commit, every version (V1 ones too),
and hostile checkpoints that must give a verdict or a clear error, never a crash or a hang."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from checkpoint_helpers import commit, ref_of, run_versions, state_at

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
from statebed_store.commitlog import render_commit
from statebed_store.lineage import lineage_to_json
from statebed_verify import verify_lineage

STORE = StoreId(0, 0)


def v2_checkpoint(storage: Storage, options: StoreOptions, versions: int = 6) -> list[CheckpointRef]:
    """One V2 store, every version committed; returns the committed refs (index = version)."""
    uploader = SnapshotUploader()
    p = StateStoreProvider(storage, STORE, options.with_(snapshot_interval=3), uploader=uploader)
    refs = [CheckpointRef(0)]
    for v in range(1, versions + 1):
        refs.append(ref_of(commit(p, refs[-1], {b"k": b"%d" % v})))
        CommitLog(storage).write(v - 1, {0: [[refs[-1].id]]})
    assert uploader.drain(30)
    p.close()
    return refs


def kinds(report) -> set[tuple[str, int | None]]:  # type: ignore[no-untyped-def]
    return {(a.kind, a.version) for a in report.anomalies}


# -- every committed (operator, partition, store) -------------------------------------------


def test_a_join_partition_missing_one_of_its_four_stores_is_invalid(native: dict[str, Path], tmp_path: Path) -> None:
    root = shutil.copytree(native["4.3.0"] / "join", tmp_path / "join")
    assert verify_lineage(open_storage(root)).valid is True  # the control
    shutil.rmtree(root / "state/0/1/right-keyWithIndexToValue")
    report = verify_lineage(open_storage(root))
    assert report.valid is False
    [a] = report.anomalies
    assert (a.kind, a.operator, a.partition) == ("missing-checkpoint", 0, 1)
    assert "right-keyWithIndexToValue" in a.detail and a.files == [str(root / "state/0/1/right-keyWithIndexToValue")]
    assert len(a.ids) == 1 and a.ids[0] in (root / "commits/7").read_text()  # that store's committed id


def test_an_older_commit_naming_a_missing_operator_is_invalid(local_storage: Storage, options: StoreOptions) -> None:
    refs = v2_checkpoint(local_storage, options)
    local_storage.write("commits/1", render_commit({0: [[refs[2].id]], 7: [[refs[2].id]]}))  # not the latest
    report = verify_lineage(local_storage)
    a = next(a for a in report.anomalies if a.operator == 7)
    assert report.valid is False and a.kind == "missing-checkpoint" and a.version == 2 and "batch 1 " in a.detail


# -- versions committed by V1 entries ---------------------------------------------------------


def test_a_v1_commit_after_v2_commits_is_checked(local_storage: Storage, options: StoreOptions, tmp_path: Path) -> None:
    """The driver wrote a V1 entry for batch 6 while the store wrote `7_<id>`: a load by version 7 finds nothing."""
    refs = v2_checkpoint(local_storage, options)
    p = StateStoreProvider(local_storage, STORE, options.with_(local_dir=tmp_path / "b"), uploader=SnapshotUploader())
    r7 = commit(p, refs[6], {b"k": b"7"})
    p.close()
    CommitLog(local_storage).write(6, None)
    report = verify_lineage(local_storage)
    assert report.valid is False and report.format == "mixed"
    a = next(a for a in report.anomalies if a.version == 7)
    assert a.kind == "missing-checkpoint" and "7.changelog" in a.files[0] and r7.checkpoint_id in a.detail


def switched(storage: Storage, options: StoreOptions, tmp_path: Path) -> None:
    """V1 for 1..4, V2 for 5..7, V1 again for 8..9, each version committed as its writer would."""
    up, log = SnapshotUploader(), CommitLog(storage)
    p = StateStoreProvider(storage, STORE, options.with_(format="v1", snapshot_interval=3), uploader=up)
    ref, _ = run_versions(p, 4)
    p.close()
    for b in range(4):
        log.write(b, None)
    p = StateStoreProvider(storage, STORE, options.with_(snapshot_interval=3, local_dir=tmp_path / "v2"), uploader=up)
    for _ in range(3):
        ref = ref_of(commit(p, ref, {b"k": b"%d" % (ref.version + 1)}))
        log.write(ref.version - 1, {0: [[ref.id]]})
    p.close()
    p = StateStoreProvider(storage, STORE, options.with_(format="v1", snapshot_interval=3, local_dir=tmp_path / "v1"), uploader=up)
    for _ in range(2):
        ref = ref_of(commit(p, ref, {b"k": b"%d" % (ref.version + 1)}))
        log.write(ref.version - 1, None)
    assert up.drain(30)
    p.close()


def test_a_v1_v2_v1_switch_is_unknown_while_v1_versions_are_retained(local_storage: Storage, options: StoreOptions, tmp_path: Path) -> None:
    switched(local_storage, options, tmp_path)
    report = verify_lineage(local_storage, all_versions=True)
    assert report.valid == "unknown" and report.anomalies == [] and report.format == "mixed"
    assert any("1..4, 8..9" in n and "V1" in n for n in report.notes)
    assert report.checked["versions"] == 9


def test_a_v1_v2_v1_switch_with_a_v1_changelog_removed_is_invalid(local_storage: Storage, options: StoreOptions, tmp_path: Path) -> None:
    switched(local_storage, options, tmp_path)
    local_storage.delete([STORE.path("9.changelog")])
    report = verify_lineage(local_storage)
    assert report.valid is False
    assert ("missing-checkpoint", 9) in kinds(report)


# -- every commit, as ranges ---------------------------------------------------------------


def test_a_stray_far_commit_is_one_gap_not_a_hang(local_storage: Storage, options: StoreOptions) -> None:
    refs = v2_checkpoint(local_storage, options)
    local_storage.write("commits/100000000", render_commit({0: [[refs[6].id]]}))
    report = verify_lineage(local_storage)
    gaps = [a for a in report.anomalies if a.kind == "commit-gap"]
    assert len(report.anomalies) <= 3 and len(gaps) == 1  # a gap, and the stray commit's missing checkpoint
    assert gaps[0].batches == [6, 99999999] and "batches 6..99999999" in gaps[0].detail
    assert len(str(report.to_json())) < 10_000


def test_two_gaps_are_two_ranges(local_storage: Storage, options: StoreOptions) -> None:
    v2_checkpoint(local_storage, options)
    local_storage.delete(["commits/1", "commits/3", "commits/4"])
    gaps = [a.batches for a in verify_lineage(local_storage).anomalies if a.kind == "commit-gap"]
    assert gaps == [[1, 1], [3, 4]]


# -- hostile files: a verdict naming the file, never a crash ---------------------------------


def test_v1_and_v2_names_at_one_version(local_storage: Storage, options: StoreOptions) -> None:
    refs = v2_checkpoint(local_storage, options)
    local_storage.write(STORE.path("3.changelog"), local_storage.read(STORE.path(f"3_{refs[3].id}.changelog")))
    assert [r for r in StoreFiles(local_storage, STORE).refs() if r.version == 3] == [CheckpointRef(3), refs[3]]
    assert verify_lineage(local_storage).valid is True


@pytest.mark.parametrize("body", ["1e400", "[" * 100_000 + "]" * 100_000, "NaN"])
def test_hostile_json_in_a_sidecar_is_an_unreadable_file(local_storage: Storage, options: StoreOptions, body: str) -> None:
    refs = v2_checkpoint(local_storage, options)
    side = STORE.path(f"6_{refs[6].id}.changelog.crc")
    local_storage.write(side, f'{{"algorithm":"CRC32C","value":{body},"mainFileSize":1}}'.encode())
    report = verify_lineage(local_storage)
    a = next(a for a in report.anomalies if a.kind == "unreadable-file")
    assert report.valid is False and a.files == [local_storage.display(side)]


@pytest.mark.parametrize("body", ['{"nextBatchWatermarkMs":1e400}', '{"x":' + "[" * 100_000 + "]" * 100_000 + "}"])
def test_hostile_json_in_a_commit_is_an_unreadable_file(local_storage: Storage, options: StoreOptions, body: str) -> None:
    v2_checkpoint(local_storage, options)
    local_storage.write("commits/2", b"v2\n" + body.encode())
    report = verify_lineage(local_storage)
    a = next(a for a in report.anomalies if a.kind == "unreadable-file")
    assert report.valid is False and a.files == [local_storage.display("commits/2")]


def test_stray_directories_are_noted_not_fatal(local_storage: Storage, options: StoreOptions, tmp_path: Path) -> None:
    v2_checkpoint(local_storage, options)
    root = Path(local_storage.url)
    for stray in ("state/é", "state/0/my store", "state/0/0/my store"):
        (root / stray).mkdir(parents=True)
        shutil.copy(next((root / "state/0/0").glob("1_*.changelog")), root / stray)
    report = verify_lineage(local_storage)
    assert report.valid is True
    for stray in ("state/é", "state/0/my store", "state/0/0/my store"):
        assert any(str(root / stray) in n for n in report.notes), (stray, report.notes)


def test_ssts_as_a_file_is_planned_around(local_storage: Storage, options: StoreOptions, tmp_path: Path) -> None:
    """With `SSTs` a file no snapshot can load: the store replays changelogs instead, and the verifier
    plans around it the same way, naming the damaged snapshot's SST rather than calling the version unloadable."""
    refs = v2_checkpoint(local_storage, options)
    root = Path(local_storage.url)
    shutil.rmtree(root / "state/0/0/SSTs")
    (root / "state/0/0/SSTs").write_text("not a directory")
    p = StateStoreProvider(local_storage, STORE, options.with_(local_dir=tmp_path / "fresh"), uploader=SnapshotUploader())
    assert state_at(p, refs[6]) == {b"k": b"6"}
    p.close()
    report = verify_lineage(local_storage, all_versions=True)
    assert {a.kind for a in report.anomalies} == {"unreadable-file"}
    assert all("/SSTs/" in a.files[0] for a in report.anomalies)


def test_a_changelog_lineage_is_unchanged_by_these_checks(local_storage: Storage, options: StoreOptions) -> None:
    """Control for the store-level checks: a real lineage break is still found next to them."""
    refs = v2_checkpoint(local_storage, options)
    assert lineage_to_json([refs[1]])  # the helpers in use
    local_storage.delete([STORE.path(f"5_{refs[5].id}.changelog")])
    assert ("missing-checkpoint", 5) in kinds(verify_lineage(local_storage))
