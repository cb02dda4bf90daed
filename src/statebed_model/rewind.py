"""Rewind a query to a committed batch K: move every later log entry aside, never delete.

How Spark restarts (MicroBatchExecution): the newest `offsets/<n>` is the batch in flight
and the newest `commits/<m>` the last one done; with m == n it plans batch n+1 from the
sources, with m == n-1 it reruns batch n with n's offsets. Under checkpoint format V2 the
state of batch b is loaded as version b (== batch b-1's version b) with the ids that
`commits/<b-1>` records. Version numbers are batch ids, so the only way to make a
restarted query run batch K+1 on K's state is for K to be the newest entry of both logs:
every later `offsets/` and `commits/` entry (and its Hadoop `.crc`) is moved into a dated
backup inside the checkpoint. Appending records instead cannot work: an appended commit
`n+1` naming K's ids would make Spark load version n+2 with an id written for version
K+1, a file that does not exist (and the source offsets would still say n).

Also moved: a file source's own log (`sources/<s>/<e>` for e above the `logOffset` that
`offsets/K` records), so the source finds the later files again and batches them as
before; in a statebed run directory, statebed's commit log after K and the run's
`input/`, `staged/` and `output/` entries after K (the sink is create-only).
State files are never moved: under V2 a rerun draws new ids, and the abandoned timeline's
files stay as orphans nobody loads; under V1 they are loaded by name (the stale-timeline
anomaly a V1 rewind shows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statebed_base.errors import UsageError
from statebed_store.checkpoint_lock import CheckpointLock, lock_checkpoint
from statebed_store.commitlog import CommitLog
from statebed_store.formats import V1
from statebed_store.location import is_remote
from statebed_store.naming import COMMITS_DIR, CRC_SUFFIX, OFFSETS_DIR, SOURCES_DIR, hadoop_crc_name, parse_batch_id, spark_batch_id
from statebed_store.rebuild import require_rebuildable
from statebed_store.storage import open_storage

from .rewind_journal import BACKUP_DIR, Journal, last_journal, new_journal, pending_journal
from .rundir import RunDir
from .sources import file_source_offsets

__all__ = ["RewindPlan", "lock", "plan_rewind", "recover", "undo"]

RUN_ENTRIES = ("output", "staged", "input")  # a statebed run's per-batch files, moved with the logs


@dataclass
class RewindPlan:
    root: Path
    layout: str  # "run-dir", "spark" (offsets + commits) or "statebed" (commits only)
    to_batch: int
    latest_batch: int
    moves: list[tuple[str, str]] = field(default_factory=list)  # (root-relative, same path under the backup)
    stores: int = 0
    notes: list[str] = field(default_factory=list)

    def journal(self) -> Journal:
        return new_journal(self.root, self.to_batch, self.latest_batch, self.moves)

    def to_json(self, journal: Journal | None) -> dict[str, Any]:
        moves = journal.moves if journal else new_journal(self.root, self.to_batch, self.latest_batch, self.moves).moves
        return {
            "checkpoint": str(self.root),
            "layout": self.layout,
            "toBatch": self.to_batch,
            "latestBatch": self.latest_batch,
            "nextBatch": self.to_batch + 1,
            "stores": self.stores,
            "backup": journal.dir if journal else None,
            "moves": [m.to_json() for m in moves],
            "notes": self.notes,
        }


def _local_root(location: str) -> Path:
    if is_remote(location):
        raise UsageError(f"{location}: rewind moves files by rename and needs a local checkpoint directory")
    root = Path(location).absolute()
    if not root.is_dir():
        raise UsageError(f"checkpoint {root}: no such directory")
    return root


def _entries(root: Path, directory: str, above: int) -> list[str]:
    """Log entries `directory/<n>` (and `<n>.compact`) with n > `above`, newest first, with their `.crc`."""
    d = root / directory
    if not d.is_dir():
        return []
    found = [(parse_batch_id(p.name.removesuffix(".compact")), p.name) for p in d.iterdir() if not p.name.startswith(".")]
    for _, name in found:  # `+7`, `07`: Spark reads a batch there that this rewind would leave in place
        odd = spark_batch_id(name.removesuffix(".compact"))
        if parse_batch_id(name.removesuffix(".compact")) is None and odd is not None and odd > above:
            raise UsageError(f"{d / name}: Spark reads it as batch {odd}, after {above}; move it out of the log first")
    out = []
    for _, name in sorted(((n, name) for n, name in found if n is not None and n > above), reverse=True):
        out.append(f"{directory}/{name}")
        if (d / hadoop_crc_name(name)).exists():
            out.append(f"{directory}/{hadoop_crc_name(name)}")
    return out


def _latest(root: Path, directory: str) -> int | None:
    d = root / directory
    ids = [parse_batch_id(p.name) for p in d.iterdir()] if d.is_dir() else []
    return max((i for i in ids if i is not None), default=None)


def _file_source_offsets(root: Path, spark: str, batch: int) -> dict[int, int]:
    """Source index -> the file source `logOffset` that `offsets/<batch>` ends at (file sources only)."""
    path = root / spark / OFFSETS_DIR / str(batch)
    if not path.is_file():
        raise UsageError(f"{path}: batch {batch} has no offsets entry; it cannot be rewound to")
    return file_source_offsets(path.read_text(errors="replace"))


def _source_moves(root: Path, spark: str, batch: int) -> list[str]:
    moves = []
    for i, offset in _file_source_offsets(root, spark, batch).items():
        log = f"{spark}/{SOURCES_DIR}/{i}"
        _require_source_entries(root / log, offset)
        moves += _entries(root, log, offset)
    return moves


def _require_source_entries(log: Path, offset: int) -> None:
    """After the move the file source rebuilds its log from the newest compaction <= offset and the plain
    entries after it; refuse (naming it) when one of those was already cleaned up."""
    names = {p.name for p in log.iterdir()} if log.is_dir() else set()
    compacted = max((n for n in range(offset + 1) if f"{n}.compact" in names), default=-1)
    for n in range(compacted + 1, offset + 1):
        if str(n) not in names:
            raise UsageError(f"{log / str(n)}: the file source's log entry {n} is gone (cleaned up); the source cannot be rewound to it")


def _spark_moves(root: Path, spark: str, batch: int) -> list[str]:
    """Spark's query logs after `batch`: commits and offsets interleaved newest first, then the file sources."""
    commits, offsets = _entries(root, f"{spark}/{COMMITS_DIR}", batch), _entries(root, f"{spark}/{OFFSETS_DIR}", batch)
    by_batch: dict[int, list[str]] = {}
    for p in commits + offsets:
        by_batch.setdefault(int(p.rsplit("/", 1)[1].lstrip(".").removesuffix(CRC_SUFFIX)), []).append(p)
    ordered = [p for b in sorted(by_batch, reverse=True) for p in by_batch[b]]
    return ordered + _source_moves(root, spark, batch)


