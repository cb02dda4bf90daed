"""Toxics as Toxiproxy (v2) defines them: a type, a stream, a toxicity and typed attributes.

Only the toxics the storage faults use exist here, plus `tail_latency` (ours: a heavy-tailed
latency with rare stalls, for the hedging benchmark); an unknown type or a bad attribute is a
`ToxicError` (the API answers 400). Defaults and units follow Toxiproxy's README: times in ms,
`bandwidth.rate` in KB/s (1000 bytes), `limit_data.bytes` in bytes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["STREAMS", "TYPES", "Toxic", "ToxicError", "ToxicSet", "parse_toxic"]

STREAMS = ("upstream", "downstream")  # upstream: client -> server, downstream: server -> client
TYPES: dict[str, dict[str, int]] = {  # type -> attribute defaults (all integers, like Toxiproxy)
    "latency": {"latency": 0, "jitter": 0},
    # Ours, not Toxiproxy's: latency ± jitter, plus a heavy tail (Pareto, shape 2, scale `tail` ms)
    # and a stall of `stall` ms on `stall_permille` of the chunks: storage shaped like seed 001's S3.
    "tail_latency": {"latency": 0, "jitter": 0, "tail": 0, "stall": 0, "stall_permille": 0},
    "bandwidth": {"rate": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "limit_data": {"bytes": 0},
}


class ToxicError(ValueError):
    """A toxic the API cannot accept (one line, said to the client with status 400)."""


@dataclass
class Toxic:
    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int]
    created: float = field(default_factory=time.monotonic)  # connections opened after this are "fresh"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "stream": self.stream, "toxicity": self.toxicity, "attributes": dict(self.attributes)}

    def attr(self, key: str) -> int:
        return self.attributes[key]


def _attributes(kind: str, given: object, base: dict[str, int]) -> dict[str, int]:
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ToxicError("attributes must be an object")
    out = dict(base)
    for key, value in given.items():
        if key not in out:
            raise ToxicError(f"unknown attribute {key!r} for toxic type {kind}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ToxicError(f"attribute {key} must be a non-negative number, got {value!r}")
        out[key] = int(value)
    return out


def _toxicity(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ToxicError(f"toxicity must be a number in [0, 1], got {value!r}")
    return float(value)


def parse_toxic(body: object, existing: Toxic | None = None) -> Toxic:
    """A new toxic from a POST body, or `existing` updated by one (attributes merged)."""
    if not isinstance(body, dict):
        raise ToxicError("bad request body: expected a JSON object")
    if existing is not None:
        attrs = _attributes(existing.type, body.get("attributes"), existing.attributes)
        tox = _toxicity(body.get("toxicity", existing.toxicity))
        return Toxic(existing.name, existing.type, existing.stream, tox, attrs, existing.created)
    kind = body.get("type")
    if kind not in TYPES:
        raise ToxicError(f"invalid toxic type {kind!r}; known: {', '.join(TYPES)}")
    stream = body.get("stream", "downstream") or "downstream"
    if stream not in STREAMS:
        raise ToxicError(f"stream must be upstream or downstream, got {stream!r}")
    name = body.get("name") or f"{kind}_{stream}"
    if not isinstance(name, str):
        raise ToxicError("toxic name must be a string")
    return Toxic(
        name, str(kind), str(stream), _toxicity(body.get("toxicity", 1.0)), _attributes(str(kind), body.get("attributes"), TYPES[str(kind)])
    )


class ToxicSet:
    """A proxy's toxics in insertion order; connections read a snapshot per chunk, so changes act at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._toxics: dict[str, Toxic] = {}

    def all(self) -> list[Toxic]:
        with self._lock:
            return list(self._toxics.values())

    def get(self, name: str) -> Toxic | None:
        with self._lock:
            return self._toxics.get(name)

    def add(self, toxic: Toxic) -> bool:
        with self._lock:
            if toxic.name in self._toxics:
                return False
            self._toxics[toxic.name] = toxic
            return True

    def replace(self, toxic: Toxic) -> None:
        with self._lock:
            self._toxics[toxic.name] = toxic

    def remove(self, name: str) -> bool:
        with self._lock:
            return self._toxics.pop(name, None) is not None

    def clear(self) -> None:
        with self._lock:
            self._toxics.clear()
