"""Load planning: which snapshot and changelogs rebuild a `(version, id)`.

V2 (seed, "State Store Load"): use `<v>_<id>.zip` if it exists; otherwise read the
lineage in `<v>_<id>.changelog`, take the newest snapshot among the lineage's entries and
replay the changelogs after it along the lineage. If none of them has a snapshot, keep
tracing through the oldest entry's own changelog (seed Example 3, a presumed snapshot that
was never uploaded) until a snapshot is found or version 1 is reached (start empty).
Files of other ids of the same version are never looked at (Example 2).

V1: the newest `<n>.zip` with n <= v, then `<n>.changelog` up to v, by name only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import LineageError, MissingFileError, UnplannableError
from .lineage import CheckpointRef, Lineage
from .naming import CHANGELOG, SNAPSHOT
from .store_files import StoreFiles

__all__ = ["LoadPlan", "check_link", "check_plan", "plan_load"]


@dataclass(frozen=True)
class LoadPlan:
    target: CheckpointRef
    snapshot: CheckpointRef | None
    changelogs: tuple[CheckpointRef, ...]

    @property
    def chain(self) -> tuple[CheckpointRef, ...]:
        """Every checkpoint the plan passes through, oldest first."""
        return ((self.snapshot,) if self.snapshot else ()) + self.changelogs


def plan_load(files: StoreFiles, target: CheckpointRef, *, exclude_snapshots: frozenset[CheckpointRef] = frozenset()) -> LoadPlan:
    """Plan a load of `target`; UnplannableError names the missing file when there is none."""
    if target.version < 0:
        raise UnplannableError(str(target), "versions start at 0")
    if target.version == 0:
        return LoadPlan(target, None, ())
    if target.id is None:
        return _plan_v1(files, target, exclude_snapshots)
    return _plan_v2(files, target, exclude_snapshots)


def _plan_v2(files: StoreFiles, target: CheckpointRef, exclude: frozenset[CheckpointRef]) -> LoadPlan:
    def snapshot(ref: CheckpointRef) -> bool:
        return ref not in exclude and files.has_snapshot(ref)

    def done(base: CheckpointRef | None, chain: list[CheckpointRef]) -> LoadPlan:
        return LoadPlan(target, base, tuple(reversed(chain)))

    if snapshot(target):
        return LoadPlan(target, target, ())
    if not files.has_changelog(target):
        cl = files.display(target, CHANGELOG)
        raise UnplannableError(
            f"{target} of {files.store}",
            f"neither {files.display(target, SNAPSHOT)} nor {cl} exists",
            missing=[cl],
        )
    chain = [target]  # newest first; each entry's changelog is replayed
    cur = target
    while True:
        lineage = files.lineage_of(cur)
        if not lineage:
            if cur.version == 1:
                return done(None, chain)
            raise UnplannableError(
                f"{target} of {files.store}",
                f"{files.display(cur, CHANGELOG)} records an empty lineage at version {cur.version} "
                f"and {files.display(cur, SNAPSHOT)} does not exist",
                missing=[files.display(cur, SNAPSHOT)],
            )
        for item in reversed(lineage):
            if snapshot(item):
                return done(item, chain)
            if not files.has_changelog(item):
                cl = files.display(item, CHANGELOG)
                raise UnplannableError(
                    f"{target} of {files.store}",
                    f"version {item.version} (id {item.id}, named by the lineage of "
                    f"{files.display(cur, CHANGELOG)}) has no snapshot and its changelog {cl} is missing",
                    missing=[cl],
                )
            chain.append(item)
        if chain[-1].version == 1:
            return done(None, chain)
        cur = chain[-1]


def _plan_v1(files: StoreFiles, target: CheckpointRef, exclude: frozenset[CheckpointRef]) -> LoadPlan:
    snaps = [r.version for r in files.refs(SNAPSHOT) if r.id is None and r.version <= target.version and r not in exclude]
    base = max(snaps, default=0)
    needed = [CheckpointRef(v) for v in range(base + 1, target.version + 1)]
    missing = [files.display(r, CHANGELOG) for r in needed if not files.has_changelog(r)]
    if missing:
        where = f"after snapshot {files.display(CheckpointRef(base), SNAPSHOT)}" if base else "with no snapshot at or below it"
        raise UnplannableError(
            f"version {target.version} of {files.store}",
            f"{len(missing)} changelog(s) missing {where}, first {missing[0]}",
            missing=missing,
        )
    return LoadPlan(target, CheckpointRef(base) if base else None, tuple(needed))


def check_link(ref: CheckpointRef, lineage: Lineage | None, prev: CheckpointRef | None, *, file: str) -> None:
    """A V2 changelog must say its base is `prev` (the plan entry before it), or be version 1 from empty."""
    if ref.id is None:
        return
    if lineage is None:
        raise LineageError(file, "changelog carries no lineage, but the file is named as a V2 checkpoint")
    if prev is None:
        if ref.version != 1 or lineage:
            raise LineageError(file, f"plan starts empty but this changelog's lineage is {[str(r) for r in lineage]}")
    elif not lineage or lineage[-1] != prev:
        last = lineage[-1] if lineage else None
        raise LineageError(file, f"lineage says its base is {last}, but the plan reaches it from {prev}")


def check_plan(files: StoreFiles, plan: LoadPlan) -> None:
    """Read the header of every file the plan names and check they agree with it.

    Each changelog's own lineage must end at the plan entry before it (or be empty at
    version 1); the snapshot's metadata must be readable and its SSTs present with the
    recorded sizes. Raises the error naming the first bad file.
    """
    prev = plan.snapshot
    if plan.snapshot is not None:
        meta = files.snapshot_metadata(plan.snapshot)
        ssts = files.sst_listing()
        for f in meta.sst_files:
            info = ssts.get(f.dfs)
            sst_path = files.storage.display(f"{files.store.dir}/SSTs/{f.dfs}")
            if info is None:
                raise MissingFileError(sst_path, f"SST file named by {files.display(plan.snapshot, SNAPSHOT)} is missing")
            if info.size != f.size:
                raise MissingFileError(
                    sst_path, f"SST file is {info.size} bytes, {files.display(plan.snapshot, SNAPSHOT)} expects {f.size}"
                )
    for ref in plan.changelogs:
        check_link(ref, files.changelog_header(ref).lineage, prev, file=files.display(ref, CHANGELOG))
        prev = ref
