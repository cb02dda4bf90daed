"""A Python worker that dies (Spark kills it with its task, or chaos does) leaves its instance in
the host's shared directory; the next process to claim the directory reopens it, rather than
rebuild from storage, only when the dead holder recorded what it holds after its last commit
(issue 41). A holder that died inside a transaction recorded nothing: that instance is rebuilt."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
from checkpoint_helpers import state_at

from statebed_store import CheckpointRef, SnapshotUploader, StateStoreProvider, StoreId, StoreOptions, open_storage
from statebed_store.engine import RocksEngine
from statebed_store.local_dirs import local_root, store_dir
from statebed_store.naming import DB_DIR, HELD_FILE

STORE = StoreId(0, 0)

HOLDER = textwrap.dedent(
    """
    import json, os, signal, sys
    from pathlib import Path
    from statebed_store import CheckpointRef, SnapshotUploader, StateStoreProvider, StoreId, StoreOptions, open_storage
    storage = open_storage(Path(sys.argv[1]))
    options = StoreOptions(local_dir=Path(sys.argv[2]), snapshot_interval=2)
    p = StateStoreProvider(storage, StoreId(0, 0), options, uploader=SnapshotUploader(), share=True)
    base = (0, None)
    for i in range(3):
        with p.load(*base) as txn:
            txn.put_many([b"k", b"n%d" % i], [b"%d" % i, b"x"])
            r = txn.commit()
        base = (r.version, r.checkpoint_id)
    print(json.dumps(base), flush=True)
    if sys.argv[3] == "mid-transaction":
        txn = p.load(*base)
        txn.put(b"k", b"never committed")
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no flush: as Spark kills a worker
    """
)


def run_holder(tmp_path: Path, when: str) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-c", HOLDER, str(tmp_path / "ckpt"), str(tmp_path / "local"), when], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    version, cid = json.loads(proc.stdout)
    return version, cid


def successor(tmp_path: Path) -> StateStoreProvider:
    options = StoreOptions(local_dir=tmp_path / "local", snapshot_interval=2)
    return StateStoreProvider(open_storage(tmp_path / "ckpt"), STORE, options, uploader=SnapshotUploader(), share=True)


EXPECTED = {b"k": b"2", b"n0": b"x", b"n1": b"x", b"n2": b"x"}


def test_the_next_process_takes_over_what_a_killed_holder_committed(tmp_path: Path) -> None:
    version, cid = run_holder(tmp_path, "after-commit")
    p = successor(tmp_path)
    with p.load(version, cid) as txn:
        assert dict(txn.items()) == EXPECTED  # the unsynced WAL replayed: every committed write is there
        txn.put(b"k", b"3")
        txn.commit()
    m = p.metrics
    assert (m.resumes, m.cache_hits, m.snapshot_loads, m.changelogs_replayed) == (1, 1, 0, 0)
    p.close()
    sdir = store_dir(local_root(tmp_path / "local", open_storage(tmp_path / "ckpt").url), STORE)
    assert not (sdir / HELD_FILE).exists() and not (sdir / DB_DIR).exists()  # a closed instance is never taken over


def test_a_holder_killed_inside_a_transaction_leaves_an_instance_nobody_takes_over(tmp_path: Path) -> None:
    version, cid = run_holder(tmp_path, "mid-transaction")
    p = successor(tmp_path)
    assert state_at(p, CheckpointRef(version, cid)) == EXPECTED  # never "never committed"
    assert (p.metrics.resumes, p.metrics.cache_hits) == (0, 0)
    assert p.metrics.snapshot_loads + p.metrics.changelogs_replayed > 0  # rebuilt from storage
    p.close()


def test_a_record_without_its_instance_is_not_taken_over(tmp_path: Path) -> None:
    version, cid = run_holder(tmp_path, "after-commit")
    sdir = store_dir(local_root(tmp_path / "local", open_storage(tmp_path / "ckpt").url), STORE)
    for f in (sdir / DB_DIR).iterdir():
        f.unlink()  # the instance is gone; its record stays
    p = successor(tmp_path)
    assert state_at(p, CheckpointRef(version, cid)) == EXPECTED
    assert (p.metrics.resumes, p.metrics.cache_hits) == (0, 0)
    p.close()


def test_a_checkpoint_of_an_instance_with_its_wal_on_has_no_wal(tmp_path: Path) -> None:
    """Snapshots are made of checkpoints: they hold what they held with the WAL off."""
    e = RocksEngine(tmp_path / "db")
    e.put_many(pa.array([b"a", b"b"]), pa.array([b"1", b"2"]))
    assert any(f.suffix == ".log" and f.stat().st_size for f in (tmp_path / "db").iterdir())  # the control: writes went to a WAL
    e.checkpoint(tmp_path / "copy")
    e.close()
    assert not [f.name for f in (tmp_path / "copy").iterdir() if f.suffix == ".log"]
    copy = RocksEngine(tmp_path / "copy")
    assert copy.get_many(pa.array([b"a", b"b"])) == [b"1", b"2"]
    copy.close()


def test_a_holder_that_does_not_share_drops_a_dead_holders_record(tmp_path: Path) -> None:
    """A provider that does not share (the driver's, a reader's) may rebuild the instance under a
    record another holder left: it removes the record first, so nobody later resumes the wrong state."""
    version, cid = run_holder(tmp_path, "after-commit")
    sdir = store_dir(local_root(tmp_path / "local", open_storage(tmp_path / "ckpt").url), STORE)
    assert (sdir / HELD_FILE).is_file()  # the control: the dead holder's record is there
    options = StoreOptions(local_dir=tmp_path / "local", snapshot_interval=2)
    p = StateStoreProvider(open_storage(tmp_path / "ckpt"), STORE, options, uploader=SnapshotUploader())
    with p.load(version, cid) as txn:
        txn.abort()
    assert p.metrics.resumes == 0 and not (sdir / HELD_FILE).exists()
    p.close()


def test_a_checkpoint_after_an_empty_write_has_no_wal_either(tmp_path: Path) -> None:
    """An empty batch leaves a WAL record and nothing to flush: the copy still has no WAL, and its state."""
    e = RocksEngine(tmp_path / "db")
    e.put_many(pa.array([b"a"]), pa.array([b"1"]))
    e.checkpoint(tmp_path / "first")  # flushed: the memtable is empty from here
    e.put_many(pa.array([], pa.binary()), pa.array([], pa.binary()))
    assert any(f.suffix == ".log" and f.stat().st_size for f in (tmp_path / "db").iterdir())  # the control
    e.checkpoint(tmp_path / "copy")
    e.close()
    assert not [f.name for f in (tmp_path / "copy").iterdir() if f.suffix == ".log"]
    copy = RocksEngine(tmp_path / "copy")
    assert copy.get_many(pa.array([b"a"])) == [b"1"]
    copy.close()
