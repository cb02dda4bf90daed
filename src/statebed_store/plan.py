"""Load planning: which snapshot and changelogs rebuild a `(version, id)`.

V2 (seed, "State Store Load"): use `<v>_<id>.zip` if it exists; otherwise read the
lineage in `<v>_<id>.changelog`, take the newest snapshot among the lineage's entries and
replay the changelogs after it along the lineage. If none of them has a snapshot, keep
tracing through the oldest entry's own changelog (seed Example 3, a presumed snapshot that
was never uploaded) until a snapshot is found or version 1 is reached (start empty).
Files of other ids of the same version are never looked at (Example 2).

V1: the newest `<n>.zip` with n <= v, then `<n>.changelog` up to v, by name only.

A snapshot that turns out unusable (damaged, foreign, an SST missing or corrupt) is
planned around: `plan_with_fallback` is the one loop that does it, for loads (which find
out while unpacking) and for `statebed plan` and the verifier (`loadable_plan`, which find
out by checking the same things), so they agree on what loads.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from statebed_base.errors import CheckpointFileError, LineageError, StatebedError, UnplannableError

from .lineage import CheckpointRef, Lineage
from .naming import CHANGELOG, SNAPSHOT
from .store_files import StoreFiles
from .unpack import check_snapshot

__all__ = ["LoadPlan", "SnapshotUnusable", "check_link", "check_plan", "loadable_plan", "plan_load", "plan_with_fallback"]

T = TypeVar("T")


@dataclass(frozen=True)
class LoadPlan:
    target: CheckpointRef
    snapshot: CheckpointRef | None
    changelogs: tuple[CheckpointRef, ...]
    skipped: tuple[tuple[CheckpointRef, StatebedError], ...] = field(default=(), compare=False)  # snapshots planned around, why

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
    have = {r.version for r in files.refs(CHANGELOG) if r.id is None and base < r.version <= target.version}
    count = target.version - base
    if len(have) < count:  # walk only as far as the first gaps: a stray `100000000.changelog` is no hang
        gaps = (v for v in range(base + 1, target.version + 1) if v not in have)
        missing = [files.display(CheckpointRef(v), CHANGELOG) for v in itertools.islice(gaps, 100)]
        where = f"after snapshot {files.display(CheckpointRef(base), SNAPSHOT)}" if base else "with no snapshot at or below it"
        raise UnplannableError(
            f"version {target.version} of {files.store}",
            f"{count - len(have)} changelog(s) missing {where}, first {missing[0]}",
            missing=missing,
        )
    return LoadPlan(target, CheckpointRef(base) if base else None, tuple(CheckpointRef(v) for v in range(base + 1, target.version + 1)))


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
    """Check every file the plan names as a load would use it; raises the error naming the first bad file.

    The snapshot as `unpack.check_snapshot` does (metadata naming itself, every SST present
    with its size and contents); each changelog whole (sidecar and owner, every block and
    record), and its lineage must end at the plan entry before it (or be empty at version 1).
    """
    if plan.snapshot is not None:
        check_snapshot(files, plan.snapshot)
    _check_changelogs(files, plan)


def _check_changelogs(files: StoreFiles, plan: LoadPlan) -> None:
    prev = plan.snapshot
    for ref in plan.changelogs:
        check_link(ref, files.verified_changelog_header(ref).lineage, prev, file=files.display(ref, CHANGELOG))
        prev = ref


class SnapshotUnusable(Exception):
    """The plan's snapshot cannot be used; `plan_with_fallback` plans again without it."""

    def __init__(self, ref: CheckpointRef, error: StatebedError) -> None:
        super().__init__(str(error))
        self.ref, self.error = ref, error


def plan_with_fallback(files: StoreFiles, target: CheckpointRef, use: Callable[[LoadPlan], T]) -> T:
    """Plan `target` and hand the plan to `use`; when `use` finds its snapshot unusable, plan without it.

    The one planning loop of loads and checks. The plan given to `use` lists the snapshots
    skipped so far. When no plan is left, the first snapshot's error is raised (it says
    what is wrong), else the UnplannableError.
    """
    skipped: list[tuple[CheckpointRef, StatebedError]] = []
    while True:
        try:
            plan = plan_load(files, target, exclude_snapshots=frozenset(r for r, _ in skipped))
        except UnplannableError:
            if skipped:
                raise skipped[0][1] from None
            raise
        try:
            return use(replace(plan, skipped=tuple(skipped)))
        except SnapshotUnusable as bad:
            skipped.append((bad.ref, bad.error))


def loadable_plan(files: StoreFiles, target: CheckpointRef) -> tuple[LoadPlan, list[StatebedError]]:
    """The checked plan a load of `target` ends up with (`statebed plan`, the verifier), and the
    errors of the snapshots it plans around; raises the first error when no plan passes."""

    def check(plan: LoadPlan) -> LoadPlan:
        if plan.snapshot is not None:
            try:
                check_snapshot(files, plan.snapshot)
            except (CheckpointFileError, UnplannableError) as e:
                raise SnapshotUnusable(plan.snapshot, e) from None
        _check_changelogs(files, plan)
        return plan

    plan = plan_with_fallback(files, target, check)
    return plan, [e for _, e in plan.skipped]
