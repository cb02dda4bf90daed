"""The failpoint spec grammar: the known points, their aliases, and parsing `name=terms;...`
(the grammar is described in `failpoints`). Both sides of a failpoint use it: the processes
that hit points (`failpoints`) and the controller that arms them (`failpoint_control`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from statebed_base.errors import UsageError

__all__ = ["FILTER_KEYS", "KNOWN_POINTS", "MAX_HOLD_MS", "Term", "canonical", "entries", "parse_spec", "parse_terms"]

MAX_HOLD_MS = 600_000  # a hold never outlives this, released or not
FILTER_KEYS = ("batch", "partition", "attempt")

# The store's failpoints (aliases map to their canonical name); `register` adds others.
KNOWN_POINTS: dict[str, str] = {
    "changelog.upload.before": "before a changelog is written to checkpoint storage (drop: skip the write)",
    "changelog.upload.after": "after a changelog is durable, before commit returns (drop: no effect)",
    "snapshot.upload.before": "before a queued snapshot is uploaded (drop: skip this snapshot)",
    "snapshot.upload.after": "after a snapshot zip is uploaded (drop: no effect)",
    "commitlog.write.before": "before commits/<batchId> is written (drop: skip the write)",
    "commit.identity.before": "after a commit's changelog is durable, before the instance records its identity (drop: no effect)",
    "commit.identity.after": "after the instance recorded its identity, before held.json is written (drop: no effect)",
    "lend.copy.before": "a lender's desk, before it copies its instance for a borrower (drop: no effect)",
    "lend.reply.before": "a lender's desk, after the copy is made, before it answers (drop: no effect)",
}
_ALIASES = {"snapshot.upload": "snapshot.upload.before", "changelog.upload": "changelog.upload.before"}

_TERM = re.compile(
    r"^(?:\[(?P<filter>[^\[\]]*)\])?(?:(?P<pct>\d+(?:\.\d+)?)%)?(?:(?P<count>\d+)\*)?"
    r"(?P<action>off|delay|sleep|hold|drop|error|exit)(?:\((?P<arg>[^()]*)\))?$"
)
_FILTER_ITEM = re.compile(r"^(?P<key>[a-z]+)=(?P<value>\d+)$")


@dataclass
class Term:
    action: str
    pct: float = 100.0
    count: int | None = None
    arg: str | None = None
    task: dict[str, int] | None = None  # the task filter: every key must equal the thread's task context

    def describe(self) -> str:
        task = "" if self.task is None else "[" + ",".join(f"{k}={v}" for k, v in self.task.items()) + "]"
        pct = "" if self.pct == 100.0 else f"{self.pct:g}%"
        count = "" if self.count is None else f"{self.count}*"
        arg = "" if self.arg is None else f"({self.arg})"
        return f"{task}{pct}{count}{self.action}{arg}"

    def matches(self, task: dict[str, int] | None) -> bool:
        if self.task is None:
            return True
        return task is not None and all(task.get(k) == v for k, v in self.task.items())


def canonical(name: str) -> str:
    name = _ALIASES.get(name.strip(), name.strip())
    if name not in KNOWN_POINTS:
        raise UsageError(f"unknown failpoint {name!r}; known: {', '.join(sorted(KNOWN_POINTS))}")
    return name


def _parse_filter(name: str, text: str) -> dict[str, int]:
    """`batch=3,partition=1` as {key: value} in FILTER_KEYS order; errors name the point."""
    found: dict[str, int] = {}
    for item in text.split(","):
        m = _FILTER_ITEM.match(item.strip())
        if not m or m.group("key") not in FILTER_KEYS or m.group("key") in found:
            raise UsageError(
                f"failpoint {name}: bad task filter [{text}] (expected e.g. [batch=3,partition=1,attempt=0]: "
                f"keys {', '.join(FILTER_KEYS)} once each, integer values)"
            )
        found[m.group("key")] = int(m.group("value"))
    return {k: found[k] for k in FILTER_KEYS if k in found}


def parse_terms(name: str, text: str) -> list[Term]:
    terms = []
    for raw in text.split("->"):
        m = _TERM.match(raw.strip())
        if not m:
            raise UsageError(
                f"failpoint {name}: cannot parse term {raw.strip()!r} (expected e.g. 30%delay(2000), 1*error, drop, [batch=2]hold(60000))"
            )
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
        if action == "hold" and (arg is None or not arg.strip().isdigit() or not 0 < int(arg) <= MAX_HOLD_MS):
            raise UsageError(f"failpoint {name}: hold needs a bound in milliseconds, 1..{MAX_HOLD_MS}, e.g. hold(60000)")
        task = None if m.group("filter") is None else _parse_filter(name, m.group("filter"))
        terms.append(Term(action, pct, int(m.group("count")) if m.group("count") else None, arg, task))
    return terms


def entries(spec: str) -> list[tuple[str, str]]:
    """`name=terms;name=terms` as (name with aliases resolved, terms) pairs; names unchecked."""
    out = []
    for entry in re.split(r"[;\n]", spec):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, terms = entry.partition("=")
        if not sep:
            raise UsageError(f"failpoint entry {entry!r} needs the form name=action")
        out.append((_ALIASES.get(name.strip(), name.strip()), terms))
    return out


def parse_spec(spec: str) -> dict[str, list[Term]]:
    """Parse `name=terms;name=terms` (empty entries ignored); errors name the bad part."""
    return {canonical(name): parse_terms(name, terms) for name, terms in entries(spec)}
