"""The ingest service's event schema: what a client may post, checked before anything lands.

An event is `{"key": int, "value": int}` (64-bit signed, no other fields). A request is one
event, or a batch `{"events": [event, ...]}` of 1..`max_batch` events. Every rejection is a
`Rejected` with the HTTP status and a reason naming the offending field, so a client can
fix its request; nothing of a rejected request lands. JSON nested deeper than MAX_DEPTH is
refused (400) before it is parsed: the schema needs 3 levels, and Python's parser would
otherwise recurse until it fails.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

import pyarrow as pa

__all__ = ["EVENT_FIELDS", "MAX_DEPTH", "Rejected", "parse_events"]

EVENT_FIELDS = ("key", "value")
MAX_DEPTH = 16
_INT64 = (-(2**63), 2**63 - 1)
# A JSON string, escapes included; an unterminated one runs to the end. Possessive and always
# matching from a quote, so the scan is linear whatever the body (no retry from escaped quotes).
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [{ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}.get(b, 0) for b in range(256)]


class Rejected(Exception):
    """A request the service refuses: `status` (4xx) and a one-line `reason`."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def parse_events(body: bytes, *, batch: bool, max_batch: int) -> pa.Table:
    """The events of a request body as a table of (key, value); raises Rejected."""
    _check_depth(body)
    try:
        doc = json.loads(body, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError) as e:
        raise Rejected(400, f"malformed JSON: {e}") from None
    events = _batch(doc, max_batch) if batch else [doc]
    keys, values = [], []
    for i, event in enumerate(events):
        where = f"events[{i}]" if batch else "event"
        keys.append(_field(event, "key", where))
        values.append(_field(event, "value", where))
        unknown = sorted(set(event) - set(EVENT_FIELDS))
        if unknown:
            raise Rejected(422, f"{where}: unknown field(s) {unknown} (an event has exactly {list(EVENT_FIELDS)})")
    return pa.table({"key": pa.array(keys, pa.int64()), "value": pa.array(values, pa.int64())})


def _check_depth(body: bytes) -> None:
    """Rejected(400) if brackets outside strings open more than MAX_DEPTH levels (C-speed steps:
    a hostile 1 MiB body costs milliseconds, not a Python loop per byte)."""
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKET)
    if brackets and max(accumulate(map(_STEP.__getitem__, brackets))) > MAX_DEPTH:
        raise Rejected(400, f"malformed JSON: nested deeper than {MAX_DEPTH} levels")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _batch(doc: Any, max_batch: int) -> list[Any]:
    if not isinstance(doc, dict) or set(doc) != {"events"}:
        raise Rejected(422, 'a batch is {"events": [...]} and nothing else')
    events = doc["events"]
    if not isinstance(events, list) or not events:
        raise Rejected(422, "events: expected a non-empty list")
    if len(events) > max_batch:
        raise Rejected(413, f"events: {len(events)} events, at most {max_batch} per batch")
    return events


def _field(event: Any, name: str, where: str) -> int:
    if not isinstance(event, dict):
        raise Rejected(422, f"{where}: expected an object, got {type(event).__name__}")
    if name not in event:
        raise Rejected(422, f"{where}: missing field {name!r}")
    v = event[name]
    if not isinstance(v, int) or isinstance(v, bool):
        raise Rejected(422, f"{where}.{name}: expected an integer, got {type(v).__name__}")
    if not _INT64[0] <= v <= _INT64[1]:
        raise Rejected(422, f"{where}.{name}: {v} is outside 64-bit integers")
    return v
