"""The driver's live Prometheus metrics (`statebed run --metrics-port P`): committed batches and
records, batch latency, the last commit time. Off unless a port is given; loopback only."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from .driver import BatchOutcome

__all__ = ["DriverMetrics"]


class DriverMetrics:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
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
        self.server, _ = start_http_server(port, addr=host, registry=r)

    def __call__(self, outcome: BatchOutcome) -> None:
        self.batches.labels(outcome.status).inc()
        if outcome.status == "committed":
            self.records.inc(outcome.records)
            self.latency.observe(outcome.seconds)
            self.last_commit.set_to_current_time()

    def close(self) -> None:
        self.server.shutdown()
