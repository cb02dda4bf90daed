"""A real Prometheus behind a load or chaos run (`--prometheus`): what a dashboard reads.

Debian's `prometheus` server, started and stopped by PID (`statebed_base.processes.spawn`), on
127.0.0.1 only, scraping every 1 s; its TSDB stays in the run directory (`prometheus/data`),
so a later `serve_tsdb` (a report, a local Grafana, the dashboard tests) reads the run back.

Targets are found, not passed around: every component already publishes its address in the
run directory (the driver's `driver-metrics.json`, the ingest service's ready file, our
Toxiproxy's log line), and a watcher writes them as `file_sd` files Prometheus
re-reads. The run's own exporter (job `load`) serves Locust's stats (Locust has no Prometheus
endpoint; its `--csv` history is read at scrape time) and, once the run is judged, the
verdict, the lost / duplicated counts and the ingest->commit latency histogram.

    <run>/prometheus/prometheus.yml     the config (file_sd per job)
    <run>/prometheus/targets/<job>.json the discovered targets (labels: run, namespace, part)
    <run>/prometheus/data/              the TSDB
    <run>/prometheus/process.json       the server's process identity (pid, start time, command line)
    <run>/logs/prometheus.out / .err
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import shutil
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from statebed_base.errors import RunFailedError, UsageError
from statebed_base.localfs import atomic_write
from statebed_base.netaddr import answers, free_port
from statebed_base.processes import Child, spawn
from statebed_model.experimentdir import ExperimentDir

__all__ = [
    "JOBS",
    "LATENCY_BUCKETS",
    "PROMETHEUS_HELP",
    "PrometheusRun",
    "discover",
    "prometheus_binary",
    "prometheus_for_run",
    "query",
    "query_range",
    "render_config",
    "serve_tsdb",
    "set_env",
    "write_latency_histogram",
]

PACKAGE = "prometheus"
PROMETHEUS_HELP = (
    "a real Prometheus (Debian package prometheus) on 127.0.0.1 scrapes the run every 1 s; its TSDB stays in <out>/prometheus/data"
)
JOBS = ("driver", "ingest", "proxy", "load")
SCRAPE_INTERVAL = "1s"
NAMESPACE = "local"  # the dashboard's `namespace` variable; in a cluster the operator sets the pod's
READY_TIMEOUT_S = 60.0
FINAL_SCRAPE_TIMEOUT_S = 15.0
WATCH_INTERVAL_S = 0.5
LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
LATENCY_FILE = "ingest_to_commit.json"
_PROXY_LINE = re.compile(r'"address":"(127\.0\.0\.1:\d+)"[^\n]*"message":"Starting Toxiproxy HTTP server"')


def prometheus_binary() -> str:
    """The server's path; a UsageError naming the Debian package when there is none."""
    found = shutil.which("prometheus")
    if found is None:
        raise UsageError(f"--prometheus: no `prometheus` on PATH; install the Debian package `{PACKAGE}` (apt-get install {PACKAGE})")
    return found


def render_config(targets_dir: Path) -> str:
    """prometheus.yml: one scrape job per component, each from its file_sd file, every 1 s."""
    jobs = [
        {
            "job_name": job,
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            "metrics_path": "/metrics",
            "file_sd_configs": [{"files": [str(targets_dir / f"{job}.json")], "refresh_interval": SCRAPE_INTERVAL}],
        }
        for job in JOBS
    ]
    doc = {"global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL}, "scrape_configs": jobs}
    return yaml.safe_dump(doc, sort_keys=False)


def _url_in(path: Path) -> str | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):  # not there yet, or being replaced
        return None
    url = doc.get("url") if isinstance(doc, dict) else None
    return url if isinstance(url, str) and url.startswith("http://") else None


