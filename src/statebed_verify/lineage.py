"""Lineage verifier: is the committed history one linear chain that can be loaded?

Reads the commit log and every operator/partition/store directory of a checkpoint,
statebed's or Spark's own (4.1+ V2), and checks, for every committed batch `b` inside the
retained window (`statebed_store.retention`: the exact rule, from Spark's purge and
`deleteOldVersions` arithmetic or statebed's `retention.json`) and every store:

* the committed id of version `b+1` has a changelog or a snapshot (`missing-checkpoint`);
* that file is readable and intact: CRC32C sidecar, every LZ4 block and record
  (`unreadable-file`; so is a FIFO, socket, directory or symlink loop in its place, or in
  a `commits/N`'s: never opened blocking, the rest of the check goes on), and is its own: its sidecar or zip metadata does not name another
  store or checkpoint (`foreign-file`: copied in from elsewhere);
* its lineage says its base is exactly `(b, id committed by batch b-1)` (`lineage-break`),
  its versions increase by one and every earlier entry is a committed id too
  (`non-linear-lineage`: the file descends from an attempt the driver did not commit);
* every committed version in the window has a load plan whose files all exist, agree and
  are intact, SST contents included (`unplannable`); a damaged snapshot the load plans
  around is reported as the file it is (`unreadable-file`); each snapshot a plan reads
  holds the state its lineage replays to (`snapshot-mismatch`, `snapshot_check`);
* a repartition batch holds exactly the rows of the version before it, over all partitions
  (`repartition-mismatch`, `repartition_check`: its snapshots have no replay route);
* every store every commit names has a state directory with files (`missing-checkpoint`);
* the commit log has no holes (`commit-gap`, one per contiguous range of missing batches);
* the files a restart of the query reads besides the state (its metadata, the offset log's
  latest two entries, each file source's log, operator metadata, schema files) are there, parse
  and agree (`missing-query-file`, `damaged-query-file`, `inconsistent-query-file`,
  `restart_files`): the report's `resumable`, and the verdict is never valid when it is false;
* every key in those files belongs to their partition under the partitioner the checkpoint
  records (`misplaced-key`, see `partitions`; a note says when none is known), and no key
  is in two partitions' files of one store at one version (`cross-partition-key`, with or
  without a known partitioner, `cross_partition`).

A version committed by a V1 entry (no ids, e.g. after a V2->V1 switch) must have its
`<v>.changelog` or `<v>.zip` and, when it is the latest, load by version; its lineage
cannot be checked, so while such versions are retained the verdict is at best "unknown".

State files no retained plan reads and no kept commit names are orphans, listed with why
(a losing attempt, never committed, below the retained window), never anomalies. Committed
versions below the window are not checked; those with no file left are a note. A V1
checkpoint has no ids to check: the verdict is "unknown".
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from statebed_base.errors import CheckpointFileError, ForeignFileError, LineageError, UnplannableError, UsageError
from statebed_model.spark_features import SnapshotRepair
from statebed_store import CheckpointRef, CommitLog, HeaderCache, Storage, StoreFiles, StoreId
from statebed_store.commitlog import CommitRecord, parse_commit, with_offset_partitions
from statebed_store.formats import V1, V2
from statebed_store.inspection import committed_store_names, discover_stores, store_index
from statebed_store.lineage import Lineage
from statebed_store.naming import CHANGELOG, COMMITS_DIR, DEFAULT_STORE, SNAPSHOT, StateFileName, sidecar_name
from statebed_store.partitioner import Partitioning, checkpoint_partitioning
from statebed_store.plan import loadable_plan
from statebed_store.retention import KeptWindow, kept_window, needed_names, plan_names

from .cross_partition import KIND as CROSS_PARTITION_KEY
from .cross_partition import CrossPartitionKeys
from .partitions import KIND as MISPLACED_KEY
from .partitions import partition_anomalies
from .repartition_check import KIND as REPARTITION_MISMATCH
from .repartition_check import repartition_anomalies
from .restart_files import KINDS as RESTART_KINDS
from .restart_files import StoreLog, check_restart_files, query_commits
from .result import Anomaly, Verdict, merge_verdicts
from .snapshot_check import KIND as SNAPSHOT_MISMATCH
from .snapshot_check import snapshot_anomalies

__all__ = ["KINDS", "LineageReport", "verify_lineage"]

KINDS = (
    "missing-checkpoint",
    "lineage-break",
    "non-linear-lineage",
    "unplannable",
    "unreadable-file",
    "foreign-file",
    "commit-gap",
    MISPLACED_KEY,
    CROSS_PARTITION_KEY,
    SNAPSHOT_MISMATCH,
    REPARTITION_MISMATCH,
    *RESTART_KINDS,
)


@dataclass
class LineageReport:
    valid: Verdict
    format: str  # "v2", "v1" or "mixed"
    checked: dict[str, int]
    anomalies: list[Anomaly] = field(default_factory=list)
    orphans: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    resumable: Verdict = "unknown"  # can Spark restart the query from it (`restart_files`)
    resumable_reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "resumable": self.resumable,
            "resumable_reasons": self.resumable_reasons,
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
    window: KeptWindow
    anomalies: list[Anomaly] = field(default_factory=list)
    orphans: list[dict[str, Any]] = field(default_factory=list)
    versions_checked: set[int] = field(default_factory=set)
    v1_checked: set[int] = field(default_factory=set)  # retained versions only a V1 entry committed
    notes: list[str] = field(default_factory=list)
    partitioning: Partitioning = field(default_factory=Partitioning)
    keys: CrossPartitionKeys = field(default_factory=CrossPartitionKeys)
    repair: SnapshotRepair = field(default_factory=SnapshotRepair)  # Spark's auto snapshot repair, as the run recorded it
    repaired: dict[tuple[StoreId, str, str], list[int]] = field(default_factory=dict)  # (store, snapshot, why) -> versions routed around it

    def add(
        self,
        kind: str,
        store: StoreId | None,
        version: int | None,
        ids: Iterable[str | None] = (),
        files: Iterable[str] = (),
        detail: str = "",
        batches: Iterable[int] = (),
    ) -> None:
        self.anomalies.append(
            Anomaly(
                kind=kind,
                operator=store.operator if store else None,
                partition=store.partition if store else None,
                version=version,
                ids=list(ids),
                files=list(files),
                batches=list(batches),
                detail=detail if store is None or store.store_name == DEFAULT_STORE else f"[store {store.store_name}] {detail}",
            )
        )


def verify_lineage(
    storage: Storage,
    *,
    all_versions: bool = False,
    cache: HeaderCache | None = None,
    repair: SnapshotRepair | None = None,
    query: Storage | None = None,
) -> LineageReport:
    """Check a checkpoint's committed lineage. Raises UsageError when it is no streaming checkpoint.
    `query`: Spark's query checkpoint where it is not `storage` itself (statebed's store: a run's
    `spark-checkpoint/`); what a restart reads is checked there (`restart_files`).
    `all_versions` is accepted for callers of old: every committed version in the window is planned now.
    `repair`: Spark's auto snapshot repair as the run that wrote the checkpoint had it (default off):
    a damaged snapshot it routes around is a note, not an anomaly."""
    batch_ids = _commit_batches(storage)
    window = kept_window(storage, batch_ids)  # every kept entry counts, an unreadable one too
    assert window is not None  # _commit_batches raised on an empty log
    ctx = _Context(storage, {}, HeaderCache() if cache is None else cache, window, repair=repair or SnapshotRepair())
    ctx.notes.extend(CommitLog(storage).strays())
    ctx.commits = with_offset_partitions(storage, _read_commits(ctx, batch_ids))
    _check_commit_gaps(ctx, batch_ids)
    kinds = {(V2 if rec.state_ids is not None else V1).name for rec in ctx.commits.values()}
    fmt = "mixed" if len(kinds) > 1 else (kinds.pop() if kinds else V1.name)
    notes = ctx.notes
    stores = discover_stores(storage, notes)
    ctx.partitioning = checkpoint_partitioning(storage)
    verdicts: list[Verdict] = []
    if fmt == V1.name:
        notes.append("V1 checkpoint: the commit log records no checkpoint ids, so there is no lineage to check")
        verdicts.append("unknown")
    _check_expected_stores(ctx, stores)

    def index_of(store: StoreId) -> int:
        return store_index(store, [s.store_name for s in stores if (s.operator, s.partition) == (store.operator, store.partition)])

    for store in stores:
        _check_store(ctx, store, index_of(store))
    notes += _repair_notes(ctx)
    notes += ctx.partitioning.unchecked_notes(stores)
    ctx.anomalies += ctx.keys.anomalies()
    moved, why = repartition_anomalies(storage, stores, ctx.commits, index_of, ctx.window.required)
    ctx.anomalies += moved
    notes += why
    if ctx.v1_checked and fmt != V1.name:
        notes.append(
            f"versions {_ranges(sorted(ctx.v1_checked))} were committed by V1 entries (no ids): checked for files "
            "and loadability by version only, their lineage cannot be checked"
        )
        verdicts.append("unknown")
    if query is None:
        restart = check_restart_files(storage, ctx.commits, batch_ids, stores)
    else:  # statebed's store: Spark's query files are a checkpoint of their own
        log = StoreLog(batch_ids[-1], storage.display(f"{COMMITS_DIR}/{batch_ids[-1]}"))
        restart = check_restart_files(query, *query_commits(query), [], store_log=log)
    ctx.anomalies += restart.anomalies
    notes += restart.notes
    if restart.query:  # a store directory without Spark's query files: only its lineage is judged
        verdicts.append(restart.resumable)
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
        resumable=restart.resumable,
        resumable_reasons=restart.reasons,
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


def _ranges(values: list[int]) -> str:
    """`[1, 2, 3, 7]` -> "1..3, 7" (sorted input)."""
    out: list[str] = []
    for _, group in itertools.groupby(enumerate(values), key=lambda iv: iv[1] - iv[0]):
        run = [v for _, v in group]
        out.append(f"{run[0]}..{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def _check_commit_gaps(ctx: _Context, batch_ids: list[int]) -> None:
    """One anomaly per contiguous hole, so a stray `commits/100000000` costs one entry, not 10^8."""
    for prev, cur in itertools.pairwise(batch_ids):
        if cur - prev < 2:
            continue
        first, last = prev + 1, cur - 1
        what = f"batch {first} is" if first == last else f"batches {first}..{last} ({last - first + 1}) are"
        ctx.add(
            "commit-gap",
            None,
            first + 1,
            files=[ctx.storage.display(f"{COMMITS_DIR}/{b}") for b in sorted({first, last})],
            batches=[first, last],
            detail=f"{what} missing from the commit log between batches {prev} and {cur}",
        )


def _check_expected_stores(ctx: _Context, stores: list[StoreId]) -> None:
    """Every store each V2 commit names (operator, partition, one id per store) must have state files."""
    present: dict[tuple[int, int], list[str]] = {}
    for s in stores:
        present.setdefault((s.operator, s.partition), []).append(s.store_name)
    missing: dict[tuple[int, int, str | None], list[CommitRecord]] = {}  # name None: stores we cannot name
    for rec in sorted(ctx.commits.values(), key=lambda r: r.batch_id):
        for op, parts in (rec.state_ids or {}).items():
            for p, ids in enumerate(parts):
                have = present.get((op, p), [])
                names = committed_store_names(len(ids), have)
                lost: list[str | None] = [n for n in names if n not in have] if names is not None else [None] * (len(have) < len(ids))
                for name in lost:
                    missing.setdefault((op, p, name), []).append(rec)
    for (op, p, name), recs in missing.items():
        last = recs[-1]
        row = list((last.state_ids or {})[op][p])
        store = StoreId(op, p, name or DEFAULT_STORE)
        names = committed_store_names(len(row), present.get((op, p), [])) or []
        committed_ids = [row[names.index(name)]] if name in names else row
        which = "" if name else f" ({len(row)} stores, {len(present.get((op, p), []))} with files)"  # a named store is in the prefix
        batches = f"batch {last.batch_id}" if len(recs) == 1 else f"batches {recs[0].batch_id}..{last.batch_id} ({len(recs)} commits)"
        ctx.add(
            "missing-checkpoint",
            store,
            last.version,
            ids=committed_ids,
            files=[ctx.storage.display(store.dir)],
            detail=f"{batches} committed ids for operator {op} partition {p}{which}, but it has no state files",
        )


def _lineage_of(files: StoreFiles, ref: CheckpointRef, repair: SnapshotRepair) -> Lineage | None:
    """The lineage `ref` records (changelog header, else snapshot metadata), checking both files whole.
    A damaged snapshot beside a changelog is left to the plan check when Spark's repair is on (it
    loads the version from the changelogs and says whether the route is within reach)."""
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
        try:
            meta = files.verified_snapshot_metadata(ref)
        except CheckpointFileError as e:
            if lineage is None or not repair.enabled or isinstance(e, ForeignFileError):
                raise
            return lineage
        if lineage is None:
            lineage = meta.lineage
        elif meta.lineage is not None and meta.lineage != lineage:
            raise LineageError(files.display(ref, SNAPSHOT), "snapshot metadata records a different lineage than its changelog")
    return lineage


def _check_store(ctx: _Context, store: StoreId, idx: int) -> None:
    committed: dict[int, str | None] = {}
    v1_versions: set[int] = set()
    absent: dict[int, int] = {}  # version -> its batch's partition count, where this partition is not among them
    for rec in ctx.commits.values():
        count = rec.partition_count(store.operator)
        if count is not None and store.partition >= count:
            absent[rec.version] = count  # a repartition: this store is not part of that batch
        elif rec.state_ids is None:
            v1_versions.add(rec.version)
        else:
            committed[rec.version] = rec.id_for(store.operator, store.partition, idx)
    if not committed and not v1_versions:
        ctx.notes += _repartition_note(store, absent)
        return
    files = StoreFiles(ctx.storage, store, cache=ctx.cache)
    latest = max(committed.keys() | v1_versions)
    _note_below_window(ctx, store, files, committed, v1_versions)
    # a kept entry's version is checked when required, or when its files are there (Spark's one version more)
    checked = [v for v in sorted(committed) if ctx.window.required(v) or _has_file(files, CheckpointRef(v, committed[v]))]
    sound: set[int] = set()  # versions whose own file passed: only these are planned (the rest is reported once)
    for v in checked:
        ctx.versions_checked.add(v)
        before = len(ctx.anomalies)
        _check_version(ctx, store, files, v, committed, v1_versions)
        if len(ctx.anomalies) == before:
            sound.add(v)
    v1_checked = [v for v in sorted(v1_versions) if ctx.window.required(v) or _has_file(files, CheckpointRef(v))]
    loadable = {v for v in v1_checked if _check_v1_version(ctx, store, files, v)}
    ctx.versions_checked.update(v1_checked)
    ctx.v1_checked.update(v1_checked)
    plannable = sorted(v for v in sound | loadable if ctx.window.required(v))  # below the window nothing needs to load
    planned = [CheckpointRef(v, committed.get(v)) for v in plannable]
    needed: set[StateFileName] = set()
    for ref in planned:
        needed |= _check_plan(ctx, store, files, ref)
    # Spark's one version more, where its files are there: not required, yet what it reads is no orphan
    needed |= needed_names(
        files, [CheckpointRef(v, committed[v]) for v in sorted(sound) if ctx.window.needs(v, True) and v not in plannable]
    )
    read = [CheckpointRef(v, committed[v]) for v in checked if committed[v] is not None] + [CheckpointRef(v) for v in sorted(loadable)]
    counts = {r.version: n for r in ctx.commits.values() if (n := r.partition_count(store.operator)) is not None}
    ctx.anomalies += partition_anomalies(ctx.partitioning, store, files, read, planned, counts)
    ctx.keys.add(store, files, read)
    snaps = sorted({CheckpointRef(n.version, n.id) for n in needed if n.kind == SNAPSHOT and n.id is not None})
    ctx.anomalies += snapshot_anomalies(ctx.storage, store, files, snaps)
    _collect_orphans(ctx, store, files, committed, latest, needed, absent)
    ctx.notes += _repartition_note(store, absent)


def _repartition_note(store: StoreId, absent: dict[int, int]) -> list[str]:
    """Where kept batches committed fewer partitions than this one's number: a repartition."""
    if not absent:
        return []
    counts = sorted(set(absent.values()))
    return [
        f"{store}: not part of the batches committing version(s) {_ranges(sorted(absent))} "
        f"({', '.join(map(str, counts))} partition(s) for operator {store.operator}: the partition count changed, a repartition)"
    ]


