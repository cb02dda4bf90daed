"""corrupt-snapshot: damage (never remove) the snapshot Spark's store loads next, so that only a
repair can save the load: a missing snapshot is no damage in V2, a damaged one is.

The target is the snapshot zip that the load plan of the store's latest committed version
reads (`statebed_store.plan`, Spark's own rule: V2 the newest snapshot along the committed id's
lineage, V1 the newest `<n>.zip` by name), of operator 0, partition `partition`. `damage: flip`
inverts one byte inside the zip's first entry's data (its CRC no longer matches, whichever reader
opens it); `truncate` keeps its first half.

When: with `restart: true` (default) the driver is killed at the trigger (`on_commit` is the
natural trigger) and the snapshot is damaged before the runner restarts it, so the restarted
query's first load of that store reads it. With `restart: false` it is damaged at the trigger
while the query runs; a store that stays loaded on its executor never reads it again, so combine
it with a fault that makes the store load (kill-executor), or the run is `unknown`.

Proven by Spark reading the damaged file after the damage: a `read` of it in the run's request
log (the JVM plug-in logs the checkpoint file manager's opens and the FileSystem's; on S3A, the
SDK's `GetObject`s). The proof also carries Spark's answer (`sparks_answer`): the failed snapshot
load its log names and a query that went on (repaired), or the query's failure; and what its
`rocksdbNumSnapshotsAutoRepaired` metric counted (on Spark 4.3.0 an aggregation's stays 0 after a logged
repair: its read store upgraded to a write store loads again and clears the flag; docs/results.md).

params: partition (default 0), damage: flip | truncate (default flip), restart (default true),
wait_s (120): how long inject waits for a snapshot to damage (Spark's maintenance uploads them
after the commits; none in time: the inject fails and the run is unknown).
Formats: Spark's own store with the plug-in (native-v1, native-v2), local disk or S3.
"""

from __future__ import annotations

import hashlib
import struct
import time
import zipfile
from io import BytesIO
from pathlib import Path
from typing import Any, ClassVar

from statebed_base.errors import StatebedError, UsageError
from statebed_base.localfs import read_regular
from statebed_model.spark_features import REPAIRED_METRIC
from statebed_store import StoreFiles
from statebed_store.formats import PLUGIN_FORMATS, Format
from statebed_store.inspection import committed_ref, discover_stores
from statebed_store.naming import SNAPSHOT, StateFileName
from statebed_store.plan import plan_load
from statebed_store.storage.base import Storage
from statebed_store.storage.request_log import read_requests

from .base import Evidence, Fault, FaultContext, FaultSpec
from .failpoint_fault import positive
from .process_faults import NoTarget, event_log_or_none, injection
from .restart_driver import kill_driver, restarted

__all__ = ["FAULT", "CorruptSnapshot", "damaged", "sparks_answer", "target_snapshot"]

DAMAGES = ("flip", "truncate")
READS = ("read", "s3:GetObject")  # a whole-file read in the request log: the file manager's or FileSystem's open, S3A's GET
LOAD_FAILED = "Failed to load snapshot version"  # AutoSnapshotLoader, before it tries an older snapshot
REPAIR_FAILED = "Auto snapshot repair failed"
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # a zip entry's local header (30 bytes), before its name and extra field


