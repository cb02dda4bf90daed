"""State verifier: is the final committed state what the committed inputs must produce?

Reads a run directory (see `statebed_model.rundir`; a local directory or s3://), the
workload and its parameters, the committed outputs (the sink) and the final committed
state, loaded through statebed's store (or, in native mode, read from Spark's own RocksDB
checkpoint and translated). The committed inputs are ground truth from outside the system
under test (`statebed_model.sources`): which files each committed batch read, from Spark's
file source log, and those files' records from the source (recomputed by the generator, or
the ingest service's landed files, every acknowledged record accounted for). The driver's
own input log is only compared with it (`input-log-mismatch`). Then the workload judges
the state: an exact oracle for deterministic workloads (`count`), invariants for random
ones (`bucket-collect`: every committed record exactly once; `sample3`: at most 3
elements, only ones that arrived for the key). Around that, the run itself: every
committed batch has exactly one output, and no uncommitted batch has an output; and every
key of partition p's final state belongs to p under the partitioner the run used
(`misplaced-key`: statebed's `repartition(P, key)` as `statebed_model.partitioning` says,
or in native mode the one Spark's checkpoint records), and, with or without a known
partitioner, no key of the final state is in two partitions' states (`cross-partition-key`,
the lineage verifier's invariant, `cross_partition`).

Verdict: false on any anomaly; "unknown" when a committed batch's records cannot be
determined from the ground truth (the oracle cannot be computed); true otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from statebed_base.errors import (
    CheckpointFileError,
    CorruptFileError,
    MisplacedKeyError,
    MissingFileError,
    NotRegularFileError,
    StatebedError,
    StorageError,
    UnknownFormatError,
    UsageError,
)
from statebed_model.native_state import native_state_items, read_reader_check
from statebed_model.partitioning import run_partitioner
from statebed_model.rundir import INPUT_SCHEMA, MAINTENANCE_LOG, RunDir, RunInfo
from statebed_model.sources import GroundTruth, batch_reads, open_source
from statebed_model.workloads import get_workload
from statebed_store import CheckpointRef, CommitLog, S3Settings, StoreId, open_storage
from statebed_store.inspection import dump_state
from statebed_store.location import is_remote, parse_location
from statebed_store.partitioner import Partitioner, check_keys, checkpoint_partitioning
from statebed_store.storage.base import Storage

from .cross_partition import KIND as CROSS_PARTITION_KEY
from .cross_partition import CrossPartitionKeys
from .result import Anomaly, Verdict, merge_verdicts

__all__ = ["RUN_KINDS", "StateReport", "final_state", "verify_state"]

RUN_KINDS = (
    "missing-input",
    "input-log-mismatch",
    "lost-acknowledged",
    "duplicated-acknowledged",
    "missing-output",
    "uncommitted-output",
    "unloadable-state",
    "misplaced-key",
    CROSS_PARTITION_KEY,
    "reader-disagreement",
)
OPERATOR = 0
# Workloads whose state depends on which attempt's random draws made it. An overwritten V1
# file shows only against the output its batch committed: the executor that goes on from its
# own memory may leave the final state self-consistent. So every committed version is judged
# too, each loaded from its files (issue 24 #18). Deterministic workloads write the same bytes
# in every attempt: their final state, checked against an exact oracle, is enough.
EVERY_VERSION = frozenset({"bucket-collect", "sample3"})
EARLIER_SHOWN = 5


@dataclass
class StateReport:
    valid: Verdict
    workload: str
    format: str
    checked: dict[str, int]
    anomalies: list[Anomaly] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "workload": self.workload,
            "mode": self.format,
            "checked": self.checked,
            "anomalies": [a.to_json() for a in self.anomalies],
            "notes": self.notes,
        }


def _anomaly(
    kind: str,
    detail: str,
    *,
    keys: Iterable[Any] = (),
    batches: Iterable[int] = (),
    records: Iterable[int] = (),
    partition: int | None = None,
) -> Anomaly:
    return Anomaly(kind=kind, partition=partition, keys=list(keys), batches=list(batches), records=list(records), detail=detail)


def verify_state(run_dir: str | os.PathLike[str] | RunDir, s3: S3Settings | None = None) -> StateReport:
    """Judge a run's final committed state. Raises UsageError if `run_dir` is no run directory."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir, s3)
    info = run.read_info()
    workload = get_workload(info.workload)
    loc = run.checkpoint_location(info)
    if not is_remote(loc) and not os.path.isdir(loc):
        raise UsageError(f"{loc}: the run's checkpoint does not exist")
    storage = open_storage(parse_location(loc, s3 or run.s3))
    committed = run.committed_batches(info, storage)
    anomalies: list[Anomaly] = []
    verdicts: list[Verdict] = []

    truth = open_source(info, run, s3).ground_truth(batch_reads(run.query_storage(info)), committed)
    notes = list(truth.notes)
    if below := run.trimmed_below():
        notes.append(f"batches 0..{below - 1}: committed, their commit-log entries trimmed by the run's maintenance ({MAINTENANCE_LOG})")
    if info.format.native and (purged := run.purged_below(info, CommitLog(storage).batch_ids())):  # statebed's runs: no second listing
        notes.append(f"batches 0..{purged - 1}: committed, their entries purged from Spark's commit log (minBatchesToRetain)")
    for b, why in truth.unknown.items():
        anomalies.append(_anomaly("missing-input", f"batch {b} is committed but its records are unknown: {why}", batches=[b]))
    if truth.unknown:
        verdicts.append("unknown")
        notes.append("records of committed batches are unknown: the state cannot be judged against them")
    anomalies += [_anomaly(f.kind, f.detail, keys=f.keys, batches=f.batches, records=f.records) for f in truth.findings]
    anomalies += _input_log_mismatches(run, truth, notes)
    inputs, _ = _tables(truth.inputs.__getitem__, sorted(truth.inputs), workload_schema=None)
    outputs, missing_outputs = _tables(run.read_output, committed, workload_schema=workload.output_schema)
    for b in missing_outputs:
        anomalies.append(
            _anomaly("missing-output", f"batch {b} is committed but has no output {run.display(run.output_name(b))}", batches=[b])
        )
    for b in sorted(set(run.batches("output")) - set(committed)):
        anomalies.append(
            _anomaly("uncommitted-output", f"{run.display(run.output_name(b))} exists but batch {b} is not committed", batches=[b])
        )

    items: list[tuple[bytes, bytes]] = []
    partitioner = _partitioner(storage, info, notes)
    untranslated: list[int] = []
    final_keys = CrossPartitionKeys()
    for p in range(info.partitions):
        try:
            ref, raw = _raw_state(storage, info, p, committed)
        except StorageError:
            raise
        except UnknownFormatError as e:  # a format this reader does not know: not judged, never misread
            untranslated.append(p)
            verdicts.append("unknown")
            notes.append(f"partition {p}: the committed state is in a format statebed does not read, so it was not judged: {e}")
            continue
        except StatebedError as e:
            anomalies.append(_anomaly("unloadable-state", f"partition {p}: the committed state does not load: {e}", partition=p))
            continue
        store, keys = StoreId(OPERATOR, p), [k for k, _ in raw]  # as stored, whatever the mode
        anomalies += _misplaced(storage, partitioner(p), store, ref, keys)
        final_keys.add_keys(store, ref, storage.display(store.dir), keys)
        try:
            items.extend(native_state_items(storage, store, info.workload, raw, info.partitions) if info.format.native else raw)
        except MissingFileError as e:  # native sample3 before any snapshot named its column families: not checkable yet
            untranslated.append(p)
            verdicts.append("unknown")
            notes.append(f"partition {p}: the committed state cannot be translated, so it was not judged: {e}")
        except CheckpointFileError as e:
            anomalies.append(_anomaly("unloadable-state", f"partition {p}: the committed state does not decode: {e}", partition=p))
    anomalies += final_keys.anomalies()
    if info.format.native:
        anomalies += _reader_check(run, committed, notes)
    if not truth.unknown and not untranslated:
        for f in workload.check(inputs, outputs, items):
            anomalies.append(_anomaly(f.kind, f.detail, keys=f.keys, batches=f.batches, records=f.records))
        anomalies += _earlier_versions(storage, info, inputs, outputs, committed, notes)
    if not committed:
        notes.append("no batch is committed yet")
    verdicts.append(not [a for a in anomalies if a.kind != "missing-input"])
    return StateReport(
        valid=merge_verdicts(verdicts),
        workload=info.workload,
        format=info.format,
        checked={"batches": len(committed), "records": inputs.num_rows, "partitions": info.partitions, "state_entries": len(items)},
        anomalies=anomalies,
        notes=notes,
    )


