"""Lineage verifier: is the committed history one linear chain that can be loaded?

Reads the commit log and every operator/partition/store directory of a checkpoint,
statebed's or Spark's own (4.1+ V2), and checks, for every committed batch `b` and store:

* the committed id of version `b+1` has a changelog or a snapshot (`missing-checkpoint`);
* that file is readable and intact: CRC32C sidecar, else every LZ4 block (`unreadable-file`);
* its lineage says its base is exactly `(b, id committed by batch b-1)` (`lineage-break`),
  its versions increase by one and every earlier entry is a committed id too
  (`non-linear-lineage`: the file descends from an attempt the driver did not commit);
* the latest committed version (with `all_versions`, every retained one) has a load plan
  whose files all exist and agree (`unplannable`);
* the commit log has no holes (`commit-gap`).

Files of attempts the commit log did not pick are orphans: listed, not anomalies.
Versions below the oldest file of a store were cleaned up by retention and are not
checked. A V1 checkpoint has no ids to check: the verdict is "unknown".
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from statebed_store import CheckpointRef, CommitLog, HeaderCache, Storage, StoreFiles, StoreId, check_plan, plan_load
from statebed_store.commitlog import CommitRecord, parse_commit
from statebed_store.errors import CheckpointFileError, LineageError, StorageError, UnplannableError, UsageError
from statebed_store.inspection import discover_stores, store_index
from statebed_store.lineage import Lineage
from statebed_store.naming import CHANGELOG, COMMITS_DIR, SNAPSHOT, sidecar_name

from .result import Anomaly, Verdict, merge_verdicts

__all__ = ["KINDS", "LineageReport", "verify_lineage"]

KINDS = ("missing-checkpoint", "lineage-break", "non-linear-lineage", "unplannable", "unreadable-file", "commit-gap")


@dataclass
class LineageReport:
    valid: Verdict
    format: str  # "v2", "v1" or "mixed"
    checked: dict[str, int]
    anomalies: list[Anomaly] = field(default_factory=list)
    orphans: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "format": self.format,
            "checked": self.checked,
            "anomalies": [a.to_json() for a in self.anomalies],
            "orphans": self.orphans,
            "notes": self.notes,
        }


@dataclass
class _Context:
    storage: Storage
    commits: dict[int, CommitRecord]
    cache: HeaderCache
    all_versions: bool
    anomalies: list[Anomaly] = field(default_factory=list)
    orphans: list[dict[str, Any]] = field(default_factory=list)
    versions_checked: set[int] = field(default_factory=set)

    def add(
        self,
        kind: str,
        store: StoreId | None,
        version: int | None,
        ids: Iterable[str | None] = (),
        files: Iterable[str] = (),
        detail: str = "",
    ) -> None:
        self.anomalies.append(
            Anomaly(
                kind=kind,
                operator=store.operator if store else None,
                partition=store.partition if store else None,
                version=version,
                ids=list(ids),
                files=list(files),
                detail=detail if store is None or store.store_name == "default" else f"[store {store.store_name}] {detail}",
            )
        )


def verify_lineage(storage: Storage, *, all_versions: bool = False, cache: HeaderCache | None = None) -> LineageReport:
    """Check a checkpoint's committed lineage. Raises UsageError when it is no streaming checkpoint."""
    ctx = _Context(storage, {}, cache or HeaderCache(), all_versions)
    batch_ids = _commit_batches(storage)
    ctx.commits = _read_commits(ctx, batch_ids)
    _check_commit_gaps(ctx, batch_ids)
    kinds = {"v2" if rec.state_ids is not None else "v1" for rec in ctx.commits.values()}
    fmt = "mixed" if len(kinds) > 1 else (kinds.pop() if kinds else "v1")
    notes: list[str] = []
    stores = discover_stores(storage)
    verdicts: list[Verdict] = []
    if fmt == "v1":
        notes.append("V1 checkpoint: the commit log records no checkpoint ids, so there is no lineage to check")
        verdicts.append("unknown")
    else:
        _check_expected_stores(ctx, stores)
        for store in stores:
            siblings = [s.store_name for s in stores if (s.operator, s.partition) == (store.operator, store.partition)]
            _check_store(ctx, store, store_index(store, siblings))
    verdicts.append(not ctx.anomalies)
    return LineageReport(
        valid=merge_verdicts(verdicts),
        format=fmt,
        checked={
            "operators": len({s.operator for s in stores}),
            "partitions": len({(s.operator, s.partition) for s in stores}),
            "versions": len(ctx.versions_checked),
        },
        anomalies=ctx.anomalies,
        orphans=ctx.orphans,
        notes=notes,
    )