class CorruptSnapshot(Fault):
    kind: ClassVar[str] = "corrupt-snapshot"
    description: ClassVar[str] = "damage the snapshot zip the next load of a store reads (flip a byte, or truncate it)"
    formats: ClassVar[frozenset[Format]] = PLUGIN_FORMATS  # its reads are logged by the plug-in
    fatal: ClassVar[tuple[str, ...]] = (REPAIR_FAILED,)  # Spark's log lines that say the query cannot go on

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self.partition = positive(spec, "partition", 0, zero_ok=True) or 0
        self.damage = spec.params.get("damage", "flip")
        if self.damage not in DAMAGES:
            raise UsageError(f"fault {spec.id} ({spec.kind}): damage must be one of {', '.join(DAMAGES)}, got {self.damage!r}")
        self.restart = spec.params.get("restart", True)
        if not isinstance(self.restart, bool):
            raise UsageError(f"fault {spec.id} ({spec.kind}): restart must be true or false, got {self.restart!r}")
        self.restarts_driver = self.restart
        self.wait_s = float(spec.params.get("wait_s", 120))
        self._done = False

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        """Once a snapshot is there to damage (Spark uploads them after the commit, from its
        maintenance), kill the driver (restart) or damage it now."""
        if not ctx.wait(lambda: self._has_target(ctx.query_storage()), self.wait_s):
            self.target(ctx.query_storage())  # raises NoTarget, saying why
        if self.restart:
            return kill_driver(ctx, self.spec)
        return self._corrupt(ctx)

    def before_resume(self, ctx: FaultContext) -> dict[str, Any] | None:
        """Damage once, after the kill and before the restarted driver loads the store."""
        return self._corrupt(ctx) if self.restart and not self._done else None

    def target(self, storage: Storage) -> str:
        """The file to damage (NoTarget saying why there is none yet)."""
        return target_snapshot(storage, self.partition)

    def _has_target(self, storage: Storage) -> bool:
        try:
            self.target(storage)
        except NoTarget:
            return False
        return True

    def damage_file(self, storage: Storage, path: str, before: bytes) -> tuple[bytes, dict[str, Any]]:
        """The damaged bytes, and what the damage changed (for the history)."""
        return damaged(before, self.damage), {"damage": self.damage}

    def _corrupt(self, ctx: FaultContext) -> dict[str, Any]:
        self._done = True
        storage = ctx.query_storage()
        path = self.target(storage)
        before = storage.read(path)
        after, facts = self.damage_file(storage, path, before)
        storage.write(path, after)
        return {
            "file": path,
            "shown": storage.display(path),
            **facts,
            "bytes": [len(before), len(after)],
            "sha256": [hashlib.sha256(before).hexdigest(), hashlib.sha256(after).hexdigest()],
            "at": time.time(),
        }

    def evidence(self, ctx: FaultContext) -> Evidence:
        facts = self._facts(ctx)
        if isinstance(facts, Evidence):
            return facts
        proof: list[dict[str, Any]] = [{"damaged": facts}]
        reads = [r for r in read_requests(ctx.run.s3_requests) if _reads(r, facts["file"], float(facts["at"]))]
        if not reads:
            return Evidence(False, f"Spark never read {facts['shown']} after it was damaged", proof)
        proof.append({"reads": reads[:5], "count": len(reads)})
        answer = sparks_answer(ctx, float(facts["at"]), self.fatal)
        proof.append({"spark": answer})
        if self.restart:
            ev = restarted(ctx.history.ops("driver"), 0.0, [])
            if ev.fired is not True:
                return Evidence(ev.fired, ev.detail, proof + ev.proof)
            proof += ev.proof
        return Evidence(True, f"Spark read the damaged {facts['shown']} {len(reads)} time(s); {answer['detail']}", proof)

    def _facts(self, ctx: FaultContext) -> dict[str, Any] | Evidence:
        """What the damage step recorded in the history, or why the fault did not fire."""
        done = injection(ctx, self.spec, phase="resume" if self.restart else "inject")
        if done is None or done[0] != "ok" or "file" not in done[1]:
            when = "before the restart" if self.restart else "at the trigger"
            return Evidence(False, f"no snapshot was damaged {when} (the history records none)")
        return done[1]


def target_snapshot(storage: Storage, partition: int) -> str:
    """The snapshot zip the next load of operator 0's store of `partition` reads, at its latest committed version."""
    stores = [s for s in discover_stores(storage) if (s.operator, s.partition) == (0, partition)]
    if not stores:
        raise NoTarget(f"{storage.display('state/0')}: no state of partition {partition}")
    store = stores[0]
    siblings = [s.store_name for s in stores]
    try:
        ref = committed_ref(storage, store, siblings)
        plan = plan_load(StoreFiles(storage, store), ref)
    except StatebedError as e:
        raise NoTarget(f"no load plan for {store}: {e}") from None
    if plan.snapshot is None:
        raise NoTarget(f"the load of {store} at {ref} reads no snapshot (only changelogs): nothing to damage")
    return store.path(StateFileName(plan.snapshot.version, plan.snapshot.id, SNAPSHOT).name)


