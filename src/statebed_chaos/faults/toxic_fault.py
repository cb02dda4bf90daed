"""The five storage faults: one toxic on the S3 proxy (Toxiproxy), added, removed, proven to have acted.

They differ only in a row of `TOXICS`: the toxic's type, its default attributes, and what a
request it acted on looks like. `FAULTS` holds one `ToxicFault` class per row.

The toxic is named `statebed-<fault id>` so concurrent storage faults never collide. Proof
comes from what the toxic did to statebed's own S3 requests, as every process of the run logs
them (`statebed_store.storage.request_log`), never from its schedule nor from the proxy: a
request that started inside the toxic's window and shows the toxic's effect (`acted_on`:
slowed by at least the latency, held until the heal, cut, throttled), at a higher rate than
the requests outside the window show it. No request log: fired=None (unknown); requests in the
window but none affected, or no request at all: fired=False.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from statebed_store.formats import PLUGIN_FORMATS, STATEBED_FORMATS
from statebed_store.storage.request_log import read_requests

from .base import Evidence, Fault, FaultContext, FaultSpec, NotApplicable

__all__ = ["FAULTS", "STREAMS", "TOXICS", "Toxic", "ToxicFault", "duration_ms", "failed", "requests_proving"]


# The directions a toxic acts on, as Toxiproxy names them, and "both": one toxic on each.
DIRECTIONS = ("upstream", "downstream")
STREAMS = (*DIRECTIONS, "both")


class ToxicFault(Fault):
    """A toxic on the proxy "s3"; subclasses set `toxic_type` and `defaults` (its attributes)."""

    formats = STATEBED_FORMATS | PLUGIN_FORMATS  # native: the JVM plug-in logs Spark's checkpoint writes (`RequestLog`)
    needs = frozenset({"s3-proxy"})
    toxic_type: ClassVar[str]
    defaults: ClassVar[dict[str, int]]
    stream: ClassVar[str]  # "downstream" (S3's answers), "upstream" (the store's requests and bodies) or "both"
    shows: ClassVar[Callable[[dict[str, int], dict[str, Any], float | None], bool]]

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._started: float | None = None  # wall-clock window of the toxic (the request log's times are wall-clock)
        self._healed: float | None = None

    @property
    def toxic_name(self) -> str:
        return f"statebed-{self.spec.id}"

    def direction(self) -> str:
        """The fault's `stream` param (upstream, downstream or both), else its kind's."""
        return str(self.spec.params.get("stream", self.stream))

    def toxic_names(self) -> dict[str, str]:
        """One toxic per direction: `statebed-<id>`, or `statebed-<id>-<stream>` for both."""
        if self.direction() == "both":
            return {s: f"{self.toxic_name}-{s}" for s in DIRECTIONS}
        return {self.direction(): self.toxic_name}

    def attributes(self) -> dict[str, int]:
        """The toxic's attributes: the defaults, overridden by the fault's params of the same name."""
        out = dict(self.defaults)
        for key in out:
            if key in self.spec.params:
                out[key] = int(self.spec.params[key])
        return out

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        if ctx.proxy is None:
            raise NotApplicable(f"{self.kind} needs the S3 proxy (storage: s3)")
        toxicity = float(self.spec.params.get("toxicity", 1.0))
        self._started, self._healed = time.time(), None
        names = self.toxic_names()
        for stream, name in names.items():
            ctx.proxy.add_toxic(name=name, type=self.toxic_type, stream=stream, toxicity=toxicity, attributes=self.attributes())
        return {
            "proxy": ctx.proxy.name,
            "toxic": self.toxic_name,
            "toxics": list(names.values()),
            "type": self.toxic_type,
            "stream": self.direction(),
            "toxicity": toxicity,
            "attributes": self.attributes(),
        }

    def heal(self, ctx: FaultContext) -> None:
        if ctx.proxy is None or self._started is None:
            return
        for name in self.toxic_names().values():
            if ctx.proxy.get_toxic(name) is not None:
                ctx.proxy.destroy_toxic(name)
        if self._healed is None:
            self._healed = time.time()

    def acted_on(self, req: dict[str, Any], healed: float | None) -> bool:
        """Whether `req` shows this toxic's effect (`healed`: when the toxic went, None outside its window)."""
        return type(self).shows(self.attributes(), req, healed)

    def evidence(self, ctx: FaultContext) -> Evidence:
        started = self._started
        if started is None:
            return Evidence(False, f"{self.kind}: never injected (its trigger was not reached)")
        end = self._healed if self._healed is not None else time.time()
        where = ctx.run.s3_requests
        requests = requests_proving(read_requests(where))
        if not requests:
            return Evidence(None, f"{self.kind}: no S3 request was logged under {where}: cannot tell whether toxic {self.toxic_name} acted")
        inside = [r for r in requests if started <= float(r["start"]) < end]
        outside = [r for r in requests if float(r["end"]) < started or float(r["start"]) >= end]
        hits = [r for r in inside if self.acted_on(r, end)]
        usual = sum(self.acted_on(r, None) for r in outside)
        window = f"toxic {self.toxic_name} active {end - started:.1f}s"
        if not hits:
            return Evidence(False, f"{self.kind}: {window}; none of the {len(inside)} S3 requests started in it shows its effect")
        if outside and usual / len(outside) >= len(hits) / len(inside):
            return Evidence(
                False,
                f"{self.kind}: {window}; {len(hits)} of {len(inside)} requests in it look affected, but as many do outside it "
                f"({usual} of {len(outside)}): not the toxic's doing",
            )
        detail = f"{self.kind}: {window}; {len(hits)} of {len(inside)} S3 requests started in it show its effect ({usual} of {len(outside)} outside)"
        return Evidence(True, detail, [dict(r, source=str(where)) for r in sample(hits)])


