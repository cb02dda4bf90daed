"""What the storage faults share: add one toxic to the S3 proxy, remove it, prove it acted.

The toxic is named `statebed-<fault id>` so concurrent storage faults never collide and each
one's acts can be told apart in the proxy's record. Proof (fired=True): the record shows the
toxic acting, inside the fault's window, on a request in flight: data held, delayed, throttled
or cut (`bytes` > 0), or a connection opened while the toxic existed (a client trying to reach
S3). Acts on idle pooled connections alone prove nothing (fired=False). With a real Toxiproxy
there is no record: fired=None (unknown), never a guess.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from statebed_base.jsonsafe import loads_strict

from statebed_store.formats import STATEBED_FORMATS

from .base import Evidence, Fault, FaultContext, FaultSpec, NotApplicable

__all__ = ["ToxicFault"]


class ToxicFault(Fault):
    """A toxic on the proxy "s3"; subclasses set `toxic_type` and `defaults` (its attributes)."""

    modes = STATEBED_FORMATS  # native Spark has no s3a jars on this machine
    needs = frozenset({"s3-proxy"})
    toxic_type: ClassVar[str]
    defaults: ClassVar[dict[str, int]]

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._started: float | None = None  # wall-clock window of the toxic (the record's times are wall-clock)
        self._healed: float | None = None

    @property
    def toxic_name(self) -> str:
        return f"statebed-{self.spec.id}"

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
        stream = str(self.spec.params.get("stream", "downstream"))
        toxicity = float(self.spec.params.get("toxicity", 1.0))
        self._started, self._healed = time.time(), None
        ctx.proxy.add_toxic(name=self.toxic_name, type=self.toxic_type, stream=stream, toxicity=toxicity, attributes=self.attributes())
        return {
            "proxy": ctx.proxy.name,
            "toxic": self.toxic_name,
            "type": self.toxic_type,
            "stream": stream,
            "toxicity": toxicity,
            "attributes": self.attributes(),
        }

    def heal(self, ctx: FaultContext) -> None:
        if ctx.proxy is None or self._started is None:
            return
        if ctx.proxy.get_toxic(self.toxic_name) is not None:
            ctx.proxy.destroy_toxic(self.toxic_name)
        if self._healed is None:
            self._healed = time.time()

    def evidence(self, ctx: FaultContext) -> Evidence:
        started = self._started
        if started is None:
            return Evidence(False, f"{self.kind}: never injected (its trigger was not reached)")
        if ctx.proxy_record is None:
            return Evidence(
                None,
                f"{self.kind}: toxic {self.toxic_name} was added, but this proxy keeps no record of its acts (a real Toxiproxy): cannot prove it hit a request",
            )
        if not ctx.proxy_record.is_file():
            return Evidence(None, f"{self.kind}: the proxy's record {ctx.proxy_record} is missing: cannot tell whether the toxic acted")
        end = self._healed if self._healed is not None else time.time()
        acts = [r for r in _records(ctx) if r.get("toxic") == self.toxic_name and started <= float(r.get("time", 0)) <= end]
        hits = [r for r in acts if int(r.get("bytes", 0)) > 0 or r.get("fresh") is True]
        if not hits:
            return Evidence(
                False,
                f"{self.kind}: toxic {self.toxic_name} active {end - started:.1f}s but no request was in flight through the proxy ({len(acts)} acts on idle connections)",
            )
        conns = sorted({r.get("conn") for r in hits}, key=str)
        detail = f"{self.kind}: toxic {self.toxic_name} acted {len(hits)} times on {len(conns)} connections with requests in flight"
        return Evidence(True, detail, [dict(r, source=str(ctx.proxy_record)) for r in hits[:20]])


def _records(ctx: FaultContext) -> list[dict[str, Any]]:
    path = ctx.proxy_record
    if path is None:
        return []
    out: list[dict[str, Any]] = []
    for line in path.read_bytes().splitlines():
        try:
            rec = loads_strict(line, file=str(path))
        except Exception:  # a line cut by a killed proxy: not an act
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out