def damaged(data: bytes, damage: str) -> bytes:
    """`data` with one byte of its zip's first entry's data inverted (flip), or its first half (truncate)."""
    if damage == "truncate":
        return data[: len(data) // 2]
    at = _first_entry_middle(data)
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def _first_entry_middle(data: bytes) -> int:
    """The middle byte of the first entry's stored data (a reader of the entry finds its CRC wrong);
    the middle of the file when it is no zip with a non-empty entry."""
    try:
        with zipfile.ZipFile(BytesIO(data)) as z:
            info = next((i for i in z.infolist() if i.compress_size > 0), None)
    except zipfile.BadZipFile:
        info = None
    if info is None or info.header_offset + _LOCAL_HEADER.size > len(data):
        return len(data) // 2
    fields = _LOCAL_HEADER.unpack_from(data, info.header_offset)
    start = int(info.header_offset) + _LOCAL_HEADER.size + int(fields[9]) + int(fields[10])
    return min(start + int(info.compress_size) // 2, len(data) - 1)


def _reads(req: dict[str, Any], path: str, after: float) -> bool:
    """A read of the checkpoint file `path` (relative to the checkpoint) that started after `after`."""
    file = str(req.get("file") or "")
    return req.get("op") in READS and float(req["start"]) >= after and file.endswith("/" + path)


def sparks_answer(ctx: FaultContext, after: float, fatal: tuple[str, ...] = (REPAIR_FAILED,)) -> dict[str, Any]:
    """What Spark's own records say it did with the damage: the drivers that ran after it, how they
    ended, the failed snapshot loads and the `fatal` errors their logs name (`AutoSnapshotLoader`'s
    ERROR line; in local mode the executors log there too), the failed tasks' errors (event log)
    and the repairs the query progress counted."""
    drivers = [op for op in ctx.history.ops("driver") if op.end is not None and op.end >= after]
    lines = [line for op in drivers for line in _log_lines(op.fields.get("stderr"), LOAD_FAILED, *fatal)]
    failed = [op for op in drivers if op.fields.get("exit_code") not in (0, None)]
    log = event_log_or_none(ctx)
    counted = None if log is None else sum(p.metrics.get(REPAIRED_METRIC, 0) for p in log.progress)
    errors = [] if log is None else [t.error for t in log.tasks if t.error and t.finish_ms is not None and t.finish_ms >= after * 1000]
    answer: dict[str, Any] = {
        "log": lines[:5],
        "task_errors": sorted(set(errors))[:5],
        REPAIRED_METRIC: counted,
        "drivers": [op.fields.get("exit_code") for op in drivers],
    }
    said = next((line for line in lines if any(f in line for f in fatal)), None)
    if failed or said is not None:
        why = said or (errors[0] if errors else None)
        exits = ", ".join(str(op.fields.get("exit_code")) for op in failed)
        answer.update(outcome="query-failed", detail=f"the query failed (driver exit {exits or 0}): {why or 'no task error was logged'}")
    elif any(LOAD_FAILED in line for line in lines):
        answer.update(outcome="repaired", detail=f"Spark logged {lines[0]!r} and the query went on: its load routed around the snapshot")
    else:
        answer.update(outcome="no-failure-logged", detail="Spark logged no failed load and the query went on")
    return answer


_MAX_LOG = 64 * 1024 * 1024


def _log_lines(path: Any, *needles: str) -> list[str]:
    """The lines of a driver's stderr naming any of `needles` (none when it is gone or unreadable)."""
    if not isinstance(path, str):
        return []
    try:
        text = read_regular(Path(path), max_bytes=_MAX_LOG).decode(errors="replace")
    except (OSError, StatebedError):
        return []
    return [line.strip()[:400] for line in text.splitlines() if any(n in line for n in needles)]


FAULT = CorruptSnapshot