def _run_entries(root: Path, batch: int) -> list[str]:
    out = []
    for what in RUN_ENTRIES:
        d = root / what
        names = [p.name for p in d.iterdir()] if d.is_dir() else []
        ids = sorted((int(n.removesuffix(".parquet")) for n in names if n.endswith(".parquet") and n[:-8].isdigit()), reverse=True)
        out += [f"{what}/{b}.parquet" for b in ids if b > batch]
    return out


def plan_rewind(location: str, batch: int) -> RewindPlan:
    """What a rewind of `location` (a run directory, a Spark checkpoint or a statebed checkpoint) to
    committed `batch` moves; UnplannableError naming the file when some store cannot load `batch`."""
    root = _local_root(location)
    if (root / "run.json").is_file():
        return _plan_run_dir(root, batch)
    spark = (root / OFFSETS_DIR).is_dir()
    plan = _plan(root, "spark" if spark else "statebed", root, batch)
    plan.moves = [(p, p) for p in (_spark_moves(root, ".", batch) if spark else _entries(root, COMMITS_DIR, batch))]
    plan.moves = [(p.removeprefix("./"), d.removeprefix("./")) for p, d in plan.moves]
    return plan


def _plan_run_dir(root: Path, batch: int) -> RewindPlan:
    run = RunDir(root)
    info = run.read_info()
    state = Path(run.checkpoint_location(info)) if not is_remote(run.checkpoint_location(info)) else None
    if state is None:
        raise UsageError(f"{run.info_path}: the run keeps its state in {info.checkpoint}; rewind needs a local checkpoint directory")
    try:
        state_rel = state.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        raise UsageError(f"{run.info_path}: the run's checkpoint {state} is outside the run directory; rewind it on its own") from None
    plan = _plan(root, "run-dir", state, batch)
    spark = run.spark_checkpoint.relative_to(root).as_posix()
    moves = [] if info.format.native else _entries(root, f"{state_rel}/{COMMITS_DIR}", batch)
    moves += _spark_moves(root, spark, batch) + _run_entries(root, batch)
    plan.moves = [(p, p) for p in moves]
    if info.format == V1:
        plan.notes.append(
            "format v1: state files after the batch stay and are loaded by name, so a reprocess may read the abandoned timeline"
        )
    return plan


def _plan(root: Path, layout: str, state: Path, batch: int) -> RewindPlan:
    if pending_journal(root) is not None:
        raise UsageError(f"{root / BACKUP_DIR}: an interrupted rewind must be finished first (any `statebed rewind` does)")
    latest = _latest(state, COMMITS_DIR)
    if latest is None:
        raise UsageError(f"{state / COMMITS_DIR}: no committed batch to rewind to")
    if batch > latest:
        raise UsageError(f"--to-batch {batch}: the latest committed batch of {state} is {latest}")
    storage = open_storage(state)
    if CommitLog(storage).read(batch) is None:
        raise UsageError(f"--to-batch {batch}: {state / COMMITS_DIR / str(batch)} does not exist (not committed)")
    checks = require_rebuildable(storage, batch)
    plan = RewindPlan(root, layout, batch, latest, stores=len(checks))
    if not checks:
        plan.notes.append(f"no state store under {state / 'state'}: only the logs are rewound")
    return plan


def lock(location: str, purpose: str) -> CheckpointLock:
    """The checkpoint's lock (`statebed_store.checkpoint_lock`): held around recover, rewind and undo,
    so a second rewind or undo is refused naming the first; a dead holder's lock is taken over."""
    return lock_checkpoint(_local_root(location), purpose)


def recover(location: str) -> Journal | None:
    """Finish an interrupted rewind (forward) or undo (backward); the journal finished, if any."""
    root = _local_root(location)
    j = pending_journal(root)
    if j is None:
        return None
    if j.status == "moving":
        j.run_forward()
    else:
        j.run_backward()
    return j


def undo(location: str) -> Journal:
    """Move the files of the newest done rewind back; UsageError when there is none or a file was rewritten since."""
    root = _local_root(location)
    j = last_journal(root)
    if j is None:
        raise UsageError(f"{root / BACKUP_DIR}: no rewind to undo")
    j.run_backward()
    return j
