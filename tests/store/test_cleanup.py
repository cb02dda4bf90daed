"""Cleanup keeps every retained committed version loadable and deletes the rest, cheaply."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from checkpoint_helpers import commit, ref_of, state_at

from statebed_base.errors import UnplannableError
from statebed_store import (
    CheckpointRef,
    CommitLog,
    CountingStorage,
    HeaderCache,
    SnapshotUploader,
    StateStoreProvider,
    Storage,
    StoreFiles,
    StoreId,
    StoreOptions,
    cleanup_store,
    open_storage,
    retained_versions,
)
from statebed_store.naming import CHANGELOG, SNAPSHOT

STORE = StoreId(0, 0)


class Run:
    """A driver committing versions with occasional losing attempts, tracking the model."""

    def __init__(self, storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp: Path, interval: int = 5) -> None:
        self.storage = storage
        self.uploader = uploader
        self.opts = options.with_(snapshot_interval=interval)
        self.main = StateStoreProvider(storage, STORE, self.opts.with_(local_dir=tmp / "main"), uploader=uploader)
        self.spec = StateStoreProvider(storage, STORE, self.opts.with_(local_dir=tmp / "spec"), uploader=uploader)
        self.committed: list[tuple[CheckpointRef, dict[bytes, bytes]]] = [(CheckpointRef(0), {})]
        self.log = CommitLog(storage)
        self.tmp = tmp

    def step(self, rng: random.Random, loser: bool = False, lock: threading.Lock | None = None) -> CheckpointRef:
        base, state = self.committed[-1]
        v = base.version + 1
        puts = {b"k%d" % rng.randrange(20): b"v%d" % v, b"last": b"%d" % v}
        if loser:
            commit(self.spec, base, {b"k0": b"LOSER-%d" % v})
        r = commit(self.main, base, puts)
        ref = ref_of(r)
        self.log.write(v - 1, {0: [[ref.id]]})
        with lock or threading.Lock():
            self.committed.append((ref, {**state, **puts}))
        return ref

    def fresh(self, name: str) -> StateStoreProvider:
        return StateStoreProvider(self.storage, STORE, self.opts.with_(local_dir=self.tmp / name), uploader=self.uploader)

    def close(self) -> None:
        self.uploader.drain(30)
        self.main.close()
        self.spec.close()


def test_keeps_retained_versions_and_deletes_the_rest(
    storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp_path: Path
) -> None:
    run = Run(storage, options, uploader, tmp_path)
    rng = random.Random(1)
    for i in range(30):
        run.step(rng, loser=i % 7 == 3)
    uploader.drain(30)
    in_flight = commit(run.spec, run.committed[-1][0], {b"x": b"in flight"})  # version 31, not decided
    retained = retained_versions(run.log, 0, 0, 0, latest_batch=29, keep=10)
    assert [r.version for r in retained] == list(range(21, 31))
    assert retained == [ref for ref, _ in run.committed[21:]]
    report = cleanup_store(storage, STORE, retained, sst_orphan_grace_s=0)
    files = StoreFiles(storage, STORE)
    versions = sorted({r.version for r in files.refs()})
    assert versions[0] == 20  # the snapshot version 21 needs
    assert files.has_snapshot(run.committed[20][0]) and not files.has_changelog(run.committed[20][0])
    assert files.has_changelog(ref_of(in_flight))  # versions above the latest commit are untouched
    orphan_versions = {int(Path(p).name.split("_")[0]) for p in report.orphans}
    assert orphan_versions == {25}  # the only losing attempt inside the retained range (i == 24)
    assert all(r in {ref for ref, _ in run.committed} or r == ref_of(in_flight) for r in files.refs())
    assert report.ssts_deleted  # SSTs of deleted snapshots went too
    assert all(not p.endswith(".crc") or Path(p[:-4]).name not in {n.name for n in files.files} for p in report.deleted)
    fresh = run.fresh("fresh")
    for ref, state in run.committed[21:]:
        assert state_at(fresh, ref) == state
    fresh.close()
    run.close()


def test_nothing_is_deleted_when_a_retained_version_is_unloadable(
    storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp_path: Path
) -> None:
    run = Run(storage, options, uploader, tmp_path, interval=100)
    rng = random.Random(2)
    for _ in range(12):
        run.step(rng)
    victim = run.committed[9][0]
    storage.delete([STORE.path(f"{victim.version}_{victim.id}.changelog")])
    before = {n.name for n in StoreFiles(storage, STORE).files}
    with pytest.raises(UnplannableError, match=f"9_{victim.id}.changelog"):
        cleanup_store(storage, STORE, [r for r, _ in run.committed[10:]], sst_orphan_grace_s=0)
    assert {n.name for n in StoreFiles(storage, STORE).files} == before
    run.close()


def test_young_unreferenced_ssts_are_kept(
    local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp_path: Path
) -> None:
    run = Run(local_storage, options, uploader, tmp_path, interval=3)
    rng = random.Random(3)
    for _ in range(12):
        run.step(rng)
    uploader.drain(30)
    retained = [r for r, _ in run.committed[-2:]]
    sst_dir = f"{STORE.dir}/SSTs"
    stray = f"{sst_dir}/000999-in-flight.sst"
    local_storage.write(stray, b"sst being uploaded", create_only=True)
    cleanup_store(local_storage, STORE, retained, sst_orphan_grace_s=600)
    assert local_storage.exists(stray)
    now = time.time() + 601
    report = cleanup_store(local_storage, STORE, retained, sst_orphan_grace_s=600, now=now)
    assert local_storage.display(stray) in report.ssts_deleted
    fresh = run.fresh("fresh")
    for ref, state in run.committed[-2:]:
        assert state_at(fresh, ref) == state
    fresh.close()
    run.close()


def _steady_state_requests(storage: Storage, options: StoreOptions, tmp: Path, history: int) -> int:
    counting = CountingStorage(storage)
    uploader = SnapshotUploader()
    run = Run(counting, options, uploader, tmp, interval=10)
    rng = random.Random(history)
    cache = HeaderCache()
    for _ in range(history):
        run.step(rng)
    uploader.drain(30)
    keep = 10
    cleanup_store(counting, STORE, [r for r, _ in run.committed[-keep:]], cache=cache, sst_orphan_grace_s=0)
    run.step(rng)
    uploader.drain(30)
    counting.reset()
    cleanup_store(counting, STORE, [r for r, _ in run.committed[-keep:]], cache=cache, sst_orphan_grace_s=0)
    total = counting.total
    run.close()
    return total


def test_steady_state_requests_do_not_grow_with_history(local_storage: Storage, options: StoreOptions, tmp_path: Path) -> None:
    short = _steady_state_requests(local_storage, options, tmp_path / "a", 20)
    long = _steady_state_requests(open_storage(tmp_path / "ckpt-long"), options, tmp_path / "b", 200)
    assert short == long
    assert short <= 8  # list dir + list SSTs + a new header + a delete batch, give or take a zip


def test_cleanup_under_concurrent_commits(storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp_path: Path) -> None:
    """Cleanup loops while a driver commits (with losers and snapshots): retained versions stay loadable.

    The SST grace period is short but above S3's one-second mtime resolution.
    """
    run = Run(storage, options, uploader, tmp_path, interval=2)
    rng = random.Random(4)
    for _ in range(5):
        run.step(rng)
    stop = threading.Event()
    errors: list[BaseException] = []
    lock = threading.Lock()
    keep = 4
    cleanups = 0

    def cleaner() -> None:
        nonlocal cleanups
        cache = HeaderCache()
        while not stop.is_set():
            with lock:
                retained = [r for r, _ in run.committed[-keep:]]
            try:
                cleanup_store(storage, STORE, retained, cache=cache, sst_orphan_grace_s=3.0)
                cleanups += 1
            except BaseException as e:
                errors.append(e)
                return

    t = threading.Thread(target=cleaner)
    t.start()
    try:
        for i in range(25):
            ref = run.step(rng, loser=i % 3 == 0, lock=lock)
            if i % 5 == 4:
                fresh = run.fresh(f"check{i}")
                assert state_at(fresh, ref) == run.committed[-1][1]
                fresh.close()
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors
    assert cleanups > 0
    uploader.drain(30)
    cleanup_store(storage, STORE, [r for r, _ in run.committed[-keep:]], sst_orphan_grace_s=3.0)
    fresh = run.fresh("final")
    for ref, state in run.committed[-keep:]:
        assert state_at(fresh, ref) == state
    fresh.close()
    files = StoreFiles(storage, STORE)
    assert min(r.version for r in files.refs()) >= run.committed[-keep][0].version - 2
    assert files.refs(CHANGELOG) and files.refs(SNAPSHOT)
    run.close()


def test_snapshot_with_missing_sst_is_not_relied_on(
    storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp_path: Path
) -> None:
    """A zip whose SST vanished (an upload that lost a race with cleanup) must not let cleanup
    delete the changelogs a load would fall back to."""
    run = Run(storage, options, uploader, tmp_path, interval=5)
    rng = random.Random(5)
    for _ in range(13):
        run.step(rng)
    uploader.drain(30)
    files = StoreFiles(storage, STORE)
    v10 = run.committed[10][0]
    assert files.has_snapshot(v10) and files.has_snapshot(run.committed[5][0])
    shared = {f.dfs for f in files.snapshot_metadata(run.committed[5][0]).sst_files}
    own = [f.dfs for f in files.snapshot_metadata(v10).sst_files if f.dfs not in shared]
    assert own  # version 10 added SSTs of its own
    storage.delete([f"{STORE.dir}/SSTs/{own[0]}"])
    cleanup_store(storage, STORE, [r for r, _ in run.committed[11:]], sst_orphan_grace_s=0)
    after = StoreFiles(storage, STORE)
    assert after.has_snapshot(run.committed[5][0])  # the fallback base survives
    assert all(after.has_changelog(r) for r, _ in run.committed[6:11])
    assert not after.has_snapshot(v10)  # the unusable zip is garbage: no plan uses it
    fresh = run.fresh("fresh")
    for ref, state in run.committed[11:]:
        assert state_at(fresh, ref) == state
    assert fresh.metrics.changelogs_replayed == 6 + 7 + 8  # from snapshot 5
    fresh.close()
    run.close()
