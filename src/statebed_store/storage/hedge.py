"""Hedged create-only uploads: a second identical PUT when the first is slow.

A V2 commit returns once its changelog is durable, so its tail latency is the storage's.
Following "The Tail at Scale" (Dean & Barroso) and FLIP-158 (p999 of S3 writes −47 %): when a
create-only upload has not finished after a delay (fixed, or the running quantile of recent
uploads of its kind within a floor and a cap), the same bytes are PUT again and the first
attempt to finish decides. Safe by construction: a commit-log entry (shared by every attempt of
a batch) is PUT create-only (`If-None-Match: *`) by both attempts, so at most one creates it and
a hedge never overwrites; a uuid-named file (`unique_name`: no other writer uses the name) is PUT
plainly by both, since MinIO holds a second conditional PUT of a key until the first one's body
has arrived, and a conditional pair would wait out every stall after the first's headers. A 412
or a transport error (a timeout after the request was sent) is resolved by reading the object
back and comparing it with our bytes: ours → done, someone else's → AlreadyExistsError. The
loser cannot be cancelled mid-request: it finishes in the pool and its answer is ignored (a late
plain PUT rewrites the same bytes). A token bucket caps
hedges at `hedge_budget` of uploads; it holds one adaptive window's worth (`bucket_size`).

`HedgedStorage` wraps any Storage; with hedging off it only measures (`upload_stats`).
"""

from __future__ import annotations

import builtins
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from statebed_base.errors import AlreadyExistsError, StatebedError, StorageError
from statebed_base.log import get_logger, kv

from ..config import StoreOptions
from ..naming import CRC_SUFFIX, SST_DIR, SST_SUFFIX, parse_state_file
from .base import FileInfo, Storage
from .upload_stats import KINDS, UploadStats, kind_of, percentile

__all__ = ["HedgeState", "HedgedStorage", "hedged", "shared_state", "take_uploads", "unique_name"]

log = get_logger("storage.hedge")

WINDOW = 128  # recent uploads per kind the adaptive delay is computed from (short: it must follow a fault)
WARMUP = 20  # fewer than this: the fixed delay
_UUID_TAIL = re.compile(r"-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def bucket_size(budget: float) -> float:
    """How many hedges the budget's bucket holds: one window's worth (budget × WINDOW, at least 1).

    A smaller bucket lets a cluster of ordinary slow uploads (the quantile hedges ~3 % of them)
    take every token just before a stall, which then waits unhedged: with 3 tokens that happened
    to about one stall in ten, enough to leave p999 at the stall in most benchmark runs.
    """
    return max(1.0, budget * WINDOW)


def unique_name(path: str) -> bool:
    """Is `path` a name only this writer ever uses: a V2 state file `<version>_<uuid>.<kind>` or
    an uploaded SST `<n>-<uuid>.sst`, or the `.crc` sidecar of one?

    Both attempts of such a file are plain PUTs of the same bytes: create-only adds nothing to a
    name no one else writes, and it costs the hedge its point on a server that serializes
    conditional PUTs of a key (MinIO holds a second `If-None-Match: *` PUT behind a first whose
    body is stalled). A loser that lands later rewrites the same bytes. Commit-log entries are
    shared by every attempt of a batch and stay create-only: they decide which attempt won.
    """
    name = path.rsplit("/", 1)[-1].removesuffix(CRC_SUFFIX)
    state = parse_state_file(name)
    if state is not None:
        return state.id is not None
    stem = name.removesuffix(SST_SUFFIX)
    return name != stem and f"/{SST_DIR}/" in f"/{path}" and _UUID_TAIL.search(stem) is not None


def _done_within(fut: Future[None], seconds: float) -> bool:
    try:
        fut.exception(timeout=seconds)
    except TimeoutError:
        return False
    return True


class HedgeState:
    """What hedging learns and counts in one process: latencies, the budget, stats, the pool.

    Shared by every HedgedStorage of the process (`shared_state()`), so the adaptive delay
    learns from all stores at once; a benchmark comparing modes gives each its own.
    """

    def __init__(self, workers: int = 16) -> None:
        self.stats = UploadStats()
        self.outcomes: Counter[str] = Counter()  # per PUT attempt: created, conflict, error
        self.requests = 0  # hedgeable uploads seen (the budget's denominator)
        self.hedges = 0
        self._lock = threading.Lock()
        self._recent: dict[str, deque[float]] = {k: deque(maxlen=WINDOW) for k in KINDS}
        self._tokens: float | None = None  # full at the first upload: the first slow ones may hedge at once
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="statebed-hedge")
        self._inflight: set[Future[None]] = set()

    def delay(self, kind: str, opts: StoreOptions) -> float:
        if opts.hedge == "on":
            return opts.hedge_delay_s
        with self._lock:
            recent = list(self._recent[kind])
        if len(recent) < WARMUP:
            return opts.hedge_delay_s
        return min(opts.hedge_max_delay_s, max(opts.hedge_min_delay_s, percentile(recent, opts.hedge_quantile * 100)))

    def earn(self, budget: float) -> None:
        with self._lock:
            self.requests += 1
            size = bucket_size(budget)
            self._tokens = size if self._tokens is None else min(size, self._tokens + budget)

    def spend(self) -> bool:
        with self._lock:
            if self._tokens is None or self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            self.hedges += 1
            return True

    def observe(self, kind: str, seconds: float) -> None:
        with self._lock:
            self._recent[kind].append(seconds)

    def submit(self, fn: Callable[..., None], *args: object) -> Future[None]:
        fut = self._pool.submit(fn, *args)
        with self._lock:
            self._inflight.add(fut)
        fut.add_done_callback(self._done)
        return fut

    def _done(self, fut: Future[None]) -> None:
        with self._lock:
            self._inflight.discard(fut)
        if fut.cancelled():
            return
        err = fut.exception()
        outcome = "created" if err is None else "conflict" if isinstance(err, AlreadyExistsError) else "error"
        with self._lock:
            self.outcomes[outcome] += 1

    def drain(self, timeout_s: float) -> bool:
        """Wait for attempts still running (losers included); True when none is left."""
        with self._lock:
            running = set(self._inflight)
        return not wait(running, timeout=timeout_s).not_done


