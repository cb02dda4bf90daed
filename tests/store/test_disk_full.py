"""A full local disk never makes the store serve wrong state (issue 62).

The local directory is a real tmpfs of a few MiB (root mounts it; the suite runs as root), filled
with a real file until only `leave` bytes are free, so RocksDB's own writes fail with ENOSPC at
whatever step of a catch-up or a commit runs out first (rocksdict raises them as plain
exceptions). Each case sweeps the free space, proves the fault fired, and asserts that every load
served the exact state a fresh provider rebuilds from the checkpoint, or failed with a
`StatebedError`, and that the provider is not wedged: once space is freed it serves every
committed version again."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from checkpoint_helpers import commit, ref_of, state_at

from statebed_base.errors import LocalInstanceError, StatebedError
from statebed_store import CheckpointRef, SnapshotUploader, StateStoreProvider, StoreId, StoreOptions, open_storage
from statebed_store.storage.base import Storage

STORE = StoreId(0, 0)
DISK = 12 << 20
FILLER = "filler"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of `DISK` bytes, unmounted at the end whatever happened."""
    assert os.geteuid() == 0, "these tests mount a tmpfs: run the suite as root (CI does)"
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK},mode=0755", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def fill(disk: Path, leave: int) -> None:
    """Take every free byte of `disk` but `leave` (a real file: tmpfs allocates its pages)."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    assert free > leave, f"only {free} bytes free on the small disk before filling it"
    with open(disk / FILLER, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, free - leave)


def unfill(disk: Path) -> None:
    (disk / FILLER).unlink()


def truth(storage: Storage, ref: CheckpointRef, local: Path) -> dict[bytes, bytes]:
    """The state a fresh provider, on a disk with room, rebuilds from the checkpoint."""
    with StateStoreProvider(storage, STORE, StoreOptions(local_dir=local), uploader=SnapshotUploader()) as fresh:
        return state_at(fresh, ref)


def served_or_refused(p: StateStoreProvider, ref: CheckpointRef) -> dict[bytes, bytes] | None:
    """What a load of `ref` serves, or None when it fails with one of ours (never anything else)."""
    try:
        return state_at(p, ref)
    except StatebedError:
        return None


def big_batch(v: int, n: int = 3000) -> dict[bytes, bytes]:
    return {b"k%05d" % i: (b"%d-" % v) * 80 for i in range(n)}


def out_of_space(caplog: pytest.LogCaptureFixture, errors: list[BaseException]) -> bool:
    """Evidence the fault fired: RocksDB's own ENOSPC, in an error raised or a load that gave up on it."""
    text = [str(e) for e in errors] + [str(getattr(r, "statebed_fields", "")) for r in caplog.records]
    return any("No space left" in t for t in text)


@pytest.mark.parametrize("leave", [64 << 10, 512 << 10, 1 << 20, 1536 << 10])
def test_a_catch_up_that_runs_out_of_disk_never_serves_a_half_replayed_instance(
    tmp_path: Path, small_disk: Path, leave: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="statebed")
    storage = open_storage(tmp_path / "ckpt")
    options = StoreOptions(local_dir=small_disk, snapshot_interval=100, lock_timeout_s=30)
    p = StateStoreProvider(storage, STORE, options, uploader=SnapshotUploader())
    base = ref_of(commit(p, CheckpointRef(0), {b"k00000": b"base", b"only-at-base": b"1"}))
    # other executors run the partition on: four changelogs of ~250 KB each for p to catch up on
    head = base
    with StateStoreProvider(storage, STORE, options.with_(local_dir=tmp_path / "other"), uploader=SnapshotUploader()) as other:
        for v in range(4):
            head = ref_of(commit(other, head, big_batch(v)))
    fill(small_disk, leave)
    errors: list[BaseException] = []
    try:
        try:
            served = state_at(p, head)  # a catch-up on the open instance at `base`
        except StatebedError as e:
            errors.append(e)
            served = None
        assert served is None or served == truth(storage, head, tmp_path / "fresh-1")
        # the instance that was at `base` before the catch-up failed: never served half-replayed
        assert served_or_refused(p, base) in (None, truth(storage, base, tmp_path / "fresh-2"))
    finally:
        unfill(small_disk)
    assert out_of_space(caplog, errors), "the disk never filled up: the fault did not fire"
    # not wedged: with room again, every committed version is served exactly
    assert state_at(p, head) == truth(storage, head, tmp_path / "fresh-3")
    assert state_at(p, base) == truth(storage, base, tmp_path / "fresh-4")
    p.close()


@pytest.mark.parametrize("leave", [16 << 10, 128 << 10, 256 << 10, 512 << 10])
def test_a_commit_that_runs_out_of_disk_never_serves_an_instance_it_could_not_finish(
    tmp_path: Path, small_disk: Path, leave: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Out of space at the batch's writes, the local snapshot's flush or the identity record: the
    task fails with one of ours or commits durably; the instance serves nothing it cannot prove."""
    caplog.set_level(logging.INFO, logger="statebed")
    storage = open_storage(tmp_path / "ckpt")
    uploader = SnapshotUploader()
    options = StoreOptions(local_dir=small_disk, snapshot_interval=100, lock_timeout_s=30)
    p = StateStoreProvider(storage, STORE, options, uploader=uploader)
    base = ref_of(commit(p, CheckpointRef(0), {b"k00000": b"base"}))
    fill(small_disk, leave)
    errors: list[BaseException] = []
    committed: list[CheckpointRef] = [base]
    try:
        for attempt in range(3):  # the first attempts meet the full disk; a later one may fit
            try:
                committed.append(ref_of(commit(p, committed[-1], big_batch(attempt), snapshot=True)))
            except StatebedError as e:
                errors.append(e)
        for ref in committed:
            assert served_or_refused(p, ref) in (None, truth(storage, ref, tmp_path / f"fresh-{ref.version}"))
    finally:
        unfill(small_disk)
    assert out_of_space(caplog, errors), "the disk never filled up: the fault did not fire"
    uploader.drain(30)
    for ref in committed:
        assert state_at(p, ref) == truth(storage, ref, tmp_path / f"again-{ref.version}")
    # and the provider commits again
    after = commit(p, committed[-1], {b"after": b"1"})
    assert state_at(p, ref_of(after)) == truth(storage, ref_of(after), tmp_path / "after")
    p.close()


def test_a_rebuild_on_a_full_disk_fails_with_an_error_naming_the_instance(tmp_path: Path, small_disk: Path) -> None:
    storage = open_storage(tmp_path / "ckpt")
    with StateStoreProvider(storage, STORE, StoreOptions(local_dir=tmp_path / "writer"), uploader=SnapshotUploader()) as w:
        head = ref_of(commit(w, CheckpointRef(0), big_batch(0)))
        head = ref_of(commit(w, head, big_batch(1)))
    p = StateStoreProvider(storage, STORE, StoreOptions(local_dir=small_disk, lock_timeout_s=30), uploader=SnapshotUploader())
    fill(small_disk, 16 << 10)
    try:
        with pytest.raises(LocalInstanceError, match="No space left") as e:
            state_at(p, head)
        assert str(small_disk) in str(e.value)
    finally:
        unfill(small_disk)
    assert state_at(p, head) == truth(storage, head, tmp_path / "fresh")  # the lock was released
    p.close()
