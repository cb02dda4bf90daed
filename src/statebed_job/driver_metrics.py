"""The driver's live Prometheus metrics (`statebed run --metrics-port P`): committed batches and
records, batch latency, the last commit time, checkpoint upload latency and hedges per kind,
and the faults a chaos controller has in their window. Off unless a port is given; loopback only
(no flag opens it wider: another host is refused by `statebed_base.netaddr.check_bind`)."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from statebed_base.errors import StatebedError
from statebed_base.netaddr import check_bind
from statebed_store.failpoint_control import Control

from .driver import BatchOutcome
from .maintenance import PassRecord

__all__ = ["DriverMetrics", "FaultsActive"]

UPLOAD_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class FaultsActive(Collector):
    """`statebed_faults_active{kind}`: faults between inject and heal, read from the run's
    failpoint control file at scrape time (the chaos controller marks every fault kind there)."""

    def __init__(self, control: Control) -> None:
        self.control = control

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("statebed_faults_active", "chaos faults in their window (inject to heal)", labels=["kind"])
        try:
            active = self.control.active()
        except (OSError, StatebedError):  # a half-written or vanished file: no sample rather than a wrong one
            return
        for kind, n in sorted(collections.Counter(active.values()).items()):
            family.add_metric([kind], n)
        yield family


class DriverMetrics:
    def __init__(self, port: int, control: Path, host: str = "127.0.0.1") -> None:
        check_bind(host, port, public=False, flag="metrics host", port_flag="--metrics-port")
        self.registry = CollectorRegistry()
        r = self.registry
        self.batches = Counter("statebed_job_batches", "micro-batches run, by status", ["status"], registry=r)
        self.records = Counter("statebed_job_committed_records", "records of committed batches", registry=r)
        self.latency = Histogram(
            "statebed_job_batch_seconds",
            "batch latency (input, tasks, commit)",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.last_commit = Gauge("statebed_job_last_commit_timestamp_seconds", "when the last batch committed", registry=r)
        self.uploads = Histogram(
            "statebed_upload_seconds", "checkpoint uploads of committed batches, by kind", ["kind"], buckets=UPLOAD_BUCKETS, registry=r
        )
        self.hedges_sent = Counter("statebed_upload_hedges_sent", "hedged second uploads started, by kind", ["kind"], registry=r)
        self.hedges_won = Counter("statebed_upload_hedges_won", "hedged uploads that finished first, by kind", ["kind"], registry=r)
        self.maint_passes = Counter("statebed_maintenance_passes", "maintenance passes run", registry=r)
        self.maint_files = Counter("statebed_maintenance_deleted_files", "files maintenance deleted", registry=r)
        self.maint_bytes = Counter("statebed_maintenance_deleted_bytes", "bytes maintenance deleted", registry=r)
        self.maint_requests = Counter("statebed_maintenance_requests", "storage requests of maintenance", registry=r)
        self.maint_failures = Counter("statebed_maintenance_failures", "store cleanups that failed (logged, never fatal)", registry=r)
        self.maint_seconds = Histogram(
            "statebed_maintenance_store_seconds", "one store's cleanup in a maintenance pass", buckets=UPLOAD_BUCKETS, registry=r
        )
        r.register(FaultsActive(Control(control)))
        self.server, _ = start_http_server(port, addr=host, registry=r)

    def __call__(self, outcome: BatchOutcome) -> None:
        self.batches.labels(outcome.status).inc()
        if outcome.status == "committed":
            self.records.inc(outcome.records)
            self.latency.observe(outcome.seconds)
            self.last_commit.set_to_current_time()
        for kind, row in outcome.uploads.items():  # a handful of uploads per batch
            for ms in row.get("ms", []):
                self.uploads.labels(kind).observe(ms / 1000.0)
            self.hedges_sent.labels(kind).inc(row.get("hedges_sent", 0))
            self.hedges_won.labels(kind).inc(row.get("hedges_won", 0))

    def maintenance(self, records: list[PassRecord]) -> None:
        """One maintenance pass: a row per store cleaned."""
        self.maint_passes.inc()
        for rec in records:
            self.maint_files.inc(rec.files_deleted)
            self.maint_bytes.inc(rec.bytes_deleted)
            self.maint_requests.inc(rec.requests)
            self.maint_seconds.observe(rec.seconds)
            if rec.error is not None:
                self.maint_failures.inc()

    def close(self) -> None:
        self.server.shutdown()
