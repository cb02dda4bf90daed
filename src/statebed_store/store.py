"""The state store: load `(version, id)`, read and write, commit or abort.

Lifecycle (as Spark's StateStore): `provider.load(version, id)` returns a `StateStore`
transaction; `commit()` makes `version + 1` durable and returns `(version, new id, base
id)`; `abort()` discards. One transaction per provider at a time.

Load: reuse the open RocksDB instance only if it proves from its own identity record
(`identity`) that it is at exactly `(version, id)`; else plan from storage (`plan.plan_load`)
and rebuild. Any failure while an instance changes (catch-up, rebuild, replay, a loan, a
commit) drops the instance: it is closed and forgotten, and the lock is released whatever
happens. Commit (V2): write `<v+1>_<new id>.changelog`
create-only with the lineage since the presumed last snapshot, durable before returning;
every `snapshot_interval` versions take a local RocksDB checkpoint and queue it for the
background uploader (commit never waits for it). The new id is drawn per load, i.e. per
task attempt, so two attempts of one version can never overwrite each other.

V1 mode writes `<v>.changelog` / `<v>.zip`, overwritten by every attempt, loaded by
version: the legacy behaviour kept as a positive control. Switching V1<->V2 is detected
at load (a V1 base under V2 options or the reverse); the first checkpoint after a switch
is a synchronous full snapshot, so a load never mixes V1 and V2 files.
"""

from __future__ import annotations

import enum
import json
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import pyarrow as pa

from statebed_base import localfs, procfs
from statebed_base.errors import (
    CheckpointFileError,
    InjectedFault,
    LocalInstanceError,
    MissingFileError,
    StatebedError,
    StoreStateError,
    UnplannableError,
    UsageError,
)
from statebed_base.log import get_logger, kv

from . import failpoints, lending, local_dirs
from .changelog import DELETE, MERGE, PUT, Chunk, as_binary_array, encode_changelog, parse_changelog
from .config import StoreOptions
from .engine import RocksEngine
from .formats import FORMATS
from .identity import Identity
from .lineage import CheckpointRef
from .merge import replay_merge
from .naming import CHANGELOG, DB_DIR, HELD_FILE, SNAPSHOT, StateFileName, StoreId, check_id, new_checkpoint_id
from .plan import LoadPlan, SnapshotUnusable, check_link, plan_load, plan_with_fallback
from .publish import publish_state_file
from .snapshot import ImmutableFile
from .storage.base import Storage
from .storage.hedge import hedged
from .store_files import HeaderCache, StoreFiles
from .unpack import open_snapshot, unpack_snapshot
from .uploader import PendingSnapshot, SnapshotUploader, SstRegistry, default_uploader, upload_snapshot

__all__ = ["CommitResult", "ProviderMetrics", "StateStore", "StateStoreProvider"]

log = get_logger("store")

Keys: TypeAlias = Sequence[bytes] | pa.Array | pa.ChunkedArray


@dataclass(frozen=True)
class CommitResult:
    """What a task reports to the driver: the new checkpoint and the base it was built on."""

    version: int
    checkpoint_id: str | None
    base_id: str | None
    store: StoreId | None = None


@dataclass
class ProviderMetrics:
    loads: int = 0
    cache_hits: int = 0
    catch_ups: int = 0  # loads that replayed, on the open instance, only the changelogs it had not applied
    borrows: int = 0  # loads that started from a copy of another process's instance (`lending`)
    resumes: int = 0  # loads that started from the instance a process that died left in the shared directory
    snapshot_loads: int = 0
    changelogs_replayed: int = 0
    records_replayed: int = 0
    load_seconds: float = 0.0
    commits: int = 0
    commit_seconds: float = 0.0
    snapshots_queued: int = 0
    snapshot_fallbacks: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class _Status(enum.Enum):
    IDLE = "idle"
    IN_TXN = "in transaction"
    CLOSED = "closed"


