"""Named failpoints (FreeBSD fail(9) / gofail grammar), off by default and free when off.

Arm from the environment (`STATEBED_FAILPOINTS`, seeded by `STATEBED_FAILPOINTS_SEED`)
or from Python (`arm`, `armed`). A spec is `name=term[->term...]` entries joined by `;`:

    term   := [<pct>%][<count>*]<action>[(<arg>)]
    action := off | delay(ms) | sleep(ms) | drop | error[(message)] | exit[(code)]

Terms are tried left to right: a term whose count is used up is skipped, one whose
probability roll misses passes to the next; the first that fires decides. Examples:
`snapshot.upload=30%delay(2000)` (30% of uploads wait 2 s), `changelog.upload.after=1*error`
(the first commit fails after its changelog is durable), `snapshot.upload.before=drop`
(snapshots are silently never uploaded). Each call site documents what `drop` skips.
Rolls come from a per-point RNG seeded by the seed and the point's name: a run is
reproducible for a given seed and order of hits.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from .config import env
from .errors import InjectedFault, UsageError

__all__ = ["KNOWN_POINTS", "arm", "armed", "configure", "disarm", "hit", "parse_spec", "stats"]

# Every failpoint in statebed, in one place (aliases map to their canonical name).
KNOWN_POINTS: dict[str, str] = {
    "changelog.upload.before": "before a changelog is written to checkpoint storage (drop: skip the write)",
    "changelog.upload.after": "after a changelog is durable, before commit returns (drop: no effect)",
    "snapshot.upload.before": "before a queued snapshot is uploaded (drop: skip this snapshot)",
    "snapshot.upload.after": "after a snapshot zip is uploaded (drop: no effect)",
    "commitlog.write.before": "before commits/<batchId> is written (drop: skip the write)",
    "driver.sink.before": "job driver: after the commit log, before the sink output (drop: skip the sink write)",
    "driver.batch.end": "job driver: after the sink output, before Spark records the batch (drop: no effect)",
}
_ALIASES = {"snapshot.upload": "snapshot.upload.before", "changelog.upload": "changelog.upload.before"}

_TERM = re.compile(
    r"^(?:(?P<pct>\d+(?:\.\d+)?)%)?(?:(?P<count>\d+)\*)?(?P<action>off|delay|sleep|drop|error|exit)(?:\((?P<arg>[^()]*)\))?$"
)


@dataclass
class _Term:
    action: str
    pct: float = 100.0
    count: int | None = None
    arg: str | None = None

    def describe(self) -> str:
        pct = "" if self.pct == 100.0 else f"{self.pct:g}%"
        count = "" if self.count is None else f"{self.count}*"
        arg = "" if self.arg is None else f"({self.arg})"
        return f"{pct}{count}{self.action}{arg}"


@dataclass
class _Point:
    name: str
    terms: list[_Term]
    rng: random.Random
    hits: int = 0
    fired: dict[str, int] = field(default_factory=dict)


_LOCK = threading.Lock()
_ARMED: dict[str, _Point] = {}
_SEED = 0


def _canonical(name: str) -> str:
    name = _ALIASES.get(name.strip(), name.strip())
    if name not in KNOWN_POINTS:
        raise UsageError(f"unknown failpoint {name!r}; known: {', '.join(sorted(KNOWN_POINTS))}")
    return name


def _parse_terms(name: str, text: str) -> list[_Term]:
    terms = []
    for raw in text.split("->"):
        m = _TERM.match(raw.strip())
        if not m:
            raise UsageError(f"failpoint {name}: cannot parse term {raw.strip()!r} (expected e.g. 30%delay(2000), 1*error, drop)")
        pct = float(m.group("pct")) if m.group("pct") else 100.0
        if not 0 <= pct <= 100:
            raise UsageError(f"failpoint {name}: probability {pct}% out of range")
        action, arg = m.group("action"), m.group("arg")
        if action == "sleep":
            action = "delay"
        if action == "delay" and (arg is None or not arg.strip().isdigit()):
            raise UsageError(f"failpoint {name}: delay needs milliseconds, e.g. delay(2000)")
        if action == "exit" and arg is not None and not arg.strip().isdigit():
            raise UsageError(f"failpoint {name}: exit takes an integer code")
        terms.append(_Term(action, pct, int(m.group("count")) if m.group("count") else None, arg))
    return terms


def parse_spec(spec: str) -> dict[str, list[_Term]]:
    """Parse `name=terms;name=terms` (empty entries ignored); errors name the bad part."""
    out: dict[str, list[_Term]] = {}
    for entry in re.split(r"[;\n]", spec):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, terms = entry.partition("=")
        if not sep:
            raise UsageError(f"failpoint entry {entry!r} needs the form name=action")
        canon = _canonical(name)
        out[canon] = _parse_terms(canon, terms)
    return out


def _rng(name: str) -> random.Random:
    return random.Random(_SEED * 1_000_003 + zlib.crc32(name.encode()))


def arm(name: str, terms: str) -> None:
    """Arm one failpoint, replacing what it had (`off` disarms)."""
    canon = _canonical(name)
    parsed = _parse_terms(canon, terms)
    with _LOCK:
        if all(t.action == "off" for t in parsed):
            _ARMED.pop(canon, None)
        else:
            _ARMED[canon] = _Point(canon, parsed, _rng(canon))


def disarm(name: str | None = None) -> None:
    with _LOCK:
        if name is None:
            _ARMED.clear()
        else:
            _ARMED.pop(_canonical(name), None)


def configure(spec: str, seed: int = 0) -> None:
    """Replace every armed failpoint by `spec` (the environment variable's grammar)."""
    global _SEED
    parsed = parse_spec(spec)
    with _LOCK:
        _SEED = seed
        _ARMED.clear()
        for name, terms in parsed.items():
            if not all(t.action == "off" for t in terms):
                _ARMED[name] = _Point(name, terms, _rng(name))


@contextlib.contextmanager
def armed(name: str, terms: str) -> Iterator[None]:
    """Arm for the duration of a `with` block (tests, experiments)."""
    arm(name, terms)
    try:
        yield
    finally:
        disarm(name)


def stats() -> dict[str, dict[str, object]]:
    with _LOCK:
        return {n: {"spec": "->".join(t.describe() for t in p.terms), "hits": p.hits, "fired": dict(p.fired)} for n, p in _ARMED.items()}


def hit(name: str) -> bool:
    """Evaluate failpoint `name`; True means the caller must skip its operation (`drop`)."""
    if not _ARMED:  # the common case: one dict truth test
        return False
    point = _ARMED.get(name)
    if point is None:
        return False
    with _LOCK:
        point.hits += 1
        chosen = None
        for term in point.terms:
            if term.count is not None and term.count <= 0:
                continue
            if term.pct < 100.0 and point.rng.random() * 100.0 >= term.pct:
                continue
            if term.count is not None:
                term.count -= 1
            chosen = term
            point.fired[term.action] = point.fired.get(term.action, 0) + 1
            break
    if chosen is None or chosen.action == "off":
        return False
    if chosen.action == "delay":
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
        configure(spec, int(seed_text))


_from_env()
