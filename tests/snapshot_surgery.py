"""Hand-corrupting the rows of one snapshot of a checkpoint, for tests of the judge.

`rewrite_snapshot` loads a snapshot's rows, lets a test change them (drop a key, move it to
another partition, duplicate it), and writes the result back under the same name (version and
checkpoint id) as a fresh RocksDB checkpoint with new SSTs, through statebed's own snapshot
upload, with a new `.crc` sidecar. The Hadoop `.crc` files beside the old zip are removed. The
files are whole and correct; only the rows differ. That is the damage a wrong offline
repartition would leave, and only the row checks can catch it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from statebed_store import StoreFiles, StoreId, open_storage
from statebed_store.changelog import as_binary_array
from statebed_store.engine import RocksEngine
from statebed_store.naming import SNAPSHOT, hadoop_crc_name, sidecar_name
from statebed_store.unpack import throwaway_snapshot
from statebed_store.uploader import PendingSnapshot, SstRegistry, upload_snapshot

Rows = dict[bytes, bytes]


def snapshot_rows(root: Path, store: StoreId, version: int) -> Rows:
    """The rows of `store`'s snapshot at `version` (the only one of that version)."""
    storage = open_storage(root)
    files = StoreFiles(storage, store)
    (ref,) = [r for r in files.refs(SNAPSHOT) if r.version == version]
    with throwaway_snapshot(files, ref, "statebed-surgery-") as engine:
        return dict(engine.items())


def rewrite_snapshot(root: Path, store: StoreId, version: int, change: Callable[[Rows], Rows]) -> None:
    """Replace `store`'s snapshot at `version` by one holding `change(its rows)`."""
    storage = open_storage(root)
    files = StoreFiles(storage, store)
    (ref,) = [r for r in files.refs(SNAPSHOT) if r.version == version]
    meta = files.snapshot_metadata(ref)
    rows = change(snapshot_rows(root, store, version))
    path = files.path(ref, SNAPSHOT)
    directory, _, name = path.rpartition("/")
    storage.delete([path, sidecar_name(path), f"{directory}/{hadoop_crc_name(name)}", f"{directory}/{hadoop_crc_name(sidecar_name(name))}"])
    with tempfile.TemporaryDirectory(prefix="statebed-surgery-") as tmp:
        engine = RocksEngine(Path(tmp) / "db")
        try:
            keys = sorted(rows)
            engine.put_many(as_binary_array(keys), as_binary_array([rows[k] for k in keys]))
            engine.checkpoint(Path(tmp) / "checkpoint")
        finally:
            engine.close()
        upload_snapshot(PendingSnapshot(storage, store, ref, meta.lineage, Path(tmp) / "checkpoint", SstRegistry(), len(rows)))
