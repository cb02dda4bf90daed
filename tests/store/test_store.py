"""The store's lifecycle: load, reuse, commit, abort, V1 mode and V1<->V2 switching."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
from checkpoint_helpers import commit, ref_of, run_versions, state_at

from statebed_base.errors import AlreadyExistsError, StoreStateError, UnplannableError, UsageError
from statebed_store import (
    CheckpointRef,
    CountingStorage,
    SnapshotUploader,
    StateStoreProvider,
    Storage,
    StoreFiles,
    StoreId,
    StoreOptions,
    failpoints,
    plan_load,
)
from statebed_store.changelog import parse_changelog
from statebed_store.naming import CHANGELOG, SNAPSHOT

STORE = StoreId(1, 2)


@pytest.fixture
def provider(storage: Storage, options: StoreOptions, uploader: SnapshotUploader) -> StateStoreProvider:
    p = StateStoreProvider(storage, STORE, options, uploader=uploader)
    yield p
    uploader.drain(30)
    p.close()


def test_commit_returns_version_new_id_and_base(provider: StateStoreProvider) -> None:
    r1 = commit(provider, CheckpointRef(0), {b"k": b"1"})
    r2 = commit(provider, ref_of(r1), {b"k": b"2"})
    assert (r1.version, r1.base_id) == (1, None) and r1.checkpoint_id
    assert (r2.version, r2.base_id) == (2, r1.checkpoint_id)
    assert r2.checkpoint_id not in (None, r1.checkpoint_id)


def test_every_load_draws_a_fresh_id(provider: StateStoreProvider) -> None:
    ids = {commit(provider, CheckpointRef(0), {b"k": b"%d" % i}).checkpoint_id for i in range(5)}
    assert len(ids) == 5
    files = StoreFiles(provider.storage, STORE)
    assert len([r for r in files.refs(CHANGELOG) if r.version == 1]) == 5


def test_changelog_is_durable_when_commit_returns(provider: StateStoreProvider) -> None:
    r = commit(provider, CheckpointRef(0), {b"a": b"1", b"b": b"2"}, deletes=[b"a"])
    path = STORE.path(f"1_{r.checkpoint_id}.changelog")
    cl = parse_changelog(provider.storage.read(path), file=path, version=1)
    assert cl.format_version == 3 and cl.lineage == ()
    assert list(cl.records()) == [(0x01, b"a", b"1"), (0x01, b"b", b"2"), (0x10, b"a", None)]
    assert provider.storage.exists(path + ".crc")


def test_reads_see_own_writes_and_arrow_input(provider: StateStoreProvider) -> None:
    with provider.load(0) as txn:
        txn.put_many(pa.array([b"x", b"y"], pa.binary()), pa.array([b"1", b"2"], pa.binary()))
        assert txn.get_many([b"x", b"y", b"z"]) == [b"1", b"2", None]
        txn.delete(b"x")
        assert txn.get(b"x") is None
        assert list(txn.items(prefix=b"y")) == [(b"y", b"2")]
        r = txn.commit()
    assert state_at(provider, ref_of(r)) == {b"y": b"2"}


def test_open_instance_is_reused_only_for_the_same_version_and_id(
    storage: Storage, options: StoreOptions, uploader: SnapshotUploader
) -> None:
    counting = CountingStorage(storage)
    p = StateStoreProvider(counting, STORE, options, uploader=uploader)
    r1 = commit(p, CheckpointRef(0), {b"k": b"1"})
    r2a = commit(p, ref_of(r1), {b"k": b"2a"})
    counting.reset()
    assert state_at(p, ref_of(r2a)) == {b"k": b"2a"}
    assert p.metrics.cache_hits >= 1
    assert counting.counts["read"] == 0 and counting.counts["list"] == 0  # no storage access at all
    # A second attempt of version 2 from the same base: the open instance is at (2, a) -> reload.
    r2b = commit(p, ref_of(r1), {b"k": b"2b"})
    hits = p.metrics.cache_hits
    assert state_at(p, ref_of(r2a)) == {b"k": b"2a"}  # other id of the same version: rebuilt
    assert p.metrics.cache_hits == hits
    assert state_at(p, ref_of(r2b)) == {b"k": b"2b"}
    uploader.drain(30)
    p.close()


def test_abort_discards_and_invalidates(provider: StateStoreProvider) -> None:
    r1 = commit(provider, CheckpointRef(0), {b"k": b"1"})
    with provider.load(r1.version, r1.checkpoint_id) as txn:
        txn.put(b"k", b"dirty")
        txn.put(b"new", b"dirty")
        txn.abort()
    assert provider.loaded is None
    assert state_at(provider, ref_of(r1)) == {b"k": b"1"}
    before = StoreFiles(provider.storage, STORE).refs()
    assert all(r.version <= 1 for r in before)


def test_exception_in_with_block_aborts(provider: StateStoreProvider) -> None:
    r1 = commit(provider, CheckpointRef(0), {b"k": b"1"})
    with pytest.raises(RuntimeError), provider.load(1, r1.checkpoint_id) as txn:
        txn.put(b"k", b"dirty")
        raise RuntimeError("task failed")
    assert state_at(provider, ref_of(r1)) == {b"k": b"1"}


def test_finished_transaction_cannot_be_used(provider: StateStoreProvider) -> None:
    txn = provider.load(0)
    txn.commit()
    with pytest.raises(StoreStateError):
        txn.put(b"k", b"v")
    with pytest.raises(StoreStateError):
        txn.commit()


def test_one_transaction_at_a_time(storage: Storage, options: StoreOptions, uploader: SnapshotUploader) -> None:
    p = StateStoreProvider(storage, STORE, options.with_(lock_timeout_s=0.2), uploader=uploader)
    txn = p.load(0)
    with pytest.raises(StoreStateError, match="another transaction"):
        p.load(0)
    txn.abort()
    p.load(0).abort()
    p.close()


def test_bad_load_arguments(provider: StateStoreProvider) -> None:
    with pytest.raises(UsageError):
        provider.load(-1)
    with pytest.raises(UsageError, match="malformed"):
        provider.load(3, "../../etc/passwd")
    with pytest.raises(UsageError):
        provider.load(0, "abc")
    with pytest.raises(UnplannableError, match="3_0123abcd.changelog"):
        provider.load(3, "0123abcd")


def test_v2_file_is_never_overwritten(provider: StateStoreProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("statebed_store.store.new_checkpoint_id", lambda: "fixed-id")
    commit(provider, CheckpointRef(0), {b"k": b"first"})
    path = STORE.path("1_fixed-id.changelog")
    original = provider.storage.read(path)
    with pytest.raises(AlreadyExistsError, match="1_fixed-id.changelog"):
        commit(provider, CheckpointRef(0), {b"k": b"second"})
    assert provider.storage.read(path) == original


def test_snapshot_upload_never_blocks_commit(provider: StateStoreProvider, uploader: SnapshotUploader) -> None:
    with failpoints.armed("snapshot.upload.before", "delay(1500)"):
        r = commit(provider, CheckpointRef(0), {b"k": b"1"}, snapshot=True)
        # commit returned while the upload is still sleeping in the failpoint
        assert not StoreFiles(provider.storage, STORE).has_snapshot(ref_of(r))
        assert uploader.pending() == 1
        assert uploader.drain(30)
    assert StoreFiles(provider.storage, STORE).has_snapshot(ref_of(r))


def test_failed_snapshot_uploads_are_skipped_not_fatal(
    provider: StateStoreProvider, uploader: SnapshotUploader, tmp_path: Path, options: StoreOptions
) -> None:
    with failpoints.armed("snapshot.upload.before", "error(disk on fire)"):
        ref, state = run_versions(provider, 4)
        r = commit(provider, ref, {b"x": b"1"}, snapshot=True)
        assert uploader.drain(30)
    assert uploader.failed == 1
    files = StoreFiles(provider.storage, STORE)
    assert not files.refs(SNAPSHOT)
    fresh = StateStoreProvider(provider.storage, STORE, options.with_(local_dir=tmp_path / "other"), uploader=uploader)
    assert state_at(fresh, ref_of(r)) == {**state, b"x": b"1"}
    fresh.close()


def test_lineage_restarts_at_each_presumed_snapshot(storage: Storage, options: StoreOptions, uploader: SnapshotUploader) -> None:
    p = StateStoreProvider(storage, STORE, options.with_(snapshot_interval=3), uploader=uploader)
    ref, _ = run_versions(p, 7)
    uploader.drain(30)
    files = StoreFiles(storage, STORE)
    snaps = sorted(r.version for r in files.refs(SNAPSHOT))
    assert snaps == [3, 6]
    lineages = {r.version: [x.version for x in files.lineage_of(r)] for r in files.refs(CHANGELOG)}
    assert lineages == {1: [], 2: [1], 3: [1, 2], 4: [3], 5: [3, 4], 6: [3, 4, 5], 7: [6]}
    assert plan_load(files, ref).snapshot.version == 6
    p.close()


def test_v1_mode_overwrites_and_loads_by_version(
    storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp_path: Path
) -> None:
    opts = options.with_(format="v1", snapshot_interval=2)
    p = StateStoreProvider(storage, STORE, opts, uploader=uploader)
    r1 = commit(p, CheckpointRef(0), {b"k": b"attempt-1"})
    assert r1.checkpoint_id is None and r1.base_id is None
    commit(p, CheckpointRef(0), {b"k": b"attempt-2"})  # a second attempt overwrites 1.changelog
    files = StoreFiles(storage, STORE)
    assert {n.name for n in files.files} == {"1.changelog"}
    r2 = commit(p, CheckpointRef(1), {b"j": b"2"})
    uploader.drain(30)
    assert StoreFiles(storage, STORE).has_snapshot(CheckpointRef(2))
    fresh = StateStoreProvider(storage, STORE, opts.with_(local_dir=tmp_path / "other"), uploader=uploader)
    assert state_at(fresh, CheckpointRef(r2.version)) == {b"k": b"attempt-2", b"j": b"2"}
    fresh.close()
    p.close()


def test_switch_v1_to_v2_and_back(storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp_path: Path) -> None:
    v1 = options.with_(format="v1", snapshot_interval=3)
    v2 = options.with_(format="v2", snapshot_interval=3)
    p = StateStoreProvider(storage, STORE, v1, uploader=uploader)
    ref, state = run_versions(p, 4)
    p.close()
    # V1 -> V2: the driver has no id for version 4 (a V1 commit) -> load by version, then a
    # synchronous full snapshot 5_<id>.zip with an empty lineage, and no changelog.
    p = StateStoreProvider(storage, STORE, v2.with_(local_dir=tmp_path / "v2"), uploader=uploader)
    r5 = commit(p, CheckpointRef(4), {b"five": b"5"})
    state[b"five"] = b"5"
    files = StoreFiles(storage, STORE)
    assert files.has_snapshot(ref_of(r5)) and not files.has_changelog(ref_of(r5))
    assert files.snapshot_metadata(ref_of(r5)).lineage == ()
    ref7, more = run_versions(p, 2, ref_of(r5), tag=b"v2")
    state.update(more)
    assert StoreFiles(storage, STORE).lineage_of(ref7)[0] == ref_of(r5)
    plan = plan_load(StoreFiles(storage, STORE), ref7)
    assert plan.snapshot == ref_of(r5) and [r.version for r in plan.changelogs] == [6, 7]
    p.close()
    fresh = StateStoreProvider(storage, STORE, v2.with_(local_dir=tmp_path / "fresh"), uploader=uploader)
    assert state_at(fresh, ref7) == state
    fresh.close()
    # V2 -> V1: load (7, id), the first V1 checkpoint is a synchronous 8.zip.
    p = StateStoreProvider(storage, STORE, v1.with_(local_dir=tmp_path / "back"), uploader=uploader)
    r8 = commit(p, ref7, {b"eight": b"8"})
    assert r8.checkpoint_id is None and r8.base_id == ref7.id
    state[b"eight"] = b"8"
    assert StoreFiles(storage, STORE).has_snapshot(CheckpointRef(8))
    r9 = commit(p, CheckpointRef(8), {b"nine": b"9"})
    state[b"nine"] = b"9"
    p.close()
    uploader.drain(30)
    fresh = StateStoreProvider(storage, STORE, v1.with_(local_dir=tmp_path / "fresh1"), uploader=uploader)
    assert state_at(fresh, CheckpointRef(r9.version)) == state
    fresh.close()


def test_v1_load_of_a_v2_version_without_id_explains(storage: Storage, options: StoreOptions, uploader: SnapshotUploader) -> None:
    p = StateStoreProvider(storage, STORE, options, uploader=uploader)
    run_versions(p, 2)
    p.close()
    p = StateStoreProvider(storage, STORE, options.with_(format="v1"), uploader=uploader)
    with pytest.raises(UnplannableError, match="load it with its checkpoint id"):
        p.load(2)
    p.close()


def test_two_providers_in_one_process_use_separate_local_dirs(storage: Storage, options: StoreOptions, uploader: SnapshotUploader) -> None:
    a = StateStoreProvider(storage, STORE, options, uploader=uploader)
    b = StateStoreProvider(storage, STORE, options, uploader=uploader)
    assert a._dir != b._dir
    ra = commit(a, CheckpointRef(0), {b"k": b"a"})
    rb = commit(b, CheckpointRef(0), {b"k": b"b"})
    assert state_at(a, ref_of(rb)) == {b"k": b"b"}
    assert state_at(b, ref_of(ra)) == {b"k": b"a"}
    a.close()
    b.close()


def test_concurrent_attempts_on_two_executors(storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp_path: Path) -> None:
    """Speculative copies run at the same time on two hosts; both files survive, ids differ."""
    execs = [StateStoreProvider(storage, STORE, options.with_(local_dir=tmp_path / f"e{i}"), uploader=uploader) for i in range(2)]
    base, state = run_versions(execs[0], 3)
    results: list = [None, None]

    def attempt(i: int) -> None:
        results[i] = commit(execs[i], base, {b"winner": b"attempt-%d" % i})

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[0].checkpoint_id != results[1].checkpoint_id
    for i in range(2):
        assert state_at(execs[1 - i], ref_of(results[i]))[b"winner"] == b"attempt-%d" % i
    for e in execs:
        e.close()


def test_batched_calls_sort_internally_but_keep_caller_order(provider: StateStoreProvider) -> None:
    """Large batches are applied in key order; results and last-write-wins follow the caller's order."""
    keys = [b"k%03d\x00" % i for i in range(300, 0, -1)]  # descending, trailing NULs
    values = [b"v%d\x00\x00" % i for i in range(300)]
    with provider.load(0) as txn:
        txn.put_many(keys + [keys[0]], values + [b"last-wins"])  # a repeated key: the later put wins
        txn.delete_many(keys[-100:] + [b"absent"])
        probe = [b"absent"] + keys[:5] + keys[-3:] + keys[:5]
        expected = [None, b"last-wins", *values[1:5], None, None, None, b"last-wins", *values[1:5]]
        assert txn.get_many(probe) == expected
        assert txn.get_many(probe * 20) == expected * 20  # large enough to take the sorted path
        r = txn.commit()
    state = state_at(provider, ref_of(r))
    assert len(state) == 200 and state[keys[0]] == b"last-wins" and keys[-1] not in state
    assert list(state) == sorted(state)


def test_queued_snapshot_survives_a_provider_restart_in_the_same_process(
    storage: Storage, options: StoreOptions, uploader: SnapshotUploader
) -> None:
    p = StateStoreProvider(storage, STORE, options, uploader=uploader)
    with failpoints.armed("snapshot.upload.before", "delay(800)"):
        r = commit(p, CheckpointRef(0), {b"k": b"1"}, snapshot=True)
        p.close()
        again = StateStoreProvider(storage, STORE, options, uploader=uploader)  # claims the same local dir
        assert uploader.drain(30)
    assert uploader.failed == 0 and StoreFiles(storage, STORE).has_snapshot(ref_of(r))
    again.close()