def _has_file(files: StoreFiles, ref: CheckpointRef) -> bool:
    return files.has_changelog(ref) or files.has_snapshot(ref)


def _note_below_window(ctx: _Context, store: StoreId, files: StoreFiles, committed: dict[int, str | None], v1_versions: set[int]) -> None:
    """Committed versions below the retained window are not checked; those with no file left are noted."""
    refs = [CheckpointRef(v, cid) for v, cid in committed.items()] + [CheckpointRef(v) for v in v1_versions]
    gone = sorted(r.version for r in refs if not ctx.window.required(r.version) and not _has_file(files, r))
    if gone:
        ctx.notes.append(
            f"{store}: committed version(s) {_ranges(gone)} have no files, below the retained window "
            f"(from batch {ctx.window.first_batch}: {ctx.window.why}); no kept batch needs them"
        )


def _check_v1_version(ctx: _Context, store: StoreId, files: StoreFiles, v: int) -> bool:
    """A version a V1 entry committed is loaded by version: `<v>.changelog` or `<v>.zip` must exist."""
    ref = CheckpointRef(v)
    if files.has_changelog(ref) or files.has_snapshot(ref):
        return True
    v2 = sorted(n.id for n in files.files if n.version == v and n.id is not None)
    ctx.add(
        "missing-checkpoint",
        store,
        v,
        ids=[None],
        files=[files.display(ref, CHANGELOG)],
        detail=f"batch {v - 1} committed version {v} with a V1 entry (loaded by version), but neither {StateFileName(v, None, CHANGELOG).name} nor {StateFileName(v, None, SNAPSHOT).name} exists"
        + (f"; only V2 files of ids {', '.join(v2)} do, which a load by version never reads" if v2 else ""),
    )
    return False