def _reader_check(run: RunDir, committed: list[int], notes: list[str]) -> list[Anomaly]:
    """A native run's final state as statebed's reader and Spark's state data source served it
    (`statebed_job.native_reader`): a difference is an anomaly; no comparison is a note."""
    check = read_reader_check(run)
    last = committed[-1] if committed else None
    if check is None or check.batch != last:
        why = "none was recorded" if check is None else f"it is of batch {check.batch}, the last committed is {last}"
        notes.append(f"statebed's reader was not compared with Spark's state data source on this state ({why})")
        return []
    if check.agree is None:
        notes.append(f"statebed's reader vs Spark's state data source: undecided, a reader failed: {check.error}")
        return []
    if check.agree:
        n = check.entries.get("spark", 0)
        notes.append(f"statebed's reader and Spark's state data source agree on batch {last}'s state ({n} entries)")
        return []
    detail = (
        f"on batch {last}'s state statebed's reader served {check.entries.get('statebed')} entries, Spark's state data source "
        f"{check.entries.get('spark')}; only statebed's, e.g. keys {check.only_statebed}; only Spark's, e.g. keys {check.only_spark}"
    )
    return [_anomaly("reader-disagreement", detail, batches=[last] if last is not None else [])]


def _input_log_mismatches(run: RunDir, truth: GroundTruth, notes: list[str]) -> list[Anomaly]:
    """The driver's input log against the ground truth: a diagnostic, so only a difference counts."""
    out, unlogged = [], []
    for b, expected in sorted(truth.inputs.items()):
        try:
            logged = run.read_input(b)
        except CheckpointFileError:
            unlogged.append(b)
            continue
        a, e = logged.select(INPUT_SCHEMA.names).cast(INPUT_SCHEMA).sort_by("id"), expected.sort_by("id")
        if not a.equals(e):
            la, le = set(a["id"].to_pylist()), set(e["id"].to_pylist())
            diff = sorted(la ^ le) or sorted(la)
            detail = (
                f"batch {b}: the driver's input log {run.display(run.input_name(b))} has {a.num_rows} record(s), the source's "
                f"ground truth {e.num_rows}; {len(le - la)} missing from the log, {len(la - le)} not in the source"
            )
            out.append(_anomaly("input-log-mismatch", detail, batches=[b], records=diff[:20]))
    if unlogged:
        notes.append(f"no input log for committed batch(es) {unlogged} (a diagnostic only; judged from the source's ground truth)")
    return out


