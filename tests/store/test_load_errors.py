"""Bad checkpoints through the public API: every error names the file, no committed state is lost.

Each test writes a real checkpoint with `StateStoreProvider` (over a local directory and a
real S3 server), damages it through the Storage API, and loads it in a fresh instance.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from checkpoint_helpers import STORE, Written, batch_ops, load_state, write_versions

from statebed_base.errors import (
    CorruptFileError,
    InjectedFault,
    LineageError,
    MissingFileError,
    UnknownFormatError,
    UnplannableError,
    UsageError,
)
from statebed_store import (
    CheckpointRef,
    SnapshotUploader,
    StateStoreProvider,
    Storage,
    StoreFiles,
    StoreOptions,
    failpoints,
    lz4block,
)
from statebed_store.changelog import PUT, Chunk, as_binary_array, encode_changelog
from statebed_store.checksum import make_sidecar
from statebed_store.snapshot import read_zip


@pytest.fixture
def written(storage: Storage, options: StoreOptions, uploader: SnapshotUploader) -> Written:
    """Versions 1-4, changelogs only (no snapshot): every load replays from version 1."""
    return write_versions(storage, options, uploader, 4)


@pytest.fixture
def with_snapshot(storage: Storage, options: StoreOptions, uploader: SnapshotUploader) -> Written:
    """Versions 1-4 with an uploaded snapshot of version 3 (and SSTs under SSTs/)."""
    w = write_versions(storage, options, uploader, 4, snapshot_at=(3,))
    assert storage.exists(w.path(3, "zip"))
    return w


def replace(storage: Storage, path: str, data: bytes, *, sidecar: str) -> None:
    """Overwrite a state file; `sidecar`: "keep" the old one, "drop" it, or "match" the new bytes."""
    storage.write(path, data)
    if sidecar == "drop":
        storage.delete([path + ".crc"])
    elif sidecar == "match":
        storage.write(path + ".crc", make_sidecar(data))


def load_error(w: Written, options: StoreOptions, tmp_path: Path, version: int, cid: str | None, error: type[Exception]) -> Exception:
    with pytest.raises(error) as e:
        load_state(w.storage, options, tmp_path, version, cid)
    return e.value


def assert_names(err: Exception, shown: str) -> None:
    assert shown in str(err), f"{shown!r} not in {str(err)!r}"
    if hasattr(err, "file"):
        assert err.file == shown  # type: ignore[attr-defined]


def all_versions_load_exactly(w: Written, options: StoreOptions, tmp_path: Path) -> None:
    for v in w.results:
        state, _ = load_state(w.storage, options, tmp_path, v, w.results[v].checkpoint_id)
        assert state == w.states[v], f"version {v}"


def test_the_undamaged_checkpoint_loads(written: Written, options: StoreOptions, tmp_path: Path) -> None:
    all_versions_load_exactly(written, options, tmp_path)
    assert written.states[4] == {b"count": b"4", b"k3": b"value-3", b"k4": b"value-4", b"shared": b"shared-4"}


# -- truncation, flipped bytes, empty files ---------------------------------------------------


@pytest.mark.parametrize("sidecar", ["keep", "drop"])
def test_truncated_changelog(written: Written, options: StoreOptions, tmp_path: Path, sidecar: str) -> None:
    path = written.path(2)
    data = written.storage.read(path)
    replace(written.storage, path, data[: len(data) - 10], sidecar=sidecar)
    err = load_error(written, options, tmp_path, 4, written.results[4].checkpoint_id, CorruptFileError)
    assert_names(err, written.display(2))
    assert ("checksum sidecar records" if sidecar == "keep" else "truncated") in str(err)


@pytest.mark.parametrize("sidecar", ["keep", "drop"])
def test_truncated_target_changelog(written: Written, options: StoreOptions, tmp_path: Path, sidecar: str) -> None:
    path = written.path(4)
    data = written.storage.read(path)
    replace(written.storage, path, data[:25], sidecar=sidecar)
    err = load_error(written, options, tmp_path, 4, written.results[4].checkpoint_id, CorruptFileError)
    assert_names(err, written.display(4))
    assert "truncated" in str(err)


@pytest.mark.parametrize("sidecar", ["keep", "drop"])
def test_flipped_byte_in_a_changelog(written: Written, options: StoreOptions, tmp_path: Path, sidecar: str) -> None:
    path = written.path(2)
    data = bytearray(written.storage.read(path))
    data[len(data) - 21 - 3] ^= 0x20  # inside the last data block, before the end marker
    replace(written.storage, path, bytes(data), sidecar=sidecar)
    err = load_error(written, options, tmp_path, 4, written.results[4].checkpoint_id, CorruptFileError)
    assert_names(err, written.display(2))
    # with its sidecar the CRC32C catches it; without, the LZ4 block checksum does
    assert ("CRC32C does not match" if sidecar == "keep" else "LZ4 block") in str(err)


def test_flipped_byte_in_the_target_changelog(written: Written, options: StoreOptions, tmp_path: Path) -> None:
    path = written.path(4)
    data = bytearray(written.storage.read(path))
    data[30] ^= 0x01
    replace(written.storage, path, bytes(data), sidecar="keep")
    err = load_error(written, options, tmp_path, 4, written.results[4].checkpoint_id, CorruptFileError)
    assert_names(err, written.display(4))


@pytest.mark.parametrize("sidecar", ["keep", "drop", "match"])
@pytest.mark.parametrize("version", [2, 4])
def test_empty_changelog(written: Written, options: StoreOptions, tmp_path: Path, sidecar: str, version: int) -> None:
    replace(written.storage, written.path(version), b"", sidecar=sidecar)
    err = load_error(written, options, tmp_path, 4, written.results[4].checkpoint_id, CorruptFileError)
    assert_names(err, written.display(version))


def test_unreadable_sidecar_names_the_sidecar(written: Written, options: StoreOptions, tmp_path: Path) -> None:
    written.storage.write(written.path(2) + ".crc", b"\x00not json")
    err = load_error(written, options, tmp_path, 4, written.results[4].checkpoint_id, CorruptFileError)
    assert_names(err, written.display(2) + ".crc")


# -- formats and lineage ------------------------------------------------------------------------


def utf(s: bytes) -> bytes:
    return struct.pack(">H", len(s)) + s


@pytest.mark.parametrize("version", [2, 4])
def test_changelog_header_says_v9(written: Written, options: StoreOptions, tmp_path: Path, version: int) -> None:
    v9 = lz4block.compress(utf(b"v9") + utf(b"[]") + struct.pack(">i", -1))
    replace(written.storage, written.path(version), v9, sidecar="match")
    err = load_error(written, options, tmp_path, 4, written.results[4].checkpoint_id, UnknownFormatError)
    assert_names(err, written.display(version))
    assert "v9" in str(err)


def rewrite_with_lineage(w: Written, version: int, lineage: tuple[CheckpointRef, ...]) -> None:
    keys, values, _ = batch_ops(version)
    data = encode_changelog(3, lineage, [Chunk(PUT, as_binary_array(keys), as_binary_array(values))])
    replace(w.storage, w.path(version), data, sidecar="match")


def test_lineage_that_skips_a_version(written: Written, options: StoreOptions, tmp_path: Path) -> None:
    rewrite_with_lineage(written, 4, (written.ref(1), written.ref(3)))
    err = load_error(written, options, tmp_path, 4, written.results[4].checkpoint_id, LineageError)
    assert_names(err, written.display(4))
    assert "not increasing by one: 1 then 3" in str(err)


def test_lineage_ending_at_the_wrong_version(written: Written, options: StoreOptions, tmp_path: Path) -> None:
    rewrite_with_lineage(written, 4, (written.ref(1), written.ref(2)))
    err = load_error(written, options, tmp_path, 4, written.results[4].checkpoint_id, LineageError)
    assert_names(err, written.display(4))
    assert "must end at version 3" in str(err)


def test_lineage_naming_an_id_with_no_file(written: Written, options: StoreOptions, tmp_path: Path) -> None:
    rewrite_with_lineage(written, 4, (written.ref(1), written.ref(2), CheckpointRef(3, "never-written")))
    err = load_error(written, options, tmp_path, 4, written.results[4].checkpoint_id, UnplannableError)
    missing = written.storage.display(STORE.path("3_never-written.changelog"))
    assert missing in str(err) and err.missing == [missing]  # type: ignore[attr-defined]


def test_changelog_whose_lineage_disagrees_with_the_plan(written: Written, options: StoreOptions, tmp_path: Path) -> None:
    """Version 3's own header says its base is another id of version 2: replay must refuse it."""
    rewrite_with_lineage(written, 3, (written.ref(1), CheckpointRef(2, "other-attempt")))
    err = load_error(written, options, tmp_path, 4, written.results[4].checkpoint_id, LineageError)
    assert_names(err, written.display(3))


