"""Read-only inspection of a checkpoint: statebed's own or one written by Spark.

Finds the stores under `state/`, maps each to its index in the commit log's
`stateUniqueIds` (Spark lists a partition's stores in a fixed order; the default store
has no directory level), lists every version with its ids, and rebuilds state for dumps.
Nothing here writes to the checkpoint.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from statebed_base.errors import StatebedError, UsageError

from .commitlog import CommitLog, CommitRecord, with_offset_partitions
from .config import StoreOptions
from .formats import V1, V2
from .lineage import CheckpointRef
from .naming import (
    CHANGELOG,
    COMMITS_DIR,
    DEFAULT_STORE,
    LOGS_DIR,
    METADATA_DIR,
    SNAPSHOT,
    SST_DIR,
    STATE_DIR,
    StateFileName,
    StoreId,
    parse_index,
    parse_state_file,
)
from .plan import LoadPlan
from .retention import kept_window, needed_names, needed_refs
from .row_checksum import checkpoint_row_checksums
from .storage.base import Storage
from .store import StateStoreProvider
from .store_files import StoreFiles
from .uploader import SnapshotUploader

__all__ = [
    "JOIN_STORE_ORDER",
    "commit_records",
    "committed_ref",
    "committed_store_names",
    "discover_stores",
    "dump_state",
    "list_checkpoint",
    "plan_json",
    "render_bytes",
    "resolve_target",
    "store_index",
]

# Spark's stream-stream join keeps four stores per partition, listed in this order.
JOIN_STORE_ORDER = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")
_SKIP_DIRS = {SST_DIR, METADATA_DIR, LOGS_DIR}


def _has_state_files(storage: Storage, directory: str) -> bool:
    return any(parse_state_file(f.name) for f in storage.list(directory))


def _is_number(name: str) -> bool:
    return parse_index(name) is not None


def _skip(notes: list[str] | None, storage: Storage, path: str, why: str) -> None:
    if notes is not None:
        notes.append(f"skipped {storage.display(path)}: {why}")


def _not_dirs(storage: Storage, directory: str, notes: list[str] | None) -> None:
    """Name the entries of `directory` that are named like an operator or partition but are no
    directory (a file, FIFO or symlink loop): skipped, never silently."""
    for f in storage.list(directory):
        if _is_number(f.name):
            _skip(notes, storage, f"{directory}/{f.name}", "named like a state directory but not a directory")


def discover_stores(storage: Storage, notes: list[str] | None = None) -> list[StoreId]:
    """Every store directory under `state/` that holds state files, sorted.

    A stray directory (`state/é`, `state/0/0/my store`) is skipped, never fatal; with `notes`,
    each skipped path is named there.
    """
    out: list[StoreId] = []
    _not_dirs(storage, STATE_DIR, notes)
    for op in storage.list_dirs(STATE_DIR):
        if not _is_number(op):
            _skip(notes, storage, f"{STATE_DIR}/{op}", "not an operator id")
            continue
        _not_dirs(storage, f"{STATE_DIR}/{op}", notes)
        for part in storage.list_dirs(f"{STATE_DIR}/{op}"):
            if not _is_number(part):
                if not part.startswith("_"):  # Spark's `_metadata`
                    _skip(notes, storage, f"{STATE_DIR}/{op}/{part}", "not a partition id")
                continue
            pdir = f"{STATE_DIR}/{op}/{part}"
            if _has_state_files(storage, pdir):
                out.append(StoreId(int(op), int(part)))
            for name in storage.list_dirs(pdir):
                if name in _SKIP_DIRS or name.startswith("_") or not _has_state_files(storage, f"{pdir}/{name}"):
                    continue
                try:
                    out.append(StoreId(int(op), int(part), name))
                except UsageError as e:
                    _skip(notes, storage, f"{pdir}/{name}", str(e))
    return sorted(out)


def committed_store_names(count: int, present: list[str]) -> list[str] | None:
    """The store names a commit's `count` ids for one partition stand for, given the store
    directories present; None when the names cannot be told (an unknown multi-store operator)."""
    if count == 1 and len(present) <= 1:
        return present or [DEFAULT_STORE]
    if count == len(JOIN_STORE_ORDER) and set(present) <= set(JOIN_STORE_ORDER):
        return list(JOIN_STORE_ORDER)
    if count == len(present):
        return sorted(present)
    return None


def store_index(store: StoreId, siblings: list[str]) -> int:
    """Index of `store` among its partition's stores in the commit log's id lists."""
    if store.store_name == DEFAULT_STORE:
        return 0
    if set(siblings) <= set(JOIN_STORE_ORDER):
        return JOIN_STORE_ORDER.index(store.store_name)
    return sorted(siblings).index(store.store_name)


def commit_records(storage: Storage) -> dict[int, CommitRecord]:
    log = CommitLog(storage)
    out = {}
    for b in log.batch_ids():
        rec = log.read(b)
        if rec is not None:
            out[b] = rec
    return with_offset_partitions(storage, out)


def committed_ref(storage: Storage, store: StoreId, siblings: list[str] | None = None, batch: int | None = None) -> CheckpointRef:
    """The `(version, id)` the commit log says is current for `store` (latest batch by default)."""
    log = CommitLog(storage)
    ids = log.batch_ids()
    if not ids:
        raise UsageError(f"{storage.display(COMMITS_DIR)}: no commit log entries; pass --version (and --id)")
    b = ids[-1] if batch is None else batch
    rec = log.read(b)
    if rec is None:
        raise UsageError(f"batch {b} is not committed in {storage.display(COMMITS_DIR)}")
    count = rec.partition_count(store.operator)
    if count is not None and store.partition >= count:
        raise UsageError(
            f"{storage.display(log.path(b))}: batch {b} committed {count} partition(s) of operator {store.operator}, "
            f"so {store} is not part of it (the partition count changed: a repartition)"
        )
    idx = store_index(store, siblings or [store.store_name])
    cid = rec.id_for(store.operator, store.partition, idx)
    if cid is None and rec.state_ids is not None:  # a V2 commit without this store: not a V1 load by version
        raise UsageError(
            f"{storage.display(log.path(b))}: batch {b} is a V2 commit but records no checkpoint id for {store}; pass --version and --id"
        )
    return CheckpointRef(rec.version, cid)


def stores_of_batch(storage: Storage, stores: list[StoreId], batch: int | None) -> tuple[list[StoreId], dict[int, int]]:
    """Those of `stores` that committed batch `batch` (None: the latest) took part in, and that batch's
    partition count per operator (empty for V1): a repartition changes both from batch to batch."""
    log = CommitLog(storage)
    ids = log.batch_ids()
    rec = log.read(ids[-1] if batch is None else batch) if ids else None
    if rec is None:
        return stores, {}
    counts = {s.operator: n for s in stores if (n := rec.partition_count(s.operator)) is not None}
    return [s for s in stores if s.partition < counts.get(s.operator, s.partition + 1)], counts


def _siblings(stores: list[StoreId], store: StoreId) -> list[str]:
    return [s.store_name for s in stores if (s.operator, s.partition) == (store.operator, store.partition)]


def list_checkpoint(storage: Storage) -> dict[str, Any]:
    """Everything `statebed ls` shows, as plain data; `notes` names the stray directories skipped.
    Each (version, id)'s `needed` lists its files a retained committed batch's load plan reads
    (`retention.needed_names`: what verify lineage never calls an orphan, cleanup never deletes)."""
    commits = commit_records(storage)
    notes = CommitLog(storage).strays()
    stores = discover_stores(storage, notes)
    window = kept_window(storage, sorted(commits))
    kinds: set[str] = set()
    out_stores = []
    for store in stores:
        idx = store_index(store, _siblings(stores, store))
        committed = {rec.version: rec.id_for(store.operator, store.partition, idx) for rec in commits.values()}
        files = StoreFiles(storage, store)
        needed = needed_names(files, needed_refs(window, commits.values(), files, idx))
        versions: dict[int, list[dict[str, Any]]] = {}
        for ref in files.refs():
            kinds.add((V2 if ref.id is not None else V1).name)
            entry: dict[str, Any] = {
                "id": ref.id,
                "committed": ref.version in committed and committed[ref.version] == ref.id,
                "changelog": files.has_changelog(ref),
                "snapshot": files.has_snapshot(ref),
                "needed": [
                    label
                    for label, k in (("changelog", CHANGELOG), ("snapshot", SNAPSHOT))
                    if StateFileName(ref.version, ref.id, k) in needed
                ],
                "lineage": None,
            }
            try:
                lineage = None
                if files.has_changelog(ref):
                    header = files.changelog_header(ref)
                    entry["changelogFormat"] = header.format_version
                    lineage = header.lineage
                elif files.has_snapshot(ref) and ref.id is not None:
                    lineage = files.snapshot_metadata(ref).lineage
                if lineage is not None:
                    entry["lineage"] = [{"version": r.version, "id": r.id} for r in lineage]
            except StatebedError as e:
                entry["error"] = str(e)
            versions.setdefault(ref.version, []).append(entry)
        out_stores.append(
            {
                "operator": store.operator,
                "partition": store.partition,
                "store": store.store_name,
                "dir": store.dir,
                "versions": [{"version": v, "ids": versions[v]} for v in sorted(versions)],
            }
        )
    fmt = "mixed" if len(kinds) > 1 else (kinds.pop() if kinds else "empty")
    return {
        "checkpoint": storage.url,
        "format": fmt,
        "commits": {"count": len(commits), "latestBatch": max(commits) if commits else None},
        "stores": out_stores,
        "notes": notes,
    }


def render_bytes(field: str, raw: bytes) -> dict[str, str]:
    """`{field: text}` when `raw` is printable UTF-8, else `{field_b64: base64}`."""
    try:
        text = raw.decode("utf-8")
        if all(c.isprintable() or c in "\t\n\r" for c in text):
            return {field: text}
    except UnicodeDecodeError:
        pass
    return {f"{field}_b64": base64.b64encode(raw).decode()}


def resolve_target(storage: Storage, store: StoreId, version: int | None, checkpoint_id: str | None) -> CheckpointRef:
    if version is None:
        if checkpoint_id is not None:
            raise UsageError("a checkpoint id needs a version")
        return committed_ref(storage, store, _siblings(discover_stores(storage), store))
    return CheckpointRef(version, checkpoint_id)


def dump_state(storage: Storage, store: StoreId, ref: CheckpointRef) -> Iterator[tuple[bytes, bytes]]:
    """Every `(key, value)` of `ref`, rebuilt in a throwaway local instance. Rows that carry Spark's
    row checksums are verified as they load and served without them (`row_checksum`)."""
    rows = checkpoint_row_checksums(storage)
    with tempfile.TemporaryDirectory(prefix="statebed-dump-") as tmp:
        opts = StoreOptions(local_dir=Path(tmp), format=(V2 if ref.id is not None else V1).store_format, row_checksums=rows)
        provider = StateStoreProvider(storage, store, opts, uploader=SnapshotUploader())
        try:
            txn = provider.load(ref.version, ref.id)
            try:
                if rows is None:
                    yield from txn.items()
                else:
                    shown = storage.display(store.dir)
                    for key, value in txn.items():
                        yield key, rows.unframe(key, value, file=shown, verify=False)
            finally:
                txn.abort()
        finally:
            provider.close()


def describe_file(files: StoreFiles, ref: CheckpointRef, kind: str) -> dict[str, Any]:
    return {"version": ref.version, "id": ref.id, "file": files.path(ref, kind)}


def plan_json(files: StoreFiles, plan: LoadPlan) -> dict[str, Any]:
    """The `statebed plan --json` document (paths relative to the checkpoint root)."""
    return {
        "snapshot": describe_file(files, plan.snapshot, SNAPSHOT) if plan.snapshot is not None else None,
        "changelogs": [describe_file(files, r, CHANGELOG) for r in plan.changelogs],
    }