def _commit_batches(storage: Storage) -> list[int]:
    ids = CommitLog(storage).batch_ids()
    if not ids:
        raise UsageError(f"{storage.display(COMMITS_DIR)}: no commit log entries; is {storage.url} a streaming checkpoint?")
    return ids


def _read_commits(ctx: _Context, batch_ids: list[int]) -> dict[int, CommitRecord]:
    out = {}
    for b in batch_ids:
        path = f"{COMMITS_DIR}/{b}"
        try:
            out[b] = parse_commit(ctx.storage.read(path), file=ctx.storage.display(path), batch_id=b)
        except CheckpointFileError as e:
            ctx.add("unreadable-file", None, b + 1, files=[e.file], detail=f"commit log entry of batch {b}: {e.detail}")
    return out


def _check_commit_gaps(ctx: _Context, batch_ids: list[int]) -> None:
    for prev, cur in itertools.pairwise(batch_ids):
        for b in range(prev + 1, cur):
            ctx.add(
                "commit-gap",
                None,
                b + 1,
                files=[ctx.storage.display(f"{COMMITS_DIR}/{b}")],
                detail=f"batch {b} is missing from the commit log between batches {prev} and {cur}",
            )


def _check_expected_stores(ctx: _Context, stores: list[StoreId]) -> None:
    """Every (operator, partition) the latest V2 commit names must have a state directory."""
    latest = max((r for r in ctx.commits.values() if r.state_ids is not None), key=lambda r: r.batch_id, default=None)
    if latest is None or not latest.state_ids:
        return
    present = {(s.operator, s.partition) for s in stores}
    for op, parts in latest.state_ids.items():
        for p, ids in enumerate(parts):
            if (op, p) not in present:
                store = StoreId(op, p)
                ctx.add(
                    "missing-checkpoint",
                    store,
                    latest.version,
                    ids=list(ids),
                    files=[ctx.storage.display(store.dir)],
                    detail=f"batch {latest.batch_id} committed ids for operator {op} partition {p}, but it has no state files",
                )


def _lineage_of(files: StoreFiles, ref: CheckpointRef) -> Lineage | None:
    """The lineage `ref` records (changelog header, else snapshot metadata), checking both files whole."""
    lineage = None
    if files.has_changelog(ref):
        header = files.verified_changelog_header(ref)
        if header.lineage is None:
            raise LineageError(
                files.display(ref, CHANGELOG),
                f"changelog format v{header.format_version} carries no lineage, yet the file is named as a V2 checkpoint",
            )
        lineage = header.lineage
    if files.has_snapshot(ref):
        meta = files.snapshot_metadata(ref)
        if lineage is None:
            lineage = meta.lineage
        elif meta.lineage is not None and meta.lineage != lineage:
            raise LineageError(files.display(ref, SNAPSHOT), "snapshot metadata records a different lineage than its changelog")
    return lineage