# -- missing files and ids ------------------------------------------------------------------------


def test_missing_changelog_with_no_snapshot(written: Written, options: StoreOptions, tmp_path: Path) -> None:
    written.storage.delete([written.path(2), written.path(2) + ".crc"])
    err = load_error(written, options, tmp_path, 4, written.results[4].checkpoint_id, UnplannableError)
    assert err.missing == [written.display(2)]  # type: ignore[attr-defined]
    assert written.display(2) in str(err)
    # versions below the hole still load
    state, _ = load_state(written.storage, options, tmp_path, 1, written.results[1].checkpoint_id)
    assert state == written.states[1]


def test_unknown_id(written: Written, options: StoreOptions, tmp_path: Path) -> None:
    err = load_error(written, options, tmp_path, 4, "no-such-id", UnplannableError)
    expected = written.storage.display(STORE.path("4_no-such-id.changelog"))
    assert expected in str(err) and err.missing == [expected]  # type: ignore[attr-defined]


def test_id_of_another_version(written: Written, options: StoreOptions, tmp_path: Path) -> None:
    other = written.results[4].checkpoint_id
    err = load_error(written, options, tmp_path, 2, other, UnplannableError)
    assert written.storage.display(STORE.path(f"2_{other}.changelog")) in str(err)


def test_v1_load_of_a_v2_checkpoint_says_to_pass_the_id(written: Written, options: StoreOptions, tmp_path: Path) -> None:
    err = load_error(written, options, tmp_path, 4, None, UnplannableError)
    assert written.storage.display(STORE.path("1.changelog")) in str(err)
    assert "load it with its checkpoint id" in str(err)


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "x\n", "a_b", "a.changelog", "-x", "a" * 65])
def test_malformed_ids_are_usage_errors(written: Written, options: StoreOptions, tmp_path: Path, bad: str) -> None:
    err = load_error(written, options, tmp_path, 4, bad, UsageError)
    assert repr(bad) in str(err)