@dataclass
class _Instance:
    """The open RocksDB instance and what it is known to hold."""

    engine: RocksEngine
    loaded: CheckpointRef
    lineage: list[CheckpointRef] = field(default_factory=list)
    last_snapshot_version: int = 0
    registry: SstRegistry = field(default_factory=SstRegistry)

    @property
    def identity(self) -> Identity:
        """What the bookkeeping claims the instance holds (its own record must say the same)."""
        return Identity(self.loaded, tuple(self.lineage), self.last_snapshot_version)


class StateStoreProvider:
    """One store (operator, partition, store name) in one process: its local instance and files."""

    def __init__(
        self,
        storage: Storage,
        store: StoreId,
        options: StoreOptions | None = None,
        *,
        uploader: SnapshotUploader | None = None,
        cache: HeaderCache | None = None,
        executor_id: str = "driver",
        share: bool = False,
    ) -> None:
        """`share`: lend this instance to the other processes of the host, and borrow theirs
        instead of rebuilding from storage (`lending`; the job's executors share)."""
        self.options = options or StoreOptions()
        self.storage = hedged(storage, self.options)  # uploads timed per kind; hedged if the options say so
        self.store = store
        self.uploader = uploader or default_uploader()
        self.cache = HeaderCache() if cache is None else cache  # an empty cache passed in is still shared
        self.executor_id = executor_id
        self.metrics = ProviderMetrics()
        self._lock = threading.Lock()
        self._status = _Status.IDLE
        self._instance: _Instance | None = None
        root = local_dirs.local_root(self.options.local_dir, storage.url)
        self._local = local_dirs.claim_instance_dir(root, store)
        self._dir = self._local.path
        self._sst_cache = local_dirs.sst_cache_dir(root, store)
        self._store_dir = local_dirs.store_dir(root, store)
        # V1 shares only when asked (`StoreOptions.share_v1`): Spark's V1 instance dies with its JVM.
        self._share = share and (FORMATS[self.options.format].ids or self.options.share_v1)
        if self._share:
            lending.advertise(self._store_dir, self)

    @property
    def loaded(self) -> CheckpointRef | None:
        return self._instance.loaded if self._instance else None

    @property
    def lineage(self) -> tuple[CheckpointRef, ...]:
        return tuple(self._instance.lineage) if self._instance else ()

    # -- load -----------------------------------------------------------------------------
    def load(self, version: int, checkpoint_id: str | None = None, *, task_info: str = "") -> StateStore:
        """Start a transaction on `(version, checkpoint_id)`; `version + 1` is what commit writes."""
        if not isinstance(version, int) or version < 0:
            raise UsageError(f"version must be an integer >= 0, got {version!r}")
        if checkpoint_id is not None:
            check_id(checkpoint_id)
            if version == 0:
                raise UsageError("version 0 is the empty state and has no checkpoint id")
        if not self._lock.acquire(timeout=self.options.lock_timeout_s):
            raise StoreStateError(f"{self.store}: another transaction held the store for {self.options.lock_timeout_s}s")
        try:
            if self._status is _Status.CLOSED:
                raise StoreStateError(f"{self.store}: provider is closed")
            ref = CheckpointRef(version, checkpoint_id)
            t0 = time.perf_counter()
            self.metrics.loads += 1
            if self._instance is None:
                self._resume()
            else:
                self._unmark()  # from here the instance may change: until the commit, nobody may resume it
            if not self._use_open(ref) and not (self._borrow(ref) and self._use_open(ref)):
                self._reload(ref)
            self._begin()
            self.metrics.load_seconds += time.perf_counter() - t0
            v2 = FORMATS[self.options.format].ids
            switch = version > 0 and ((v2 and checkpoint_id is None) or (not v2 and checkpoint_id is not None))
            self._status = _Status.IN_TXN
            return StateStore(self, ref, new_checkpoint_id() if v2 else None, switch, task_info)
        except BaseException:
            try:
                self._invalidate()  # whatever failed may have changed it
            finally:
                self._lock.release()
            raise

    def _begin(self) -> None:
        """The transaction's writes start: the identity record goes first, so that an instance
        left half-way (a kill, a full disk) proves nothing and is never served."""
        inst = self._instance
        assert inst is not None
        inst.engine.clear_identity()

    # -- the identity rule (`identity`) ----------------------------------------------------
    def _proves(self, inst: _Instance) -> bool:
        """The instance's own record says it holds exactly what its bookkeeping claims."""
        claim = inst.identity
        try:
            record = inst.engine.identity()
            held = Identity.decode(record) if record is not None else None
        except (StatebedError, ValueError) as e:
            log.info("instance identity unreadable", extra=kv(store=str(self.store), error=str(e)))
            return False
        if held != claim:
            log.info("instance does not prove its claim; dropped", extra=kv(store=str(self.store), claim=str(claim), held=str(held)))
            return False
        return True

    def _record_identity(self) -> None:
        """After a commit's last change: the instance proves what it holds from here."""
        inst = self._instance
        assert inst is not None
        inst.engine.set_identity(inst.identity.encode())

    def _use_open(self, ref: CheckpointRef) -> bool:
        """Serve `ref` from the open instance: a hit at exactly `ref`, else a catch-up; False if neither."""
        inst = self._instance
        if inst is None:
            return False
        if not self._proves(inst):
            self._invalidate()
            return False
        if inst.loaded == ref:
            self.metrics.cache_hits += 1
            return True
        return self._catch_up(ref)

    def _invalidate(self) -> None:
        """Forget the instance and close it; never raises (a close that fails must not keep the lock)."""
        inst, self._instance = self._instance, None
        if inst is None:
            return
        try:
            self._unmark()
        except OSError as e:
            log.warning("could not remove the instance's record", extra=kv(store=str(self.store), error=str(e)))
        try:
            inst.engine.close()
        except Exception as e:
            log.warning("closing a dropped instance failed", extra=kv(store=str(self.store), error=str(e)))

    # -- what the shared directory's instance holds, for a process that takes it over ------
    # A holder records the `(version, id)`, lineage, last snapshot and uploaded SSTs of its
    # instance after each commit, with this boot's id, and removes the record before anything
    # changes the instance again. A process that later claims the directory (the holder died: a
    # killed Python worker) reopens the instance (RocksDB replays its unsynced WAL) only if the
    # record is there and of this boot, and keeps it only if the instance's own identity record
    # proves the same (a lost WAL tail loses that proof with the rows).
    def _held(self) -> lending.Loan:
        inst = self._instance
        assert inst is not None
        return lending.Loan(inst.loaded, tuple(inst.lineage), inst.last_snapshot_version, inst.registry.files())

    def _mark(self) -> None:
        if not self._share or self._local.private:
            return
        record = {**self._held().to_json(), "boot_id": procfs.boot_id()}
        try:
            localfs.atomic_write(self._dir / HELD_FILE, json.dumps(record).encode(), durable=False)
        except (OSError, StatebedError) as e:  # without the record, a successor rebuilds: slower, never wrong
            log.info("could not record the instance's state", extra=kv(store=str(self.store), error=str(e)))

    def _unmark(self) -> None:
        """Any holder of the shared directory (sharing or not) removes the record before it changes the instance."""
        if not self._local.private:
            (self._dir / HELD_FILE).unlink(missing_ok=True)

    def _resume(self) -> None:
        """Take over the instance a dead holder left in the shared directory, if it recorded what it
        holds; the record is consumed either way (a provider that does not share only drops it)."""
        if self._local.private:
            return
        held, db_dir = self._dir / HELD_FILE, self._dir / DB_DIR
        try:
            data = localfs.read_regular(held, max_bytes=lending.MAX_MESSAGE) if self._share else None
        except FileNotFoundError:
            return
        except (OSError, StatebedError) as e:
            log.info("instance record unreadable; rebuilding", extra=kv(store=str(self.store), error=str(e)))
            return
        finally:
            self._unmark()
        if data is None:
            return
        try:
            record = json.loads(data)
            if not isinstance(record, dict) or record.get("boot_id") != procfs.boot_id():
                raise ValueError("the record is of another boot (a host crash may have lost the WAL it relied on)")
            loan = lending.Loan.from_json(record)
            if not (db_dir / "CURRENT").is_file():
                raise StatebedError(f"{db_dir}: no RocksDB instance beside its record")
            engine = RocksEngine(db_dir)
        except Exception as e:  # malformed, another boot, unopenable: rebuilding is never wrong
            log.info("instance left by a dead holder unusable; rebuilding", extra=kv(store=str(self.store), error=str(e)))
            return
        self._instance = self._adopt(engine, loan)
        if not self._proves(self._instance):  # e.g. the WAL lost its tail: the record is not the rows
            self._invalidate()
            return
        self.metrics.resumes += 1
        log.info("took over the instance a dead holder left", extra=kv(store=str(self.store), loaded=str(loan.loaded)))

    @staticmethod
    def _adopt(engine: RocksEngine, held: lending.Loan) -> _Instance:
        return _Instance(engine, held.loaded, list(held.lineage), held.last_snapshot_version, SstRegistry(held.ssts))

    def _files(self) -> StoreFiles:
        return StoreFiles(
            self.storage, self.store, cache=self.cache, verify_checksums=self.options.checksums, row_checksums=self.options.row_checksums
        )

    def _catch_up(self, ref: CheckpointRef) -> bool:
        """Bring the open instance forward to `ref` by replaying only the changelogs after what it
        holds, when the committed chain to `ref` passes through it (its own version and id): a task
        that lands in this process after others ran the partition in between rebuilds nothing.
        The chain is planned as a load is, with the snapshots newer than the instance left out, and
        each changelog's link to the one before is checked. Anything else (another attempt's id, a
        gap, a damaged file) returns False with the instance dropped: the caller rebuilds from storage.
        The bookkeeping (lineage, last snapshot) is the one a rebuild's plan would set."""
        inst = self._instance
        if inst is None or ref.version <= inst.loaded.version:
            return False
        files = self._files()
        try:
            newer = frozenset(r for r in files.refs(SNAPSHOT) if inst.loaded.version < r.version <= ref.version)
            chain = plan_load(files, ref, exclude_snapshots=newer)
            if inst.loaded not in chain.chain:
                return False
            todo = tuple(c for c in chain.changelogs if c.version > inst.loaded.version)
            self._replay(files, inst.engine, todo, inst.loaded)
            rebuild = plan_load(files, ref)  # what a rebuild would plan: its lineage and last snapshot
        except Exception as e:  # ours, or the engine's (a full disk): the caller rebuilds from storage
            log.info(
                "catch-up not possible; rebuilding", extra=kv(store=str(self.store), loaded=str(inst.loaded), target=str(ref), why=str(e))
            )
            self._invalidate()  # a replay that stopped half-way leaves the instance between versions
            return False
        except BaseException:
            self._invalidate()
            raise
        inst.loaded = ref
        inst.lineage = list(rebuild.chain)[-self.options.snapshot_interval :] if ref.id is not None else []
        inst.last_snapshot_version = max(inst.last_snapshot_version, rebuild.snapshot.version if rebuild.snapshot else 0)
        self.metrics.catch_ups += 1
        log.info("caught up", extra=kv(store=str(self.store), target=str(ref), changelogs=len(todo)))
        return True

    def _borrow(self, ref: CheckpointRef) -> bool:
        """Open a copy of another process's instance of this store (`lending`), to be used as one's
        own (`_use_open`); False, with no instance open, when no process of this host lends one."""
        if not self._share or ref.version == 0:
            return False
        self._invalidate()
        db_dir = self._dir / DB_DIR
        try:
            localfs.remove_tree(db_dir)
            loan = lending.borrow(self._store_dir, self._dir, db_dir)
            if loan is None:
                return False
            engine = RocksEngine(db_dir)
        except Exception as e:
            log.info("borrowed instance unusable; rebuilding", extra=kv(store=str(self.store), error=str(e)))
            return False
        self._instance = self._adopt(engine, loan)
        if not self._proves(self._instance):  # the lender's word against the copy's own record
            self._invalidate()
            return False
        self.metrics.borrows += 1
        return True

    def lend(self, dest: Path) -> lending.Loan | None:
        """A copy of the open instance in `dest`, for another process of this host; None when
        there is none or a transaction runs (a speculative copy must not take a running task's state)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            inst = self._instance
            if self._status is not _Status.IDLE or inst is None or not self._proves(inst):
                return None
            inst.engine.checkpoint(dest, parents=False, identity=True)  # the copy proves itself to its borrower
            return self._held()
        finally:
            self._lock.release()

    def _reload(self, ref: CheckpointRef) -> None:
        """Rebuild the instance at `ref` from storage.

        A listing can go stale while a load runs: cleanup may delete files of an old plan
        once a newer snapshot appeared. A missing file therefore earns one fresh listing
        and a second try before it is reported.
        """
        self._invalidate()
        for attempt in (1, 2):
            files = self._files()
            try:
                self._instance = self._build(files, ref)
                return
            except (MissingFileError, UnplannableError) as e:
                if attempt == 2:
                    raise
                log.info("file missing while loading; listing again", extra=kv(store=str(self.store), target=str(ref), error=str(e)))
            except StatebedError:
                raise
            except OSError as e:  # the local directory itself (a full disk while unpacking)
                raise LocalInstanceError(f"{self._dir / DB_DIR}: cannot rebuild the local instance at {ref} ({e})") from None

    def _build(self, files: StoreFiles, ref: CheckpointRef) -> _Instance:
        """Plan and materialize; a damaged snapshot is planned around (`plan.plan_with_fallback`)."""

        def materialize(plan: LoadPlan) -> _Instance:
            try:
                return self._materialize(files, plan)
            except SnapshotUnusable as bad:
                self.metrics.snapshot_fallbacks += 1
                log.warning(
                    "snapshot unusable; planning without it",
                    extra=kv(store=str(self.store), snapshot=str(bad.ref), target=str(ref), error=str(bad.error)),
                )
                raise

        try:
            return plan_with_fallback(files, ref, materialize)
        except UnplannableError as e:
            if ref.id is None and ref.version > 0 and any(r.version == ref.version and r.id for r in files.refs()):
                raise UnplannableError(
                    e.target, e.detail + f"; version {ref.version} has V2 files: load it with its checkpoint id", e.missing
                ) from None
            raise

    def _fetch_sst(self, files: StoreFiles, f: ImmutableFile, subdir: str) -> Path:
        """The SST in the host-local cache (downloaded once and checked, shared by processes of this host)."""
        cached = local_dirs.cached_file(self._sst_cache, f.dfs, f.size)
        if cached is not None:
            return cached
        return local_dirs.cache_file(self._sst_cache, f.dfs, files.read_immutable(f, subdir))

    def _open_snapshot(self, files: StoreFiles, snap: CheckpointRef, db_dir: Path) -> tuple[RocksEngine, SstRegistry]:
        """Unpack and open `snap` (`unpack`: the checks `statebed plan` and the verifier make); SnapshotUnusable if it fails."""
        try:
            meta = unpack_snapshot(files, snap, db_dir, lambda f, sub: self._fetch_sst(files, f, sub))
            engine = open_snapshot(files, snap, db_dir, meta)
        except (CheckpointFileError, UnplannableError) as e:  # corrupt, missing, foreign, unknown format, bad lineage
            raise SnapshotUnusable(snap, e) from None
        self.metrics.snapshot_loads += 1
        return engine, SstRegistry(meta.sst_files)

    def _materialize(self, files: StoreFiles, plan: LoadPlan) -> _Instance:
        db_dir = self._dir / DB_DIR
        RocksEngine.clear_dir(db_dir)
        registry = SstRegistry()
        if plan.snapshot is not None:
            engine, registry = self._open_snapshot(files, plan.snapshot, db_dir)
        else:
            engine = RocksEngine(db_dir)
        try:
            self._replay(files, engine, plan.changelogs, plan.snapshot)
        except BaseException:
            try:
                engine.close()
            except Exception as e:  # the replay's error is the one to report
                log.warning("closing a failed instance failed", extra=kv(store=str(self.store), error=str(e)))
            raise
        lineage = list(plan.chain)[-self.options.snapshot_interval :] if plan.target.id is not None else []
        log.info(
            "loaded",
            extra=kv(store=str(self.store), target=str(plan.target), snapshot=str(plan.snapshot), changelogs=len(plan.changelogs)),
        )
        return _Instance(
            engine=engine,
            loaded=plan.target,
            lineage=lineage,
            last_snapshot_version=plan.snapshot.version if plan.snapshot else 0,
            registry=registry,
        )

    def _replay(self, files: StoreFiles, engine: RocksEngine, changelogs: Sequence[CheckpointRef], prev: CheckpointRef | None) -> None:
        """Apply `changelogs` in order onto `engine`, each checked to follow `prev` (the one before it).
        The identity record goes first: an instance replayed half-way proves nothing."""
        engine.clear_identity()
        for ref in changelogs:
            shown = files.display(ref, CHANGELOG)
            cl = parse_changelog(files.read_verified(ref, CHANGELOG), file=shown, version=ref.version)
            check_link(ref, cl.lineage, prev, file=shown)
            ops, keys, values = cl.columns()
            rows = files.row_checksums  # the options' (the provider's StoreFiles is given them): no offset log read
            if rows is not None:
                keys = rows.replay_columns(ops, keys, values, DELETE, file=shown)
            merge = replay_merge(files.storage, shown, framed=rows is not None) if MERGE in ops else None
            self.metrics.records_replayed += engine.apply(ops, keys, values, DELETE, merge=merge)
            self.metrics.changelogs_replayed += 1
            prev = ref

    # -- commit / abort (called by StateStore) ---------------------------------------------
    def _engine(self, txn: StateStore) -> RocksEngine:
        if self._status is not _Status.IN_TXN or txn._done or self._instance is None:
            raise StoreStateError(f"{self.store}: transaction on {txn.base} is already finished")
        return self._instance.engine

    def _creator(self, txn: StateStore) -> dict[str, Any]:
        """Sidecar `creator`: the attempt, plus the file's own store and `(version, id)` (checked by readers)."""
        s = self.store
        own = {"operator": s.operator, "partition": s.partition, "storeName": s.store_name}
        return {
            "executorId": self.executor_id,
            "taskInfo": txn.task_info,
            "writer": "statebed",
            "store": own,
            "version": txn.base.version + 1,
            "checkpointUniqueId": txn.new_id,
        }

    def _commit(self, txn: StateStore, snapshot: bool | None) -> CommitResult:
        self._engine(txn)
        inst = self._instance
        assert inst is not None
        t0 = time.perf_counter()
        new = CheckpointRef(txn.base.version + 1, txn.new_id)
        v2 = FORMATS[self.options.format].ids
        try:
            if txn.switch:
                self._switch_snapshot(txn, new)
            else:
                fmt = 3 if v2 else 1
                # Capped even if snapshots keep failing locally: a lineage must fit writeUTF's 64 KiB.
                lineage = tuple(inst.lineage[-self.options.snapshot_interval :]) if v2 else None
                data = encode_changelog(fmt, lineage, txn._chunks, self.options.lz4_block_size)
                path = self.store.path(StateFileName(new.version, new.id, CHANGELOG).name)
                if not failpoints.hit("changelog.upload.before"):
                    publish_state_file(
                        self.storage, path, data, create_only=v2, checksums=self.options.checksums, creator=self._creator(txn)
                    )
                failpoints.hit("changelog.upload.after")
        except BaseException:
            try:
                self._finish(txn)
                self._invalidate()
            finally:
                self._lock.release()
            raise
        try:
            base_lineage = tuple(inst.lineage)
            inst.loaded = new
            if txn.switch:
                inst.lineage = [new] if v2 else []
                inst.last_snapshot_version = new.version
            else:
                if v2:
                    inst.lineage.append(new)
                    del inst.lineage[: -self.options.snapshot_interval]  # loaders trace further back
                due = new.version - inst.last_snapshot_version >= self.options.snapshot_interval
                if snapshot or (snapshot is None and due):
                    self._queue_snapshot(txn, new, base_lineage if v2 else None)
            failpoints.hit("commit.identity.before")
            try:
                self._record_identity()
            except StatebedError as e:  # the commit is durable; only this instance is lost
                log.warning("could not record the instance's identity; dropped", extra=kv(store=str(self.store), error=str(e)))
                self._invalidate()
            else:
                failpoints.hit("commit.identity.after")
                self._mark()
            self.metrics.commits += 1
            self.metrics.commit_seconds += time.perf_counter() - t0
            log.info("committed", extra=kv(store=str(self.store), version=new.version, id=new.id, base=txn.base.id))
            return CommitResult(new.version, new.id, txn.base.id, self.store)
        finally:
            self._finish(txn)
            self._lock.release()

    def _finish(self, txn: StateStore) -> None:
        txn._done = True
        self._status = _Status.IDLE

    def _pending(self, txn: StateStore, ref: CheckpointRef, lineage: tuple[CheckpointRef, ...] | None) -> PendingSnapshot:
        inst = self._instance
        assert inst is not None
        ckpt = local_dirs.new_pending_dir(self._dir, ref.version, ref.id)
        inst.engine.checkpoint(ckpt)
        return PendingSnapshot(
            storage=self.storage,
            store=self.store,
            ref=ref,
            lineage=lineage,
            checkpoint_dir=ckpt,
            registry=inst.registry,
            num_keys=inst.engine.num_keys_estimate(),
            checksums=self.options.checksums,
            creator=self._creator(txn),
            attempts=self.options.snapshot_upload_attempts,
            backoff_s=self.options.snapshot_upload_backoff_s,
        )

    def _queue_snapshot(self, txn: StateStore, ref: CheckpointRef, lineage: tuple[CheckpointRef, ...] | None) -> None:
        """Queue `ref` for upload and presume it a snapshot: the lineage restarts at it."""
        inst = self._instance
        assert inst is not None
        try:
            pending = self._pending(txn, ref, lineage)
        except Exception as e:  # a local checkpoint failing must not fail a durable commit
            log.warning(
                "could not take a local checkpoint; snapshot skipped", extra=kv(store=str(self.store), version=ref.version, error=str(e))
            )
            return
        self.uploader.submit(pending)
        self.metrics.snapshots_queued += 1
        inst.lineage = [ref] if ref.id is not None else []
        inst.last_snapshot_version = ref.version

    def _switch_snapshot(self, txn: StateStore, ref: CheckpointRef) -> None:
        """First checkpoint after a V1<->V2 switch: a full snapshot, uploaded before commit returns."""
        pending = self._pending(txn, ref, () if ref.id is not None else None)
        try:
            if not upload_snapshot(pending):
                raise InjectedFault(f"{self.store}: format-switch snapshot of version {ref.version} was dropped by a failpoint")
        finally:
            localfs.remove_tree(pending.checkpoint_dir)
        log.info(
            "format switch snapshot written", extra=kv(store=str(self.store), version=ref.version, id=ref.id, format=self.options.format)
        )

    def _abort(self, txn: StateStore) -> None:
        if txn._done:
            return
        try:
            self._finish(txn)
            self._invalidate()  # the instance holds half a batch: rebuild on the next load
        finally:
            self._lock.release()

    def close(self, drain_timeout_s: float = 0.0) -> None:
        """Release the local instance; optionally wait for queued snapshots first."""
        if drain_timeout_s:
            self.uploader.drain(drain_timeout_s)
        if self._share:
            lending.withdraw(self._store_dir, self)
        with self._lock:
            self._invalidate()  # its record first: a closed instance is never taken over
            self._status = _Status.CLOSED
            localfs.remove_tree(self._dir / DB_DIR)
            self._local.release()
        log.info("provider closed", extra=kv(store=str(self.store), **self.metrics.as_dict()))

    def __enter__(self) -> StateStoreProvider:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class StateStore:
    """One transaction: read and write version `base.version`, then commit `base.version + 1`."""

    def __init__(self, provider: StateStoreProvider, base: CheckpointRef, new_id: str | None, switch: bool, task_info: str) -> None:
        self._p = provider
        self.base = base
        self.new_id = new_id
        self.switch = switch
        self.task_info = task_info
        self._chunks: list[Chunk] = []
        self._done = False

    @property
    def version(self) -> int:
        return self.base.version

    @property
    def store(self) -> StoreId:
        return self._p.store

    # reads
    def get(self, key: bytes) -> bytes | None:
        return self.get_many([key])[0]

    def get_many(self, keys: Keys) -> list[bytes | None]:
        return self._p._engine(self).get_many(_binary(keys, "keys"))

    def items(self, start: bytes | None = None, end: bytes | None = None, prefix: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        return self._p._engine(self).items(start, end, prefix)

    # writes
    def put(self, key: bytes, value: bytes) -> None:
        self.put_many([key], [value])

    def put_many(self, keys: Keys, values: Keys) -> None:
        """Write a batch: one WriteBatch and one changelog chunk, whatever its size.

        Keys and values: Arrow binary arrays (no copy) or sequences of bytes (str is
        encoded as UTF-8). Repeated keys: the last one wins, as in the changelog.
        """
        engine = self._p._engine(self)
        ka, va = _binary(keys, "keys"), _binary(values, "values")
        if len(ka) != len(va):
            raise UsageError(f"put_many got {len(ka)} keys but {len(va)} values")
        engine.put_many(ka, va)
        self._chunks.append(Chunk(PUT, ka, va))

    def delete(self, key: bytes) -> None:
        self.delete_many([key])

    def delete_many(self, keys: Keys) -> None:
        engine = self._p._engine(self)
        ka = _binary(keys, "keys")
        engine.delete_many(ka)
        self._chunks.append(Chunk(DELETE, ka))

    def commit(self, snapshot: bool | None = None) -> CommitResult:
        """Make `version + 1` durable. `snapshot`: None = every `snapshot_interval` versions,
        True = queue one now (e.g. before a planned shutdown), False = not this time."""
        return self._p._commit(self, snapshot)

    def abort(self) -> None:
        self._p._abort(self)

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        if not self._done:
            self.abort()


def _binary(values: Keys, what: str) -> pa.Array:
    """Keys/values as one Arrow binary array without nulls; a clear error for anything else."""
    try:
        arr = as_binary_array(values)
    except (TypeError, pa.ArrowException) as e:
        raise UsageError(f"{what} must be bytes ({e})") from None
    if arr.null_count:
        raise UsageError(f"{what} must not contain None")
    return arr