def _tables(read: Any, batches: list[int], workload_schema: pa.Schema | None) -> tuple[pa.Table, list[int]]:
    """Concatenate per-batch tables with a `batch` column; report the batches that could not be read."""
    tables, missing = [], []
    for b in batches:
        try:
            t = read(b)
        except CheckpointFileError:
            missing.append(b)
            continue
        tables.append(t.append_column("batch", pa.array([b] * t.num_rows, pa.int64())))
    if tables:
        return pa.concat_tables(tables, promote_options="permissive"), missing
    schema = workload_schema or INPUT_SCHEMA
    return schema.append(pa.field("batch", pa.int64())).empty_table(), missing


def final_state(run: RunDir) -> list[tuple[bytes, bytes]]:
    """The run's final committed state, every partition, as the workload encodes it (the same
    reader the verifier judges; chaos experiments compare it with a fault-free run's)."""
    info = run.read_info()
    storage = open_storage(run.checkpoint(info))
    committed = run.committed_batches(info, storage)
    return [item for p in range(info.partitions) for item in _partition_state(storage, info, p, committed)]


def _partition_state(storage: Storage, info: RunInfo, partition: int, committed: list[int]) -> list[tuple[bytes, bytes]]:
    _, raw = _raw_state(storage, info, partition, committed)
    return (
        list(native_state_items(storage, StoreId(OPERATOR, partition), info.workload, raw, info.partitions)) if info.format.native else raw
    )


