"""The proxy's `GET /metrics` (Prometheus text): what a dashboard needs from the fault side.

`statebed_proxy_toxics{proxy,type,stream}`: toxics installed now (a fault's window as the proxy
sees it); `statebed_proxy_toxic_acts_total{proxy,type,stream}`: times a toxic acted on a
connection (the evidence the record file holds, counted)."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["render"]


class _Proxies(Collector):
    def __init__(self, registry: Any) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        installed = GaugeMetricFamily("statebed_proxy_toxics", "toxics installed now", labels=["proxy", "type", "stream"])
        counts = collections.Counter((p.name, t.type, t.stream) for p in self.registry.proxies() for t in p.toxics.all())
        for labels, n in sorted(counts.items()):
            installed.add_metric(list(labels), n)
        yield installed
        acts = CounterMetricFamily("statebed_proxy_toxic_acts", "times a toxic acted on a connection", labels=["proxy", "type", "stream"])
        for labels, n in sorted(self.registry.recorder.counts().items()):
            acts.add_metric(list(labels), n)
        yield acts


def render(registry: Any) -> str:
    """The exposition text for the proxies of `registry` (an api.Registry)."""
    r = CollectorRegistry(auto_describe=False)
    r.register(_Proxies(registry))
    return generate_latest(r).decode()
