"""Named failpoints (FreeBSD fail(9) / gofail grammar), off by default and free when off.

Arm from the environment (`STATEBED_FAILPOINTS`, seeded by `STATEBED_FAILPOINTS_SEED`),
from Python (`arm`, `armed`, `configure`), or at runtime in running processes through a
control file (`STATEBED_FAILPOINTS_CONTROL=<dir>/control.json`, written by
`Control(path).arm(...)`; see `failpoint_control`). A spec is `name=term[->term...]`
entries joined by `;`:

    term   := ["["<filter>"]"][<pct>%][<count>*]<action>[(<arg>)]
    filter := key=int[,key=int...]     keys: batch, partition, attempt
    action := off | delay(ms) | sleep(ms) | hold(ms) | drop | error[(message)] | exit[(code)]

Terms are tried left to right: a term whose task filter does not match the hitting thread's
`task_context` (every listed key equal) or whose count is used up is skipped without a
roll; one whose probability roll misses passes to the next; the first that fires decides.
`hold(ms)` blocks the caller until a controller calls `Control(path).release(name)` (every
hold of that point started before the release ends) or `ms` elapses (at most
`MAX_HOLD_MS`); it polls the control file, so without one it simply waits `ms`. Counts
are per process: aim at one attempt with a filter, e.g. `[batch=3,partition=1,attempt=0]1*error`.
Examples:
`snapshot.upload=30%delay(2000)` (30% of uploads wait 2 s), `changelog.upload.after=1*error`
(the first commit fails after its changelog is durable), `snapshot.upload.before=drop`
(snapshots are silently never uploaded). Each call site documents what `drop` skips.
Rolls come from a per-point RNG seeded by the seed and the point's name: a run is
reproducible for a given seed and order of hits.

The store knows only its own points (`KNOWN_POINTS`); layers above add theirs with
`register` at import. An environment spec naming a point nobody registered yet waits for
its registration; `check_known()` turns what is still unknown into a usage error.
With a control file, every firing is appended to `<dir>/fired-<host>-<pid>-<started>.jsonl` (`firing_file`) before it acts;
a hold appends a second record when it ends (action "released" or "hold-timeout").
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statebed_base import procfs
from statebed_base.errors import CorruptFileError, InjectedFault, NotRegularFileError, UsageError
from statebed_base.jsonsafe import loads_strict
from statebed_base.localfs import append_line
from statebed_base.log import get_logger, kv

from .config import env
from .failpoint_control import Control, firing_file  # the controller side, re-exported here
from .failpoint_spec import KNOWN_POINTS, Term, canonical, parse_spec, parse_terms
from .failpoint_spec import entries as spec_entries

__all__ = [
    "CONTROL_ENV",
    "KNOWN_POINTS",
    "Control",
    "arm",
    "armed",
    "check_known",
    "configure",
    "control_version",
    "disarm",
    "hit",
    "parse_spec",
    "register",
    "stats",
    "task_context",
    "use_control",
]

log = get_logger("failpoints")

CONTROL_ENV = "STATEBED_FAILPOINTS_CONTROL"
CONTROL_POLL_S = 0.1  # a process stats its control file at most this often, and only when a point is hit


@dataclass
class _Point:
    name: str
    terms: list[Term]
    rng: random.Random
    source: str = "api"  # "api", "env" or "control"
    spec: str = ""  # the terms as armed (a control update keeps a point whose spec and seed are unchanged)
    seed: int = 0
    hits: int = 0
    fired: dict[str, int] = field(default_factory=dict)


_LOCK = threading.Lock()
_ARMED: dict[str, _Point] = {}
_PENDING: dict[str, str] = {}  # env entries naming points not registered (yet) in this process
_SEED = 0
_TASK: ContextVar[dict[str, int] | None] = ContextVar("statebed_failpoint_task", default=None)


def _is_off(terms: list[Term]) -> bool:
    return all(t.action == "off" for t in terms)


def _point(name: str, terms: list[Term], source: str, seed: int) -> _Point:
    rng = random.Random(seed * 1_000_003 + zlib.crc32(name.encode()))
    return _Point(name, terms, rng, source, "->".join(t.describe() for t in terms), seed)


def register(name: str, doc: str) -> None:
    """Add a failpoint owned by a layer above the store (the job registers its driver's points).

    An environment spec that named it before it was registered arms it now."""
    with _LOCK:
        KNOWN_POINTS[name] = doc
        pending = _PENDING.pop(name, None)
    if pending is not None:
        terms = parse_terms(name, pending)
        if not _is_off(terms):
            with _LOCK:
                _ARMED[name] = _point(name, terms, "env", _SEED)


def check_known() -> None:
    """Fail on environment entries naming a point no module registered (call once all are imported)."""
    if _PENDING:
        name = sorted(_PENDING)[0]
        raise UsageError(f"STATEBED_FAILPOINTS: unknown failpoint {name!r}; known: {', '.join(sorted(KNOWN_POINTS))}")


def arm(name: str, terms: str) -> None:
    """Arm one failpoint, replacing what it had (`off` disarms)."""
    canon = canonical(name)
    parsed = parse_terms(canon, terms)
    with _LOCK:
        if _is_off(parsed):
            _ARMED.pop(canon, None)
        else:
            _ARMED[canon] = _point(canon, parsed, "api", _SEED)


def disarm(name: str | None = None) -> None:
    """Disarm one point, or every point armed in this process (a control file may arm them again)."""
    with _LOCK:
        if name is None:
            _ARMED.clear()
            _PENDING.clear()
        else:
            _ARMED.pop(canonical(name), None)


def configure(spec: str, seed: int = 0, *, source: str = "api") -> None:
    """Replace every armed failpoint by `spec` (the environment variable's grammar).

    With `source="env"`, names not registered yet wait for `register` instead of failing."""
    global _SEED
    entries = spec_entries(spec)
    known = {n: parse_terms(n, t) for n, t in entries if n in KNOWN_POINTS} if source == "env" else parse_spec(spec)
    with _LOCK:
        _SEED = seed
        _ARMED.clear()
        _PENDING.clear()
        _PENDING.update({n: t for n, t in entries if n not in known})
        for name, terms in known.items():
            if not _is_off(terms):
                _ARMED[name] = _point(name, terms, source, seed)


@contextlib.contextmanager
def armed(name: str, terms: str) -> Iterator[None]:
    """Arm for the duration of a `with` block (tests, experiments)."""
    arm(name, terms)
    try:
        yield
    finally:
        disarm(name)


@contextlib.contextmanager
def task_context(**fields: int) -> Iterator[None]:
    """Name the task attempt (batch, partition, attempt) that this thread's firings belong to."""
    token = _TASK.set(dict(fields))
    try:
        yield
    finally:
        _TASK.reset(token)


def stats() -> dict[str, dict[str, object]]:
    with _LOCK:
        return {n: {"spec": p.spec, "source": p.source, "hits": p.hits, "fired": dict(p.fired)} for n, p in _ARMED.items()}


class _ControlReader:
    """This process's view of a control file: re-read when its identity changes, applied by version."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.version = 0
        self.released: dict[str, int] = {}  # point -> how many times a controller released its holds
        self._key: tuple[int, int, int] | None = None
        self._next_poll = 0.0
        self._busy = threading.Lock()

    def poll(self) -> None:
        now = time.monotonic()
        if now < self._next_poll or not self._busy.acquire(blocking=False):
            return
        try:
            self._next_poll = now + CONTROL_POLL_S
            try:
                st = os.stat(self.path)
            except OSError:
                return
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            if key != self._key:
                self._key = key
                self._load()
        finally:
            self._busy.release()

    def _load(self) -> None:
        try:
            doc = loads_strict(self.path.read_bytes(), file=str(self.path), what="failpoint control file")
            version, seed, points = int(doc["version"]), int(doc.get("seed", 0)), dict(doc["points"])
            released = {str(k): int(v) for k, v in dict(doc.get("released", {})).items()}
        except (OSError, CorruptFileError, ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("failpoint control file unreadable; keeping the current arming", extra=kv(file=str(self.path), error=str(e)))
            return
        if version > self.version:
            _apply_control(points, seed, self.path)
            self.released = released
            self.version = version

    def released_now(self, name: str) -> int:
        """The release counter of `name` as the file says right now (a hold's baseline; unthrottled)."""
        try:
            doc = loads_strict(self.path.read_bytes(), file=str(self.path), what="failpoint control file")
            return int(dict(doc.get("released", {})).get(name, 0))
        except (OSError, CorruptFileError, ValueError, TypeError, AttributeError):
            return self.released.get(name, 0)

    def hold(self, point: _Point, term: Term, hits: int) -> None:
        """Record the hold, block until `point` is released after that or its bound elapses, record how it ended.

        The baseline is read before the start is recorded: a controller that releases on seeing
        the record always ends this hold."""
        baseline = self.released_now(point.name)
        self.record(point, term, hits)
        start = time.monotonic()
        deadline = start + int(term.arg or 0) / 1000.0
        while True:
            self.poll()
            if self.released.get(point.name, 0) > baseline:
                outcome = "released"
                break
            left = deadline - time.monotonic()
            if left <= 0:
                outcome = "hold-timeout"
                break
            time.sleep(min(max(CONTROL_POLL_S, 0.005), left))
        self.record(point, term, hits, action=outcome, held_s=round(time.monotonic() - start, 3))

    def record(self, point: _Point, term: Term, hits: int, action: str | None = None, **extra: object) -> None:
        """Append one firing, one write(2) on an O_APPEND file, before the action runs."""
        name = point.name
        rec = {
            "time": round(time.time(), 6),
            "failpoint": name,
            "action": action or (term.action if term.arg is None else f"{term.action}({term.arg})"),
            "spec": point.spec,
            "pid": (pid := os.getpid()),
            "host": (host := os.environ.get("SPARK_LOCAL_IP") or socket.gethostname()),
            "started": (started := _started(pid)),
            "task": _TASK.get(),
            "hit": hits,
            "control_version": self.version,
            **extra,
        }
        path = self.path.parent / firing_file(host, pid, started)
        try:
            append_line(path, json.dumps(rec).encode())
        except (OSError, NotRegularFileError) as e:
            log.warning("cannot record a failpoint firing", extra=kv(file=str(path), failpoint=name, error=str(e)))


_STARTED: dict[int, int | None] = {}  # pid -> its start time (a fork is a new pid)


def _started(pid: int) -> int | None:
    if pid not in _STARTED:
        found = procfs.stat(pid)
        _STARTED[pid] = None if found is None else found[2]
    return _STARTED[pid]


def _apply_control(points: dict[str, Any], seed: int, path: Path) -> None:
    """Make the control-armed points exactly `points` (names not registered here are not ours)."""
    wanted: dict[str, list[Term]] = {}
    for name, text in points.items():
        if name not in KNOWN_POINTS:
            continue
        try:
            wanted[name] = parse_terms(name, str(text))
        except UsageError as e:
            log.warning("bad failpoint in control file; ignored", extra=kv(file=str(path), error=str(e)))
    with _LOCK:
        for name in [n for n, p in _ARMED.items() if p.source == "control" and n not in wanted]:
            del _ARMED[name]
        for name, terms in wanted.items():
            old = _ARMED.get(name)
            spec = "->".join(t.describe() for t in terms)
            if old is not None and old.source == "control" and (old.spec, old.seed) == (spec, seed):
                continue  # unchanged: keep its counts and RNG
            if _is_off(terms):
                _ARMED.pop(name, None)
            else:
                _ARMED[name] = _point(name, terms, "control", seed)


_CONTROL: _ControlReader | None = None


def use_control(path: str | os.PathLike[str] | None) -> str | None:
    """Follow the control file at `path` in this process (None: stop); returns the previous path."""
    global _CONTROL
    previous = None if _CONTROL is None else str(_CONTROL.path)
    if path is None:
        _CONTROL = None
    elif previous != str(Path(path).absolute()):
        _CONTROL = _ControlReader(Path(path).absolute())
    return previous


def control_version() -> int | None:
    """The control file version this process applied (None: it follows no control file)."""
    control = _CONTROL
    return None if control is None else control.version


def hit(name: str) -> bool:
    """Evaluate failpoint `name`; True means the caller must skip its operation (`drop`)."""
    control = _CONTROL
    if not _ARMED and control is None:  # the common case: one dict truth test
        return False
    if control is not None:
        control.poll()
    point = _ARMED.get(name)
    if point is None:
        return False
    with _LOCK:
        point.hits += 1
        chosen = None
        task = _TASK.get()
        for term in point.terms:
            if not term.matches(task) or (term.count is not None and term.count <= 0):
                continue
            if term.pct < 100.0 and point.rng.random() * 100.0 >= term.pct:
                continue
            if term.count is not None:
                term.count -= 1
            chosen = term
            point.fired[term.action] = point.fired.get(term.action, 0) + 1
            break
        hits = point.hits
    if chosen is None or chosen.action == "off":
        return False
    if chosen.action == "hold" and control is not None:
        control.hold(point, chosen, hits)  # records its start and its end
        return False
    if control is not None:
        control.record(point, chosen, hits)
    if chosen.action in ("delay", "hold"):  # a hold with no control file: nobody can release it
        time.sleep(int(chosen.arg or 0) / 1000.0)
        return False
    if chosen.action == "drop":
        return True
    if chosen.action == "exit":
        os._exit(int(chosen.arg or 1))
    raise InjectedFault(f"failpoint {name} fired: {chosen.arg or 'injected error'}")


def _from_env() -> None:
    spec = env("STATEBED_FAILPOINTS")
    if spec:
        seed_text = env("STATEBED_FAILPOINTS_SEED", "0")
        if not seed_text.lstrip("-").isdigit():
            raise UsageError(f"STATEBED_FAILPOINTS_SEED must be an integer, got {seed_text!r}")
        configure(spec, int(seed_text), source="env")
    if env(CONTROL_ENV):
        use_control(env(CONTROL_ENV))


_from_env()