def _check_plan(ctx: _Context, store: StoreId, files: StoreFiles, ref: CheckpointRef) -> set[StateFileName]:
    """The committed `ref` must load: planned and checked as a load would, damaged snapshots planned
    around. Returns the files its plan reads (none when it has no plan)."""
    try:
        plan, _ = loadable_plan(files, ref)
    except (UnplannableError, CheckpointFileError) as e:
        missing = e.missing if isinstance(e, UnplannableError) else [e.file]
        ctx.add("unplannable", store, ref.version, ids=[ref.id], files=missing, detail=f"no load plan for the committed {ref}: {e}")
        return set()
    base = 0 if plan.snapshot is None else plan.snapshot.version
    for skipped, err in plan.skipped:  # loadable, but a file the checkpoint relies on is damaged: say which
        shown = err.file if isinstance(err, CheckpointFileError) else str(err)
        if _file_kind(err) == "unreadable-file" and ctx.repair.routes(ref.version, base):
            ctx.repaired.setdefault(
                (store, files.display(skipped, SNAPSHOT), f"{shown}: {err.detail}" if isinstance(err, CheckpointFileError) else shown), []
            ).append(ref.version)
        elif not any(shown in a.files for a in ctx.anomalies):
            ctx.add(_file_kind(err), store, ref.version, ids=[ref.id], files=[shown], detail=f"a load of {ref} plans around it: {err}")
    return plan_names(plan)