_SHARED: HedgeState | None = None
_SHARED_LOCK = threading.Lock()


def shared_state() -> HedgeState:
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = HedgeState()
        return _SHARED


def take_uploads(storage: Storage) -> dict[str, dict[str, Any]]:
    """The uploads `storage` (a HedgedStorage) timed since the last take, by kind; {} otherwise."""
    return storage.state.stats.take() if isinstance(storage, HedgedStorage) else {}


def hedged(storage: Storage, options: StoreOptions, state: HedgeState | None = None) -> Storage:
    """`storage` measured (and hedged per `options`); a storage already wrapped is returned as is."""
    if isinstance(storage, HedgedStorage):
        return storage
    return HedgedStorage(storage, options, state)


class HedgedStorage:
    """Delegates to `inner`; times uploads of tracked kinds and hedges create-only ones."""

    def __init__(self, inner: Storage, options: StoreOptions, state: HedgeState | None = None) -> None:
        self.inner = inner
        self.url = inner.url
        self.options = options
        self.state = state or shared_state()

    def __repr__(self) -> str:
        return f"HedgedStorage({self.inner!r}, hedge={self.options.hedge!r})"

    def display(self, path: str) -> str:
        return self.inner.display(path)

    def read(self, path: str, start: int = 0, length: int | None = None) -> bytes:
        return self.inner.read(path, start, length)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def list(self, directory: str) -> list[FileInfo]:
        return self.inner.list(directory)

    def list_dirs(self, directory: str) -> builtins.list[str]:
        return self.inner.list_dirs(directory)

    def delete(self, paths: Sequence[str]) -> None:
        self.inner.delete(paths)

    def write(self, path: str, data: bytes, *, create_only: bool = False) -> None:
        kind = kind_of(path)
        if kind is None:
            return self.inner.write(path, data, create_only=create_only)
        t0 = time.perf_counter()
        sent = won = False
        if create_only and self._hedges(kind):
            sent, won = self._hedged_write(kind, path, data)
        else:
            self.inner.write(path, data, create_only=create_only)
        seconds = time.perf_counter() - t0
        self.state.observe(kind, seconds)
        self.state.stats.record(kind, seconds, hedged=sent, won=won)
        return None

    def _hedges(self, kind: str) -> bool:
        if self.options.hedge == "off" or (kind == "snapshot" and not self.options.hedge_snapshots):
            return False
        # A server that ignores If-None-Match gets a racy exists-check: two attempts could both write.
        conditional = getattr(self.inner, "conditional_creates", None)
        return conditional is None or bool(conditional())

    def _hedged_write(self, kind: str, path: str, data: bytes) -> tuple[bool, bool]:
        """(hedge sent, hedge won). Raises what a plain create-only write would."""
        self.state.earn(self.options.hedge_budget)
        conditional = not unique_name(path)
        attempts = [self.state.submit(self._put, path, data, conditional)]
        delay = self.state.delay(kind, self.options)
        sent = not _done_within(attempts[0], delay) and self.state.spend()
        if sent:
            log.info(
                "hedging a slow upload",
                extra=kv(file=self.inner.display(path), after_s=round(delay, 3), hedges=self.state.hedges, uploads=self.state.requests),
            )
            attempts.append(self.state.submit(self._put, path, data, conditional))
        winner = self._settle(path, data, attempts)
        for f in attempts:
            f.cancel()  # a hedge still queued never starts; one running finishes and is ignored
        return sent, winner == 1

    def _put(self, path: str, data: bytes, conditional: bool) -> None:
        """One PUT attempt (a pool thread runs it, so the caller can stop waiting); create-only
        unless the name is unique to this writer (`unique_name`)."""
        self.inner.write(path, data, create_only=conditional)

    def _settle(self, path: str, data: bytes, attempts: builtins.list[Future[None]]) -> int:
        """The index of the attempt that created the object; raises if none did."""
        pending = set(attempts)
        errors: builtins.list[BaseException] = []
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=attempts.index):
                err = fut.exception()
                if err is None:
                    return attempts.index(fut)
                if not isinstance(err, StorageError):
                    raise err
                errors.append(err)
                if isinstance(err, AlreadyExistsError):  # a 412: our sibling's PUT, or someone else's file
                    mine = self._holds(path, data) if len(attempts) > 1 else False
                    if mine is False:
                        raise err
                    if mine:
                        return 1 - attempts.index(fut)
        if self._holds(path, data):  # every attempt failed ambiguously, yet our bytes landed
            log.info("an upload that failed ambiguously had landed", extra=kv(file=self.inner.display(path)))
            return 0
        # A 412 left here could not be told ours or not: the transport error is the truer answer.
        raise next((e for e in errors if not isinstance(e, AlreadyExistsError)), errors[0])

    def _holds(self, path: str, data: bytes) -> bool | None:
        """Does `path` hold exactly `data`? None when it cannot be told (missing, unreadable)."""
        try:
            return self.inner.read(path) == data
        except StatebedError:
            return None
