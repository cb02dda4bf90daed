"""Maintenance while a run runs: every store keeps its last `retain` committed versions loadable
and loses the rest (losing attempts' orphans included), as Spark's state store maintenance does.

Off the commit path: one background thread in the driver, woken every `interval_s` seconds
(0: after every committed batch). A pass cleans stores (`statebed_store.cleanup`, whose module
docstring argues each delete), least recently cleaned first, until it has spent `max_requests`
storage requests; the next pass goes on with the others, so a pass is bounded however many
stores there are. Only versions at or below the latest batch the driver saw committed are
touched; batches in flight write higher versions. A failure is logged and counted, never
raised: cleanup that cannot run leaves a checkpoint bigger, not broken.

With `trim_log` (the job's maintenance), a pass that cleaned every store also deletes the
commit log's entries below the retained window, as Spark keeps `minBatchesToRetain` of its
own: their versions are gone, no load needs them, and a log kept whole grows one object per
batch. The trim's record (store "commits", `trimmed_below`) is handed to `on_pass` first and
the delete runs only once it was recorded: the verifiers then count the trimmed batches as
committed (`RunDir.committed_batches`), never an output without a commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from statebed_base.log import get_logger, kv
from statebed_store import CommitLog, HeaderCache
from statebed_store.cleanup import cleanup_store, retained_versions
from statebed_store.commitlog import CommitRecord
from statebed_store.inspection import discover_stores, store_index
from statebed_store.naming import COMMITS_DIR, StoreId
from statebed_store.retention import record_retention
from statebed_store.storage.base import Storage
from statebed_store.storage.counting import CountingStorage

__all__ = ["DEFAULT_INTERVAL_S", "DEFAULT_MAX_REQUESTS", "CachedCommitLog", "Maintenance", "OnPass", "PassRecord"]

log = get_logger("maintenance")

DEFAULT_INTERVAL_S = 60.0  # Spark's spark.sql.streaming.stateStore.maintenanceInterval
DEFAULT_MAX_REQUESTS = 2000  # per pass; a store's cleanup costs a handful in steady state


@dataclass
class PassRecord:
    """One store's cleanup in one pass (a row of `<run>/maintenance.jsonl`)."""

    pass_no: int
    store: str
    latest_batch: int
    versions_kept: int
    files_deleted: int = 0
    bytes_deleted: int = 0
    orphans_deleted: int = 0
    requests: int = 0
    seconds: float = 0.0
    error: str | None = None
    at: float = 0.0  # epoch seconds the store's cleanup ended
    files_kept: int = 0  # what the store holds after the pass (state files, sidecars, SSTs), from cleanup's own listing
    bytes_kept: int = 0
    trimmed_below: int | None = None  # store "commits": the log's entries below this batch are deleted (recorded first)
    final: bool = False  # the pass a clean stop runs once the query has ended (`Maintenance.final_pass`)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


OnPass = Callable[[list[PassRecord]], None]


class CachedCommitLog(CommitLog):
    """The commit log, each entry read once per run: an entry never changes once written (only
    `rewind`, which holds the checkpoint's lock and never runs beside a job, removes any). Without
    it a pass re-reads `retain` entries per store, its cost linear in `--retain`."""

    def __init__(self, storage: Storage, cache: dict[int, CommitRecord]) -> None:
        super().__init__(storage)
        self._cache = cache

    def read(self, batch_id: int) -> CommitRecord | None:
        hit = self._cache.get(batch_id)
        if hit is None:
            hit = super().read(batch_id)
            if hit is not None:  # a batch not committed yet may be later: never cache an absence
                self._cache[batch_id] = hit
        return hit