def test_bad_versions_are_usage_errors(written: Written, options: StoreOptions, tmp_path: Path) -> None:
    assert "-1" in str(load_error(written, options, tmp_path, -1, None, UsageError))
    assert "version 0" in str(load_error(written, options, tmp_path, 0, written.results[1].checkpoint_id, UsageError))


# -- snapshots: fall back to changelogs, or name the bad file ----------------------------------------


def snapshot_ssts(w: Written) -> list[str]:
    meta, _ = read_zip(w.storage.read(w.path(3, "zip")), file=w.display(3, "zip"))
    assert meta.sst_files
    return [STORE.path(f"SSTs/{f.dfs}") for f in meta.sst_files]


@pytest.mark.parametrize("version", [3, 4])
def test_missing_sst_falls_back_to_changelogs(with_snapshot: Written, options: StoreOptions, tmp_path: Path, version: int) -> None:
    w = with_snapshot
    good, p = load_state(w.storage, options, tmp_path, version, w.results[version].checkpoint_id)
    assert good == w.states[version] and p.metrics.snapshot_loads == 1 and p.metrics.snapshot_fallbacks == 0
    w.storage.delete(snapshot_ssts(w)[:1])
    state, p = load_state(w.storage, options, tmp_path, version, w.results[version].checkpoint_id)
    assert state == w.states[version]
    assert p.metrics.snapshot_fallbacks == 1 and p.metrics.snapshot_loads == 0
    assert p.metrics.changelogs_replayed == version


def test_missing_sst_without_changelogs_names_the_sst(with_snapshot: Written, options: StoreOptions, tmp_path: Path) -> None:
    w = with_snapshot
    ssts = snapshot_ssts(w)
    w.storage.delete(ssts[:1] + [w.path(2), w.path(2) + ".crc"])
    err = load_error(w, options, tmp_path, 3, w.results[3].checkpoint_id, MissingFileError)
    assert_names(err, w.storage.display(ssts[0]))
    assert w.display(3, "zip") in str(err)