def _repair_notes(ctx: _Context) -> list[str]:
    """Each snapshot Spark's configured load skips: the file, why it cannot load, and the route the verdict rests on."""
    return [
        f"{store}: snapshot {snapshot} cannot load ({why}), and Spark's auto snapshot repair ({ctx.repair.source}) "
        f"routes around it: version(s) {_ranges(sorted(set(versions)))} load from an older snapshot or an empty store "
        f"and replay at most {ctx.repair.max_replay} changelogs; the verdict rests on that route"
        for (store, snapshot, why), versions in ctx.repaired.items()
    ]


def _file_kind(err: Exception) -> str:
    return "foreign-file" if isinstance(err, ForeignFileError) else "unreadable-file"


def _check_version(
    ctx: _Context, store: StoreId, files: StoreFiles, v: int, committed: dict[int, str | None], v1_versions: set[int]
) -> None:
    cid = committed[v]
    if cid is None:
        ctx.add("missing-checkpoint", store, v, detail=f"commit log entry of batch {v - 1} records no id for this store")
        return
    ref = CheckpointRef(v, cid)
    if not files.has_changelog(ref) and not files.has_snapshot(ref):
        dirs = set(ctx.storage.list_dirs(store.dir)) & {StateFileName(v, cid, k).name for k in (CHANGELOG, SNAPSHOT)}
        if dirs:  # a directory where the committed file should be: there, but unreadable
            where = [ctx.storage.display(store.path(d)) for d in sorted(dirs)]
            ctx.add("unreadable-file", store, v, ids=[cid], files=where, detail="is a directory, expected the committed file")
            return
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
        lineage = _lineage_of(files, ref, ctx.repair)
    except LineageError as e:
        ctx.add("non-linear-lineage", store, v, ids=[cid], files=[e.file], detail=e.detail)
        return
    except CheckpointFileError as e:
        ctx.add(_file_kind(e), store, v, ids=[cid], files=[e.file], detail=e.detail)
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


def _collect_orphans(
    ctx: _Context,
    store: StoreId,
    files: StoreFiles,
    committed: dict[int, str | None],
    latest: int,
    needed: set[StateFileName],
    absent: dict[int, int],
) -> None:
    """Every state file no retained plan reads and no kept commit names, with why (`retention`)."""
    by_ref: dict[CheckpointRef, list[str]] = {}
    for name in sorted(files.files, key=lambda n: (n.version, n.id or "", n.kind)):
        if name in needed or name.id is None:
            continue
        if committed.get(name.version) == name.id:
            continue  # a file a kept entry committed (a changelog its own snapshot shadows, Spark's one version more)
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
                "why": _orphan_why(ctx, ref, latest, absent),
            }
        )


def _orphan_why(ctx: _Context, ref: CheckpointRef, latest: int, absent: dict[int, int]) -> str:
    if ref.version in absent:
        return f"left behind by a repartition: the batch committing version {ref.version} has {absent[ref.version]} partition(s)"
    if ref.version > latest:
        return "never committed (batch not committed yet, or the driver died)"
    if ctx.window.required(ref.version):
        return "a losing attempt"
    return "below the retained window: no kept commit entry names it and no kept batch's load plan reads it"