class Maintenance:
    """The background maintenance of one run's statebed checkpoint."""

    def __init__(
        self,
        storage: Storage,
        *,
        retain: int,
        interval_s: float = DEFAULT_INTERVAL_S,
        sst_grace_s: float = 600.0,
        max_requests: int = DEFAULT_MAX_REQUESTS,
        on_pass: OnPass | None = None,
        trim_log: bool = False,
    ) -> None:
        self.storage = storage
        self.retain, self.interval_s, self.sst_grace_s, self.max_requests = retain, interval_s, sst_grace_s, max_requests
        self.on_pass, self.trim_log = on_pass, trim_log
        self.cache = HeaderCache()
        self.passes = 0
        self.failures = 0
        self._latest: int | None = None  # newest committed batch the driver reported
        self._done: dict[StoreId, int] = {}  # store -> the latest batch it was cleaned at
        self._all_cleaned: int | None = None  # every store was cleaned at this latest batch
        self._commits: dict[int, CommitRecord] = {}  # CachedCommitLog's entries, the retained window only
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- driving --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="statebed-maintenance", daemon=True)
        self._thread.start()

    def committed(self, batch_id: int) -> None:
        """The driver committed `batch_id` (called on the batch's thread: only records it)."""
        self._latest = batch_id if self._latest is None else max(self._latest, batch_id)
        if self.interval_s == 0:
            self._wake.set()

    def stop(self) -> None:
        """Stop the thread after the pass it may be in (a pass is bounded)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def final_pass(self) -> list[PassRecord]:
        """The query ended cleanly: stop the thread, then clean every store once more at the latest
        commit (snapshots uploaded since its last pass there let it keep less), each row `final`.
        A run that committed no more batches than it retains has nothing the retention lets go: it
        keeps everything, its losing attempts' files too (the evidence a short run is judged on)."""
        self.stop()
        if self._latest is None or self._latest - self.retain + 1 <= 0:
            return []
        self._done.clear()
        self._all_cleaned = None
        records: list[PassRecord] = []
        while self._latest is not None and self._all_cleaned != self._latest:
            done = self.run_pass(final=True)
            records += done
            if not any(r.error is None for r in done):
                break  # nothing could be cleaned: the next try would fail the same way
        return records

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=self.interval_s or None)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.run_pass()

    # -- one pass -------------------------------------------------------------------------
    def run_pass(self, *, final: bool = False) -> list[PassRecord]:
        """Clean the stores not yet cleaned at the latest commit, least recently cleaned first,
        until the request budget is spent; never raises."""
        latest = self._latest
        if latest is None or latest == self._all_cleaned:
            return []  # nothing committed since every store was cleaned
        self.passes += 1
        counting = CountingStorage(self.storage)
        records: list[PassRecord] = []
        try:
            record_retention(counting, max(0, latest - self.retain + 1))  # before any delete: the verifiers' window
            stores = discover_stores(counting)
        except Exception as e:  # never fatal: logged, counted, recorded; nothing is deleted
            records.append(self._failed(PassRecord(self.passes, "*", latest, 0), e, counting.total))
            stores = []
        log_ = CachedCommitLog(counting, self._commits)
        todo = sorted((s for s in stores if self._done.get(s) != latest), key=lambda s: self._done.get(s, -1))
        for n, store in enumerate(todo):
            if n and counting.total >= self.max_requests:  # at least one store per pass
                break
            records.append(self._clean(counting, log_, stores, store, latest))
            self._done[store] = latest
        else:
            self._all_cleaned = latest if stores else None
        for b in [b for b in self._commits if b <= latest - self.retain]:  # below every retained window from now on
            del self._commits[b]
        trim = self._plan_trim(counting, latest) if self.trim_log and self._all_cleaned == latest else None
        if trim is not None:
            records.append(trim[0])
        for r in records:
            r.final = final
        if self._record(records) and trim is not None and trim[1]:
            self._trim(counting, *trim)
        return records

    def _plan_trim(self, counting: CountingStorage, latest: int) -> tuple[PassRecord, list[int]] | None:
        """The commit-log entries below the retained window and the record saying so (None: nothing to
        trim; a listing that failed: its record with the error, and nothing to delete)."""
        t0, before = time.perf_counter(), counting.total
        below = latest - self.retain + 1  # the oldest retained version, latest + 2 - retain, is committed by this batch
        rec = PassRecord(self.passes, COMMITS_DIR, latest, 0, trimmed_below=below)
        try:
            entries = CommitLog(counting).entries()
        except Exception as e:  # never fatal: recorded with its error, nothing deleted
            return self._failed(rec, e, counting.total - before, t0), []
        doomed = [(b, size) for b, size in entries if b < below]
        if below <= 0 or not doomed or latest not in {b for b, _ in entries}:  # a latest the log does not hold is no anchor
            return None
        rec.versions_kept = rec.files_kept = len(entries) - len(doomed)
        rec.bytes_kept = sum(size for b, size in entries if b >= below)
        rec.files_deleted, rec.bytes_deleted = len(doomed), sum(size for _, size in doomed)
        rec.requests, rec.seconds, rec.at = counting.total - before, round(time.perf_counter() - t0, 4), time.time()
        return rec, [b for b, _ in doomed]

    def _trim(self, counting: CountingStorage, rec: PassRecord, batches: list[int]) -> None:
        """Delete the recorded entries; a failure leaves them (the next pass's trim retries)."""
        try:
            CommitLog(counting).delete(batches)
        except Exception as e:  # never fatal: logged and counted (its record already went out)
            self.failures += 1
            log.warning("commit log trim failed", extra=kv(below=rec.trimmed_below, error=f"{type(e).__name__}: {e}"))

    def _record(self, records: list[PassRecord]) -> bool:
        """Hand the pass's records to `on_pass`; False when they were not recorded (or there is no recorder)."""
        if self.on_pass is None:
            return False
        try:
            self.on_pass(records)
        except Exception as e:  # a record that cannot be written must not stop maintenance
            self.failures += 1
            log.warning("maintenance pass not recorded", extra=kv(error=f"{type(e).__name__}: {e}"))
            return False
        return True

    def _clean(self, counting: CountingStorage, log_: CommitLog, stores: list[StoreId], store: StoreId, latest: int) -> PassRecord:
        t0, before = time.perf_counter(), counting.total
        rec = PassRecord(self.passes, store.dir, latest, 0)
        try:
            siblings = [s.store_name for s in stores if (s.operator, s.partition) == (store.operator, store.partition)]
            idx = store_index(store, siblings)
            kept = retained_versions(log_, idx, store.operator, store.partition, latest, self.retain)
            report = cleanup_store(counting, store, kept, sst_orphan_grace_s=self.sst_grace_s, cache=self.cache)
        except Exception as e:  # never fatal: logged, counted, recorded
            return self._failed(rec, e, counting.total - before, t0)
        rec.versions_kept = report.retained
        rec.files_deleted, rec.bytes_deleted, rec.orphans_deleted = report.files_deleted, report.bytes_deleted, len(report.orphans)
        rec.files_kept, rec.bytes_kept = report.files_kept, report.bytes_kept
        rec.requests, rec.seconds, rec.at = counting.total - before, round(time.perf_counter() - t0, 4), time.time()
        return rec

    def _failed(self, rec: PassRecord, e: Exception, requests: int, t0: float | None = None) -> PassRecord:
        self.failures += 1
        rec.error = f"{type(e).__name__}: {e}"
        rec.requests, rec.at = requests, time.time()
        rec.seconds = 0.0 if t0 is None else round(time.perf_counter() - t0, 4)
        log.warning("maintenance failed", extra=kv(store=rec.store, error=rec.error))
        return rec