@pytest.mark.parametrize("sidecar", ["keep", "drop", "match"])
def test_corrupt_zip_falls_back_to_changelogs(with_snapshot: Written, options: StoreOptions, tmp_path: Path, sidecar: str) -> None:
    w = with_snapshot
    zip_bytes = w.storage.read(w.path(3, "zip"))
    replace(w.storage, w.path(3, "zip"), zip_bytes[: len(zip_bytes) // 2], sidecar=sidecar)
    for version in (3, 4):
        state, p = load_state(w.storage, options, tmp_path, version, w.results[version].checkpoint_id)
        assert state == w.states[version]
        assert p.metrics.snapshot_fallbacks == 1


@pytest.mark.parametrize(
    "metadata",
    [b"v2\n{}", b'v1\n{"sstFiles":[],"lineage":[{"version":1,"checkpointUniqueId":"a"},{"version":3,"checkpointUniqueId":"b"}]}'],
    ids=["unknown-metadata-format", "bad-lineage"],
)
def test_zip_with_unreadable_metadata_falls_back_to_changelogs(
    with_snapshot: Written, options: StoreOptions, tmp_path: Path, metadata: bytes
) -> None:
    import io
    import zipfile

    w = with_snapshot
    src = zipfile.ZipFile(io.BytesIO(w.storage.read(w.path(3, "zip"))))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as out:
        for info in src.infolist():
            out.writestr(info.filename, metadata if info.filename == "metadata" else src.read(info))
    replace(w.storage, w.path(3, "zip"), buf.getvalue(), sidecar="match")
    state, p = load_state(w.storage, options, tmp_path, 3, w.results[3].checkpoint_id)
    assert state == w.states[3] and p.metrics.snapshot_fallbacks == 1


@pytest.mark.parametrize("sidecar", ["keep", "match"])
def test_corrupt_zip_without_changelogs_names_the_zip(with_snapshot: Written, options: StoreOptions, tmp_path: Path, sidecar: str) -> None:
    w = with_snapshot
    replace(w.storage, w.path(3, "zip"), b"PK\x03\x04 garbage, not a zip", sidecar=sidecar)
    w.storage.delete([w.path(3), w.path(3) + ".crc"])  # no changelog to fall back to
    err = load_error(w, options, tmp_path, 3, w.results[3].checkpoint_id, CorruptFileError)
    assert_names(err, w.display(3, "zip"))


def test_plan_check_reports_the_missing_sst(with_snapshot: Written) -> None:
    from statebed_store import check_plan, plan_load

    w = with_snapshot
    ssts = snapshot_ssts(w)
    w.storage.delete(ssts[-1:])
    files = StoreFiles(w.storage, STORE)
    plan = plan_load(files, w.ref(4))
    assert plan.snapshot == w.ref(3) and plan.changelogs == (w.ref(4),)
    with pytest.raises(MissingFileError) as e:
        check_plan(files, plan)
    assert_names(e.value, w.storage.display(ssts[-1]))


# -- failed commits lose nothing ---------------------------------------------------------------------


@pytest.mark.parametrize("point", ["changelog.upload.after", "changelog.upload.before"])
def test_failed_commit_keeps_every_committed_version(
    storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp_path: Path, point: str
) -> None:
    w = write_versions(storage, options, uploader, 4, snapshot_at=(2,))
    with StateStoreProvider(storage, STORE, options, uploader=uploader) as provider:
        with failpoints.armed(point, "1*error"):
            txn = provider.load(4, w.results[4].checkpoint_id)
            txn.put_many([b"count", b"lost"], [b"failed", b"x"])
            failed_id = txn.new_id
            with pytest.raises(InjectedFault, match=point):
                txn.commit()
        orphan = STORE.path(f"5_{failed_id}.changelog")
        # "after": the changelog was durable before the failure; "before": nothing was written
        assert storage.exists(orphan) == (point == "changelog.upload.after")
        all_versions_load_exactly(w, options, tmp_path)
        # the same batch runs again on the same provider and commits a new id
        with provider.load(4, w.results[4].checkpoint_id) as txn:
            assert dict(txn.items()) == w.states[4]
            txn.put_many([b"count"], [b"5"])
            retry = txn.commit()
    assert retry.version == 5 and retry.checkpoint_id != failed_id and retry.base_id == w.results[4].checkpoint_id
    state, _ = load_state(storage, options, tmp_path, 5, retry.checkpoint_id)
    assert state == {**w.states[4], b"count": b"5"}
    all_versions_load_exactly(w, options, tmp_path)