def requests_proving(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requests a toxic's effect is read from. When Spark's S3A client logged its own S3
    requests (level `sdk`: every request, its retries and errors, jvm/src-s3a
    S3RequestInterceptor), the checkpoint file manager's lines (level `fm`) go: they miss what
    Spark did past the manager (a check or read held by an outage left no line in its window)
    and what the SDK retried inside one call (a reset looked like a success)."""
    if any(r.get("level") == "sdk" for r in requests):
        return [r for r in requests if r.get("level") != "fm"]
    return requests


def sample(hits: list[dict[str, Any]], size: int = 20) -> list[dict[str, Any]]:
    """Up to `size` of the affected requests for the proof: the first of each op, then the rest in order."""
    firsts: dict[str, dict[str, Any]] = {}
    for r in hits:
        firsts.setdefault(str(r["op"]), r)
    chosen = list(firsts.values())[:size]
    taken = {id(r) for r in chosen}
    chosen += [r for r in hits if id(r) not in taken][: size - len(chosen)]
    return sorted(chosen, key=lambda r: float(r["start"]))


def duration_ms(req: dict[str, Any]) -> float:
    return (float(req["end"]) - float(req["start"])) * 1000.0


# S3's answers that Spark's SDK client raises as exceptions (a HEAD of a missing key is how S3A
# checks existence): answers, not failed requests.
ANSWERS = frozenset({"NoSuchKeyException", "NoSuchBucketException", "NoSuchUploadException"})


def failed(req: dict[str, Any]) -> bool:
    """Cut: the request failed (not merely answered "no such key") or its client had to send it again."""
    error = req.get("error")
    return (error is not None and error not in ANSWERS) or int(req.get("retries") or 0) > 0


def _slowed(a: dict[str, int], req: dict[str, Any], healed: float | None) -> bool:
    """Delayed: every chunk waits `latency` ms (minus the jitter), so the whole request takes at least that."""
    return duration_ms(req) >= max(a["latency"] - a["jitter"], a["latency"] / 2)


def _jittered(a: dict[str, int], req: dict[str, Any], healed: float | None) -> bool:
    """Delayed by at least the mean latency: half of the draws are, and a request waits for many chunks."""
    return duration_ms(req) >= a["latency"]


def _throttled(a: dict[str, int], req: dict[str, Any], healed: float | None) -> bool:
    """Throttled: a body big enough to take 50 ms at `rate` KB/s took at least 80 % of that."""
    size = req.get("bytes")
    if not isinstance(size, int) or size <= 0:
        return False
    expected_ms = size / (a["rate"] * 1024) * 1000.0
    return expected_ms >= 50.0 and duration_ms(req) >= 0.8 * expected_ms


def _held(a: dict[str, int], req: dict[str, Any], healed: float | None) -> bool:
    """Held: it failed, was sent again, or waited until the toxic went (outside the window: failed only)."""
    return failed(req) or (healed is not None and float(req["end"]) >= healed - 0.05)


def _cut(a: dict[str, int], req: dict[str, Any], healed: float | None) -> bool:
    """Cut: the connection was reset under it, so it failed or its client sent it again."""
    return failed(req)


@dataclass(frozen=True)
class Toxic:
    """One storage fault: its kind, the Toxiproxy toxic that makes it, and how a request it hit looks."""

    kind: str
    description: str
    toxic_type: str
    defaults: dict[str, int]
    shows: Callable[[dict[str, int], dict[str, Any], float | None], bool]
    stream: str = "downstream"


TOXICS: tuple[Toxic, ...] = (
    Toxic(
        "storage-latency",
        "every chunk between the store and S3 is delayed by latency ms (params: latency, jitter, stream, toxicity)",
        "latency",
        {"latency": 200, "jitter": 0},
        _slowed,
    ),
    Toxic(
        "storage-jitter",
        "every chunk is delayed by latency +- jitter ms, drawn per chunk (params: latency, jitter, stream, toxicity)",
        "latency",
        {"latency": 100, "jitter": 100},
        _jittered,
    ),
    Toxic(
        "storage-bandwidth",
        "traffic between the store and S3 is throttled to rate KB/s, both ways (params: rate, stream, toxicity)",
        "bandwidth",
        {"rate": 64},
        _throttled,
        # both ways: a store's steady traffic is uploads, and its answers are small, so a limit on
        # S3's answers alone touched nothing in most runs (the catalogue: 10 of 14 cells unknown)
        "both",
    ),
    # A `timeout` toxic with timeout 0, not a disabled proxy: a disabled proxy refuses connections
    # at once (the client fails fast with "connection refused", a different fault), while an
    # outage leaves requests hanging until the client's own timeouts fire, as a partitioned or
    # overloaded S3 does; removing the toxic closes what it held.
    Toxic(
        "storage-outage",
        "S3 stops answering: nothing passes until the fault heals, then the held connections close (params: timeout, stream, toxicity)",
        "timeout",
        {"timeout": 0},
        _held,
    ),
    Toxic(
        "storage-reset",
        "connections to S3 are aborted with a TCP RST after timeout ms, 0: at once (params: timeout, stream, toxicity)",
        "reset_peer",
        {"timeout": 0},
        _cut,
    ),
)


def _fault_class(toxic: Toxic) -> type[ToxicFault]:
    name = "".join(part.title() for part in toxic.kind.split("-"))
    attrs = {
        "kind": toxic.kind,
        "description": toxic.description,
        "toxic_type": toxic.toxic_type,
        "defaults": dict(toxic.defaults),
        "stream": toxic.stream,
        "shows": staticmethod(toxic.shows),
        "__doc__": f"`{toxic.kind}`: {toxic.description}",
        "__module__": __name__,
    }
    return type(name, (ToxicFault,), attrs)


FAULTS: dict[str, type[ToxicFault]] = {t.kind: _fault_class(t) for t in TOXICS}