def _raw_state(storage: Storage, info: RunInfo, partition: int, committed: list[int]) -> tuple[CheckpointRef, list[tuple[bytes, bytes]]]:
    """The committed `(version, id)` of a partition and its state as stored (UnsafeRows in native mode)."""
    if not committed:
        return CheckpointRef(0), []
    rec = CommitLog(storage).read(committed[-1])
    if rec is None:  # a batch below the log's first entry: trimmed by maintenance or purged by Spark
        name = storage.display(CommitLog.path(committed[-1]))
        raise MissingFileError(name, "no commit-log entry (trimmed below the retained window): its (version, id) is unknown")
    ref = CheckpointRef(rec.version, rec.id_for(OPERATOR, partition))
    if info.format.ids and ref.id is None:
        raise UsageError(f"the commit log of batch {rec.batch_id} records no id for partition {partition}")
    return ref, list(dump_state(storage, StoreId(OPERATOR, partition), ref))


def _partitioner(storage: Storage, info: RunInfo, notes: list[str]) -> Callable[[int], Partitioner | None]:
    """Partition -> the partitioner its keys must agree with (None, with a note, when unknown)."""
    if not info.format.native:
        fixed = run_partitioner(info.workload, info.partitions)
        return lambda p: fixed
    parts = checkpoint_partitioning(storage)
    stores = [StoreId(OPERATOR, p) for p in range(info.partitions)]
    notes += parts.unchecked_notes(stores)
    return lambda p: parts.get(StoreId(OPERATOR, p))


def _misplaced(storage: Storage, partitioner: Partitioner | None, store: StoreId, ref: CheckpointRef, keys: list[bytes]) -> list[Anomaly]:
    if partitioner is None:
        return []
    try:
        check_keys(partitioner, store, keys, where=storage.display(store.dir), version=ref.version)
    except MisplacedKeyError as e:
        p = store.partition
        return [Anomaly("misplaced-key", store.operator, p, ref.version, ids=[ref.id], files=[e.file], keys=e.keys, detail=e.detail)]
    return []


def _earlier_versions(
    storage: Storage, info: RunInfo, inputs: pa.Table, outputs: pa.Table, committed: list[int], notes: list[str]
) -> list[Anomaly]:
    """Committed versions before the last whose state, loaded from their own files, fail the
    workload's check against what was committed up to them: their findings, named by batch
    (the first `EARLIER_SHOWN` such versions; a note counts the rest)."""
    if info.workload not in EVERY_VERSION:
        return []
    workload = get_workload(info.workload)
    out: list[Anomaly] = []
    failing: list[int] = []
    for b in committed[:-1]:
        try:
            items = [kv for p in range(info.partitions) for kv in _partition_state(storage, info, p, [b])]
        except StorageError:
            raise
        except (CorruptFileError, NotRegularFileError) as e:  # its files are there and do not decode: that version is lost
            out.append(_anomaly("unloadable-state", f"state after batch {b}, loaded from its files: {e}", batches=[b]))
            continue
        except StatebedError as e:  # e.g. its files fell out of retention
            notes.append(f"the state committed by batch {b} does not load, so it was not judged: {e}")
            continue
        upto = [t.filter(pc.less_equal(t["batch"], b)) for t in (inputs, outputs)]
        found = workload.check(upto[0], upto[1], items)
        if found:
            failing.append(b)
        if found and len(failing) <= EARLIER_SHOWN:
            detail = "state after batch {b}, loaded from its files: {d}"
            out += [
                _anomaly(f.kind, detail.format(b=b, d=f.detail), keys=f.keys, batches=f.batches or [b], records=f.records) for f in found
            ]
    if len(failing) > EARLIER_SHOWN:
        notes.append(f"the states after batches {failing[EARLIER_SHOWN:]} fail the check too (not listed)")
    return out
