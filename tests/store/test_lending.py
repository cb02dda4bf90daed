"""A worker with no instance of a partition borrows a copy of the one another process of the host
holds, instead of rebuilding it from storage (issue 41, `statebed_store.lending`). The copy is
then loaded as one's own: a hit at the base exactly, a catch-up, or a rebuild when the committed
chain does not pass through it; a lender in a transaction lends nothing."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from checkpoint_helpers import commit, ref_of, state_at

from statebed_store import CheckpointRef, SnapshotUploader, StateStoreProvider, StoreId, StoreOptions, lending, open_storage
from statebed_store.changelog import parse_changelog
from statebed_store.local_dirs import local_root, store_dir
from statebed_store.naming import CHANGELOG, StateFileName
from statebed_store.storage.base import Storage

STORE = StoreId(0, 0)


def setup(tmp_path: Path, **opts: object) -> tuple[Storage, StoreOptions]:
    storage = open_storage(tmp_path / "ckpt")
    return storage, dataclasses.replace(StoreOptions(local_dir=tmp_path / "local", snapshot_upload_backoff_s=0.01), **opts)


def provider(storage: Storage, options: StoreOptions, *, share: bool = True) -> StateStoreProvider:
    return StateStoreProvider(storage, STORE, options, uploader=SnapshotUploader(), share=share)


def test_a_worker_without_the_instance_borrows_it_at_the_base_and_rebuilds_nothing(tmp_path: Path) -> None:
    storage, options = setup(tmp_path, snapshot_interval=3)
    a = provider(storage, options)
    r1 = commit(a, CheckpointRef(0), {b"k": b"1"})
    r2 = commit(a, ref_of(r1), {b"k": b"2", b"j": b"1"})
    b = provider(storage, options)  # a holds the shared directory: b's is private
    with b.load(r2.version, r2.checkpoint_id) as txn:
        assert dict(txn.items()) == {b"k": b"2", b"j": b"1"}
        txn.put(b"k", b"3")
        r3 = txn.commit()
    m = b.metrics
    assert (m.borrows, m.cache_hits, m.catch_ups) == (1, 1, 0)
    assert (m.snapshot_loads, m.changelogs_replayed) == (0, 0)  # nothing read from storage
    # b's changelog records the lineage a would have: the borrowed instance's bookkeeping came with it
    name = STORE.path(StateFileName(r3.version, r3.checkpoint_id, CHANGELOG).name)
    lineage = parse_changelog(storage.read(name), file=name, version=r3.version).lineage
    assert [(x.version, x.id) for x in lineage] == [(1, r1.checkpoint_id), (2, r2.checkpoint_id)]
    # the lender keeps its own instance open, and its commits are unaffected by the copy
    hits = a.metrics.cache_hits
    assert state_at(a, ref_of(r2)) == {b"k": b"2", b"j": b"1"}
    assert a.metrics.cache_hits == hits + 1
    a.close()
    b.close()


def test_a_borrowed_instance_behind_the_base_catches_up(tmp_path: Path) -> None:
    storage, options = setup(tmp_path)
    a = provider(storage, options)
    r1 = commit(a, CheckpointRef(0), {b"k": b"1"})
    other = provider(storage, options, share=False)  # ran version 2 elsewhere: a is one behind
    r2 = commit(other, ref_of(r1), {b"k": b"2"})
    b = provider(storage, options)
    assert state_at(b, ref_of(r2)) == {b"k": b"2"}
    assert (b.metrics.borrows, b.metrics.catch_ups, b.metrics.changelogs_replayed) == (1, 1, 1)
    for p in (a, other, b):
        p.close()


def test_a_borrowed_instance_at_a_losing_attempts_id_is_rebuilt(tmp_path: Path) -> None:
    storage, options = setup(tmp_path)
    writer = provider(storage, options, share=False)
    r1 = commit(writer, CheckpointRef(0), {b"k": b"1"})
    a = provider(storage, options)
    loser = commit(a, ref_of(r1), {b"k": b"lost"})  # a holds version 2 at an id that was not committed
    winner = commit(writer, ref_of(r1), {b"k": b"2"})
    assert loser.checkpoint_id != winner.checkpoint_id
    b = provider(storage, options)
    assert state_at(b, ref_of(winner)) == {b"k": b"2"}  # the winner's value, never the loser's
    assert (b.metrics.borrows, b.metrics.cache_hits, b.metrics.catch_ups) == (1, 0, 0)
    assert b.metrics.changelogs_replayed == 2  # rebuilt from storage
    for p in (writer, a, b):
        p.close()


def test_a_lender_in_a_transaction_lends_nothing(tmp_path: Path) -> None:
    storage, options = setup(tmp_path)
    a = provider(storage, options)
    r1 = commit(a, CheckpointRef(0), {b"k": b"1"})
    running = a.load(r1.version, r1.checkpoint_id)  # a's task runs (a speculative copy asks meanwhile)
    running.put(b"k", b"half")
    b = provider(storage, options)
    assert state_at(b, ref_of(r1)) == {b"k": b"1"}
    assert (b.metrics.borrows, b.metrics.changelogs_replayed) == (0, 1)
    running.abort()
    for p in (a, b):
        p.close()


def test_without_share_a_provider_neither_lends_nor_borrows(tmp_path: Path) -> None:
    storage, options = setup(tmp_path)
    a = provider(storage, options, share=False)
    r1 = commit(a, CheckpointRef(0), {b"k": b"1"})
    b = provider(storage, options)
    with b.load(r1.version, r1.checkpoint_id) as txn:
        txn.abort()
    assert (b.metrics.borrows, b.metrics.changelogs_replayed) == (0, 1)
    for p in (a, b):
        p.close()


def test_a_lender_writes_nowhere_but_a_new_loan_directory_of_the_store(tmp_path: Path) -> None:
    storage, options = setup(tmp_path)
    a = provider(storage, options)
    commit(a, CheckpointRef(0), {b"k": b"1"})
    sdir = store_dir(local_root(options.local_dir, storage.url), STORE)
    lenders = sdir.with_name(sdir.name + ".lenders")
    (advert,) = (e.name for e in lenders.iterdir())
    assert advert.startswith(f"{os.getpid()}-")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    taken = tmp_path / "taken"
    for dest in (elsewhere / "loan-x", sdir / "db", sdir.parent / "other-store" / "loan-x", lenders / "loan-x"):
        assert lending._ask(advert, sdir, dest, taken) is None
        assert not dest.exists() or dest.name == "db"
    assert lending._ask(advert, sdir, sdir / "loan-ok", taken) is not None  # the control: a loan where one belongs
    assert (taken / "CURRENT").is_file() and not (sdir / "loan-ok").exists()
    a.close()
    assert not (lenders / advert).exists()


LENDER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from statebed_store import CheckpointRef, SnapshotUploader, StateStoreProvider, StoreId, StoreOptions, open_storage
    storage = open_storage(Path(sys.argv[1]))
    p = StateStoreProvider(storage, StoreId(0, 0), StoreOptions(local_dir=Path(sys.argv[2])), uploader=SnapshotUploader(), share=True)
    with p.load(0) as txn:
        txn.put(b"k", b"from another process")
        r = txn.commit()
    print(json.dumps([r.version, r.checkpoint_id]), flush=True)
    sys.stdin.read()  # lend until the test closes our stdin
    p.close()
    """
)


def test_a_worker_borrows_from_another_process_and_not_from_one_that_is_gone(tmp_path: Path) -> None:
    storage, options = setup(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", LENDER, str(tmp_path / "ckpt"), str(options.local_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        version, cid = json.loads(proc.stdout.readline())
        b = provider(storage, options)
        with b.load(version, cid) as txn:
            assert dict(txn.items()) == {b"k": b"from another process"}
            txn.abort()
        assert (b.metrics.borrows, b.metrics.cache_hits, b.metrics.changelogs_replayed) == (1, 1, 0)
        b.close()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    # a lender killed before it withdrew: its file stays, its socket is gone; the borrower drops the file
    sdir = store_dir(local_root(options.local_dir, storage.url), STORE)
    stale = sdir.with_name(sdir.name + ".lenders") / "999999999-00000000deadbeef"
    stale.write_text("statebed-lend-999999999-gone")
    c = provider(storage, options)
    assert state_at(c, CheckpointRef(version, cid)) == {b"k": b"from another process"}
    assert (c.metrics.borrows, c.metrics.changelogs_replayed) == (0, 1)
    assert not stale.exists()
    c.close()