def _check_store(ctx: _Context, store: StoreId, idx: int) -> None:
    committed: dict[int, str | None] = {}
    v1_versions: set[int] = set()
    for rec in ctx.commits.values():
        if rec.state_ids is None:
            v1_versions.add(rec.version)
        else:
            committed[rec.version] = rec.id_for(store.operator, store.partition, idx)
    files = StoreFiles(ctx.storage, store, cache=ctx.cache)
    present = {n.version for n in files.files if n.id is not None}
    if not committed:
        return
    floor = min(present, default=max(committed))
    checked = [v for v in sorted(committed) if v >= floor]
    for v in checked:
        ctx.versions_checked.add(v)
        _check_version(ctx, store, files, v, committed, v1_versions)
    plan_targets = checked if ctx.all_versions else checked[-1:]
    for v in plan_targets:
        cid = committed[v]
        if cid is None:
            continue
        try:
            check_plan(files, plan_load(files, CheckpointRef(v, cid)))
        except (UnplannableError, CheckpointFileError) as e:
            missing = e.missing if isinstance(e, UnplannableError) else [e.file]
            ctx.add("unplannable", store, v, ids=[cid], files=missing, detail=f"no load plan for the committed ({v}, {cid}): {e}")
        except StorageError:
            raise
    _collect_orphans(ctx, store, files, committed)


def _check_version(
    ctx: _Context, store: StoreId, files: StoreFiles, v: int, committed: dict[int, str | None], v1_versions: set[int]
) -> None:
    cid = committed[v]
    if cid is None:
        ctx.add("missing-checkpoint", store, v, detail=f"commit log entry of batch {v - 1} records no id for this store")
        return
    ref = CheckpointRef(v, cid)
    if not files.has_changelog(ref) and not files.has_snapshot(ref):
        ctx.add(
            "missing-checkpoint",
            store,
            v,
            ids=[cid],
            files=[files.display(ref, CHANGELOG)],
            detail=f"batch {v - 1} committed ({v}, {cid}) but neither its changelog nor its snapshot exists",
        )
        return
    try:
        lineage = _lineage_of(files, ref)
    except LineageError as e:
        ctx.add("non-linear-lineage", store, v, ids=[cid], files=[e.file], detail=e.detail)
        return
    except CheckpointFileError as e:
        ctx.add("unreadable-file", store, v, ids=[cid], files=[e.file], detail=e.detail)
        return
    if lineage is None:
        return  # a Spark snapshot without lineage and no changelog left: nothing to compare
    shown = files.display(ref, CHANGELOG if files.has_changelog(ref) else SNAPSHOT)
    base = lineage[-1] if lineage else None
    prev = v - 1
    expected: CheckpointRef | None
    if prev == 0 or prev in v1_versions:
        expected = None  # version 1, or the first V2 checkpoint after a V1 one (a switch snapshot)
    elif prev in committed:
        expected = CheckpointRef(prev, committed[prev])
    else:
        expected = base  # the commit log no longer holds batch v-2: nothing to compare with
    if base != expected:
        ctx.add(
            "lineage-break",
            store,
            v,
            ids=[base.id if base else None, expected.id if expected else None],
            files=[shown],
            detail=f"its lineage says the base is {base or 'the empty state'}, but the commit log committed {expected or 'the empty state'}",
        )
        return
    for item in lineage[:-1]:
        if item.version in committed and committed[item.version] != item.id:
            ctx.add(
                "non-linear-lineage",
                store,
                v,
                ids=[item.id, committed[item.version]],
                files=[shown],
                detail=f"its lineage passes through {item}, an attempt the commit log did not commit (it committed {committed[item.version]})",
            )
            return


def _collect_orphans(ctx: _Context, store: StoreId, files: StoreFiles, committed: dict[int, str | None]) -> None:
    latest = max(committed)
    by_ref: dict[CheckpointRef, list[str]] = {}
    for name in sorted(files.files):
        if name.id is None or committed.get(name.version) == name.id:
            continue
        paths = by_ref.setdefault(CheckpointRef(name.version, name.id), [])
        paths.append(store.path(name.name))
        if files.has_sidecar(CheckpointRef(name.version, name.id), name.kind):
            paths.append(store.path(sidecar_name(name.name)))
    for ref, paths in sorted(by_ref.items()):
        ctx.orphans.append(
            {
                "operator": store.operator,
                "partition": store.partition,
                "store": store.store_name,
                "version": ref.version,
                "id": ref.id,
                "files": paths,
                "why": "never committed (batch not committed yet, or the driver died)" if ref.version > latest else "a losing attempt",
            }
        )
