"""A process whose open instance is behind catches up (issue 41): a partition that comes back to
a Python worker after others ran it replays only the changelogs committed since, on the instance
it holds, never a snapshot; it rebuilds from storage when the committed chain does not pass
through what it holds (another attempt's id)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from checkpoint_helpers import commit, ref_of

from statebed_store import CheckpointRef, SnapshotUploader, StateStoreProvider, StoreId, StoreOptions, open_storage
from statebed_store.changelog import parse_changelog
from statebed_store.naming import CHANGELOG, StateFileName
from statebed_store.storage.base import Storage

STORE = StoreId(0, 0)


def providers(tmp_path: Path, **opts: object) -> tuple[Storage, StateStoreProvider, StateStoreProvider, StoreOptions]:
    storage = open_storage(tmp_path / "ckpt")
    options = dataclasses.replace(StoreOptions(local_dir=tmp_path / "local", snapshot_upload_backoff_s=0.01), **opts)
    uploader = SnapshotUploader()
    return (
        storage,
        StateStoreProvider(storage, STORE, options, uploader=uploader),
        StateStoreProvider(storage, STORE, options, uploader=uploader),
        options,
    )


def test_a_process_behind_replays_only_the_changelogs_it_missed(tmp_path: Path) -> None:
    storage, a, b, options = providers(tmp_path, snapshot_interval=10)
    r1 = commit(a, CheckpointRef(0), {b"k": b"1"})  # a holds version 1
    r2 = commit(b, ref_of(r1), {b"k": b"2"}, snapshot=True)  # b ran versions 2 and 3, with a snapshot at 2
    r3 = commit(b, ref_of(r2), {b"k": b"3", b"j": b"1"})
    assert b.uploader.drain(30)
    before = dataclasses.replace(a.metrics)
    with a.load(r3.version, r3.checkpoint_id) as txn:
        assert dict(txn.items()) == {b"k": b"3", b"j": b"1"}
        r4 = txn.commit()
    assert a.metrics.catch_ups == before.catch_ups + 1 and a.metrics.cache_hits == before.cache_hits
    assert a.metrics.snapshot_loads == before.snapshot_loads  # b's snapshot of version 2 was not read
    assert a.metrics.changelogs_replayed == before.changelogs_replayed + 2
    # the lineage a's next changelog records is a rebuild's: from b's snapshot of version 2 on
    name = STORE.path(StateFileName(r4.version, r4.checkpoint_id, CHANGELOG).name)
    lineage = parse_changelog(storage.read(name), file=name, version=r4.version).lineage
    assert [(x.version, x.id) for x in lineage] == [(2, r2.checkpoint_id), (3, r3.checkpoint_id)]
    fresh = StateStoreProvider(storage, STORE, options, uploader=SnapshotUploader())
    with fresh.load(r4.version, r4.checkpoint_id) as txn:
        assert dict(txn.items()) == {b"k": b"3", b"j": b"1"}
        txn.abort()


def test_an_instance_at_a_losing_attempts_id_is_rebuilt_not_caught_up(tmp_path: Path) -> None:
    _, a, b, _ = providers(tmp_path)
    r1 = commit(b, CheckpointRef(0), {b"k": b"1"})
    loser = commit(a, ref_of(r1), {b"k": b"lost"})  # a's attempt of version 2: not the one committed
    winner = commit(b, ref_of(r1), {b"k": b"2"})
    r3 = commit(b, ref_of(winner), {b"j": b"1"})
    assert (loser.version, loser.checkpoint_id) != (winner.version, winner.checkpoint_id)
    before = dataclasses.replace(a.metrics)
    with a.load(r3.version, r3.checkpoint_id) as txn:
        assert dict(txn.items()) == {b"k": b"2", b"j": b"1"}  # the winner's chain, never the loser's value
        txn.abort()
    assert a.metrics.catch_ups == before.catch_ups and a.metrics.changelogs_replayed == before.changelogs_replayed + 3


def test_a_damaged_changelog_on_the_way_drops_the_instance_and_the_rebuild_names_it(tmp_path: Path) -> None:
    storage, a, b, _ = providers(tmp_path)
    r1 = commit(a, CheckpointRef(0), {b"k": b"1"})
    r2 = commit(b, ref_of(r1), {b"k": b"2"})
    name = STORE.path(StateFileName(r2.version, r2.checkpoint_id, CHANGELOG).name)
    storage.write(name, storage.read(name)[:-3])  # truncated after it was committed
    try:
        a.load(r2.version, r2.checkpoint_id)
    except Exception as e:  # the rebuild's error, naming the file
        assert name.rsplit("/", 1)[-1] in str(e)
    else:
        raise AssertionError("a truncated changelog was replayed without an error")
    assert a.loaded is None and a.metrics.catch_ups == 0