def _host_port(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


def discover(run_dir: Path) -> dict[str, dict[str, str]]:
    """job -> {host:port -> part} of every component that published its address in `run_dir`
    (part: "" for the run itself, else the sub-run, e.g. a chaos run's `baseline` / `faulted`)."""
    found: dict[str, dict[str, str]] = {job: {} for job in JOBS}
    for f in [run_dir / "driver-metrics.json", *sorted(run_dir.glob("*/driver-metrics.json"))]:
        if (url := _url_in(f)) is not None:
            found["driver"][_host_port(url)] = "" if f.parent == run_dir else f.parent.name
    for f in sorted((run_dir / "logs").glob("ingest*.ready.json")):
        if (url := _url_in(f)) is not None:
            found["ingest"][_host_port(url)] = ""
    log = run_dir / "infra" / "proxy" / "toxiproxy.log"
    with contextlib.suppress(OSError):
        for m in _PROXY_LINE.finditer(log.read_text(errors="replace")):
            found["proxy"][m.group(1)] = ""
    return found


def _write_targets(targets_dir: Path, run: str, found: dict[str, dict[str, str]]) -> None:
    for job, targets in found.items():
        groups = [{"targets": [t], "labels": {"run": run, "namespace": NAMESPACE, "part": part}} for t, part in sorted(targets.items())]
        data = json.dumps(groups, indent=1).encode()
        path = targets_dir / f"{job}.json"
        if not path.exists() or path.read_bytes() != data:
            atomic_write(path, data)


def write_latency_histogram(load_dir: Path, latencies: list[tuple[float, float, int]]) -> None:
    """`load/ingest_to_commit.json`: the run's ingest->commit latencies as cumulative buckets
    (from the accounting's (commit time, ingest time, records) rows), for the exporter."""
    counts = [0] * len(LATENCY_BUCKETS)
    total, seconds = 0, 0.0
    for committed, ingested, n in latencies:
        lat = max(0.0, committed - ingested)
        total, seconds = total + n, seconds + lat * n
        for i, le in enumerate(LATENCY_BUCKETS):
            if lat <= le:
                counts[i] += n
    doc = {"buckets": [[le, c] for le, c in zip(LATENCY_BUCKETS, counts, strict=True)], "count": total, "sum": seconds}
    atomic_write(load_dir / LATENCY_FILE, json.dumps(doc).encode())


class RunExporter(Collector):
    """Job `load`: Locust's aggregated stats (read from its `--csv` history at scrape time) and,
    once the run is judged, `statebed_run_verdict`, lost / duplicated and the latency histogram."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def collect(self) -> Iterator[Metric]:
        yield from _locust(self.run_dir / "load" / "locust_stats_history.csv")
        yield from _verdict(self.run_dir)
        yield from _latency(self.run_dir / "load" / LATENCY_FILE)


def _last_aggregated(history: Path) -> dict[str, str] | None:
    last = None
    with contextlib.suppress(OSError), open(history, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("Name") == "Aggregated":
                last = row
    return last


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:  # Locust writes N/A before a percentile exists
        return None


def _locust(history: Path) -> Iterator[Metric]:
    row = _last_aggregated(history)
    if row is None:
        return
    for name, column, doc in (
        ("locust_requests", "Total Request Count", "requests Locust's users sent"),
        ("locust_failures", "Total Failure Count", "requests that failed"),
    ):
        if (v := _number(row.get(column))) is not None:
            c = CounterMetricFamily(name, doc)
            c.add_metric([], v)
            yield c
    if (users := _number(row.get("User Count"))) is not None:
        yield GaugeMetricFamily("locust_users", "running Locust users", value=users)
    if (rps := _number(row.get("Requests/s"))) is not None:
        yield GaugeMetricFamily("locust_requests_per_second", "Locust's current request rate", value=rps)
    q = GaugeMetricFamily("locust_response_time_seconds", "Locust's response time percentiles (current window)", labels=["quantile"])
    for quantile, column in (("0.5", "50%"), ("0.95", "95%"), ("0.99", "99%")):
        if (ms := _number(row.get(column))) is not None:
            q.add_metric([quantile], ms / 1000.0)
    if q.samples:
        yield q


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _verdict(run_dir: Path) -> Iterator[Metric]:
    """From the load run's `load/verdict.json`, else the chaos experiment's `verdict.json`."""
    exp = ExperimentDir(run_dir)
    doc = _read_json(exp.load_verdict) or _read_json(exp.verdict)
    if doc is None or "valid" not in doc:
        return
    said = {True: "valid", False: "invalid"}.get(doc["valid"], "unknown")
    v = GaugeMetricFamily("statebed_run_verdict", "the run's verdict once judged (1 on the one that holds)", labels=["verdict"])
    for name in ("valid", "invalid", "unknown"):
        v.add_metric([name], 1.0 if name == said else 0.0)
    yield v
    for key, name, what in (
        ("lost_acknowledged", "statebed_load_lost_records", "acknowledged records no committed batch read"),
        ("duplicated", "statebed_load_duplicated_records", "records committed more than once"),
        ("acknowledged", "statebed_load_acknowledged_records", "records acknowledged, from the ack log"),
        ("committed", "statebed_load_committed_records", "records of committed batches, from the commit log"),
    ):
        if isinstance(doc.get(key), int):
            yield GaugeMetricFamily(name, what + " (when judged)", value=float(doc[key]))


def _latency(path: Path) -> Iterator[Metric]:
    doc = _read_json(path)
    if doc is None:
        return
    buckets = [(repr(float(le)), float(c)) for le, c in doc["buckets"]] + [("+Inf", float(doc["count"]))]
    h = HistogramMetricFamily("statebed_load_ingest_to_commit_seconds", "acknowledged record -> its batch committed")
    h.add_metric([], buckets, float(doc["sum"]))
    yield h


@dataclass
class PrometheusRun:
    """A started Prometheus: where to query it and which process it is."""

    url: str
    process: Child
    root: Path

    @property
    def pid(self) -> int:
        return self.process.pid


def _start(root: Path, config_name: str, config: str, log_prefix: Path) -> PrometheusRun:
    """Prometheus on a free loopback port over `root`/data, once /-/ready answers."""
    binary = prometheus_binary()
    (root / "data").mkdir(parents=True, exist_ok=True)
    atomic_write(root / config_name, config.encode())
    port = free_port()
    cmd = [
        binary, f"--config.file={root / config_name}", f"--storage.tsdb.path={root / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=3650d",
    ]  # fmt: skip
    proc = spawn(cmd, stdout=log_prefix.with_suffix(".out"), stderr=log_prefix.with_suffix(".err"))
    run = PrometheusRun(f"http://127.0.0.1:{port}", proc, root)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _ready(run.url):
        if not proc.alive() or time.monotonic() > deadline:
            proc.stop()
            raise RunFailedError(f"prometheus did not start: {_last_line(log_prefix.with_suffix('.err'))}")
        time.sleep(0.1)  # polling /-/ready, bounded by the deadline
    return run


def _last_line(path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        if lines:
            return lines[-1]
    return f"no output (see {path})"


def _ready(url: str) -> bool:
    return answers(f"{url}/-/ready")


def _api(url: str, path: str, params: dict[str, str]) -> Any:
    with urllib.request.urlopen(f"{url}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=30) as r:
        doc = json.loads(r.read())
    if doc.get("status") != "success":
        raise RunFailedError(f"prometheus {path} {params.get('query')!r}: {doc.get('error')}")
    return doc["data"]["result"]


def query(url: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    """An instant query's result vector (at `at`, epoch seconds; default now)."""
    return list(_api(url, "query", {"query": expr, **({} if at is None else {"time": f"{at:.3f}"})}))


def query_range(url: str, expr: str, start: float, end: float, step: float = 1.0) -> list[dict[str, Any]]:
    """A range query's result matrix: [{"metric": labels, "values": [[t, "v"], ...]}, ...]."""
    return list(_api(url, "query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}))


class _Watcher(threading.Thread):
    """Starts Prometheus once the run has claimed its directory (a run refuses a non-empty one),
    then keeps the file_sd targets current until told to stop."""

    def __init__(self, run_dir: Path, extra: dict[str, list[str]]) -> None:
        super().__init__(name="prometheus-watch", daemon=True)
        self.run_dir, self.extra = run_dir, extra
        self.stopping = threading.Event()
        self.started_prometheus = threading.Event()
        self.prom: PrometheusRun | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set() and not (self.run_dir.is_dir() and any(self.run_dir.iterdir())):
                self.stopping.wait(0.05)
            if self.stopping.is_set():
                return
            root = self.run_dir / "prometheus"
            (root / "targets").mkdir(parents=True, exist_ok=True)
            self.refresh()
            self.prom = _start(root, "prometheus.yml", render_config(root / "targets"), self.run_dir / "logs" / "prometheus")
            if self.prom.process.ident is not None:  # who to check for after the run (the leak check)
                atomic_write(root / "process.json", json.dumps(self.prom.process.ident.to_json()).encode())
            self.started_prometheus.set()
            while not self.stopping.wait(WATCH_INTERVAL_S):
                self.refresh()
        except BaseException as e:  # reported by prometheus_for_run on exit
            self.error = e
            self.started_prometheus.set()

    def refresh(self) -> None:
        found = discover(self.run_dir)
        for job, targets in self.extra.items():
            found.setdefault(job, {}).update({t: "" for t in targets})
        _write_targets(self.run_dir / "prometheus" / "targets", self.run_dir.name, found)


@contextlib.contextmanager
def prometheus_for_run(run_dir: Path, targets: dict[str, list[str]] | None = None) -> Iterator[_Watcher]:
    """A Prometheus scraping the run in `run_dir` while the block runs (`targets`: more host:port
    per job). It starts once the run has claimed the directory; on exit it waits for the
    verdict's scrape (when the run wrote one), then stops by PID. A missing binary fails first."""
    prometheus_binary()
    run_dir = run_dir.absolute()
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise UsageError(f"{run_dir}: exists and is not an empty directory")
    registry = CollectorRegistry()
    registry.register(RunExporter(run_dir))
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    watcher = _Watcher(run_dir, {"load": [f"127.0.0.1:{server.server_port}"], **(targets or {})})
    watcher.start()
    try:
        yield watcher
        if watcher.prom is not None and _verdict_written(run_dir):
            _await_scrape(watcher.prom.url, "statebed_run_verdict")
    finally:
        watcher.stopping.set()
        watcher.join()
        if watcher.prom is not None:
            watcher.prom.process.stop()
        server.shutdown()
        thread.join()
    if watcher.error is not None:
        raise RunFailedError(f"--prometheus: {watcher.error}")


@contextlib.contextmanager
def set_env(name: str, value: str) -> Iterator[None]:
    """`name=value` in this process's environment (what its subprocesses inherit) for the block."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _verdict_written(run_dir: Path) -> bool:
    exp = ExperimentDir(run_dir)
    return exp.load_verdict.exists() or exp.verdict.exists()


def _await_scrape(url: str, expr: str) -> None:
    """Until Prometheus holds a sample of `expr` (the 1 s scrape after the run wrote it)."""
    deadline = time.monotonic() + FINAL_SCRAPE_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, RunFailedError):
            if query(url, expr):
                return
        time.sleep(0.2)  # polling Prometheus for the sample, bounded by the deadline


@contextlib.contextmanager
def serve_tsdb(run_dir: Path) -> Iterator[PrometheusRun]:
    """A run's recorded TSDB served again (no scraping) for queries; stopped by PID on exit."""
    root = run_dir.absolute() / "prometheus"
    if not (root / "data").is_dir():
        raise UsageError(f"{run_dir}: no Prometheus data (run with --prometheus)")
    prom = _start(
        root, "replay.yml", yaml.safe_dump({"global": {"scrape_interval": SCRAPE_INTERVAL}}), run_dir / "logs" / "prometheus-replay"
    )
    try:
        yield prom
    finally:
        prom.process.stop()
