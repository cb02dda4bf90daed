"""`statebed load run`: the ingest service, a continuous job and Locust together, then the verdict.

Order: ingest service → job (`statebed run --source ingest --stop-file …` as a subprocess,
target "driver") → wait until its query streams → one warm-up event, until batch 0 committed
(so the cold first batch is not in the latencies) → the experiment's nemesis (if any) →
Locust for the run time. Then the drain: Locust has exited, the ingest service stops
gracefully (in-flight requests are answered), the stop file tells the job to process every
landed file and exit. Every process is stopped by PID in `finally` (also on error and
Ctrl-C); `processes.json` lists each one for the leak check. Verdict: the lineage and state
verifiers, every acknowledged record committed exactly once (`accounting`), every 200 a
client saw in the ack log, and with an experiment every fault provably fired.

Run directory (also the job's own run directory):
    landing/   the ingest landing area (data/, acks/)
    load/      summary.json, series.jsonl, locust_stats_history.csv, locust.html, client-acks.jsonl
    logs/      ingest / job / locust stdout and stderr
    history.jsonl, experiment.yaml (with --experiment), processes.json

The storage, the experiment's part of the job's options, the job's command line, process
tracking and the nemesis are the launcher's (`statebed_chaos.launcher`), the verifiers and the
fault accounting the judge's (`statebed_chaos.judge`), shared with `statebed chaos run`; this
module keeps what is about load: the ingest service, Locust, the acknowledgement accounting and
the series.
"""

from __future__ import annotations

import contextlib
import csv
import random
import signal
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from statebed_base.errors import RunFailedError, UsageError
from statebed_chaos.driver_process import DriverProcess, python_env
from statebed_chaos.experiment import Experiment
from statebed_chaos.judge import check_run, unfired
from statebed_chaos.launcher import Tracker, experiment_fields, make_nemesis, past_proxy, run_command, storage
from statebed_chaos.schedule import realise
from statebed_job.config import JobOptions
from statebed_job.runner import describe_run
from statebed_model.experimentdir import ExperimentDir, control_file
from statebed_model.rundir import RunDir
from statebed_model.sources import IngestSource
from statebed_store import S3Settings, open_storage
from statebed_store.failpoint_control import Control
from statebed_store.failpoints import CONTROL_ENV
from statebed_store.formats import FORMATS, V2, Format
from statebed_store.naming import commit_path
from statebed_verify import EXIT_CODES, Verdict, merge_verdicts
from statebed_verify.history import History

from .accounting import Accounting, account, summary_latency
from .managed import Managed, start_ingest
from .prometheus import write_latency_histogram
from .series import locust_rates, series_rows, write_series

__all__ = ["LOCUSTFILE", "LoadOptions", "LoadResult", "describe", "job_command", "locust_command", "run_load"]

LOCUSTFILE = Path(__file__).resolve().parents[2] / "loadtests" / "locustfile.py"  # in a checkout; the image runs its own copy
SHAPES = ("steady", "ramp", "spike")
KEYS = ("uniform", "zipf", "hot")
JOB_READY_TIMEOUT_S = 600.0  # Spark's start on a busy machine
DRAIN_TIMEOUT_S = 600.0


@dataclass
class LoadOptions:
    users: int = 10
    spawn_rate: float = 5.0
    duration_s: float = 30.0
    shape: str = "steady"
    keys: str = "uniform"
    keyspace: int = 1000
    batch_size: int = 20
    format: Format = V2  # a name given here is parsed on construction
    partitions: int = 2
    trigger_ms: int = 1000
    seed: int | None = None
    experiment: Experiment | None = None  # its workload, cluster, sizes, storage and faults (format: --format wins)
    kill_ingest_at_s: float | None = None  # SIGKILL the ingest service this long into the load, restart it on its port

    def __post_init__(self) -> None:
        if self.shape not in SHAPES or self.keys not in KEYS or self.format not in FORMATS:
            raise UsageError(f"--shape {self.shape!r} / keys {self.keys!r} / --format {self.format!r}: unknown")
        self.format = FORMATS[self.format]
        if min(self.users, self.batch_size, self.partitions, self.keyspace) < 1 or self.spawn_rate <= 0 or self.duration_s <= 0:
            raise UsageError("--users, --spawn-rate, --duration (and batch size, partitions, keyspace) must be > 0")


@dataclass
class LoadResult:
    run_dir: str
    valid: Verdict = "unknown"
    acknowledged: int = 0
    committed: int = 0
    lost_acknowledged: int = 0
    duplicated: int = 0
    requests: int = 0
    failures: int = 0
    ingest_to_commit_ms: dict[str, float | None] = field(default_factory=lambda: {"p50": None, "p95": None, "p99": None})
    events_per_s: float = 0.0
    reasons: list[str] = field(default_factory=list)  # why not valid (not in the --json object)
    checks: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        keys = ("run_dir", "valid", "acknowledged", "committed", "lost_acknowledged", "duplicated", "requests", "failures")
        return {**{k: getattr(self, k) for k in keys}, "ingest_to_commit_ms": self.ingest_to_commit_ms, "events_per_s": self.events_per_s}

    @property
    def exit_code(self) -> int:
        """From the one verdict table: a lost or doubled acknowledged record is invalid whatever else held."""
        return EXIT_CODES[False if self.lost_acknowledged or self.duplicated else self.valid]


def run_load(opts: LoadOptions, out: Path, *, say: Callable[[str], None] = lambda _: None) -> LoadResult:
    """One load run into `out` (new or empty); KeyboardInterrupt stops everything, then propagates."""
    out = out.absolute()
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"{out}: not empty (a load run needs a new directory)")
    xdir = ExperimentDir(out)
    xdir.load.mkdir(parents=True)
    exp = opts.experiment
    seed = (
        opts.seed
        if opts.seed is not None
        else exp.seed
        if exp is not None and exp.seed is not None
        else random.SystemRandom().randrange(2**31)
    )
    if exp is not None:
        exp = replace(exp, seed=seed, faults=realise(exp, seed), schedule=None, format=opts.format)
        xdir.write_experiment(exp.to_yaml())
    result = LoadResult(run_dir=str(out))
    tracker = Tracker()
    with storage(exp, out, out, seed) as (env, services):  # S3 outlives the job: the verifiers read the checkpoint there
        try:
            with contextlib.ExitStack() as stack:
                code = _drive(opts, exp, seed, out, env, services, stack, tracker, say, result)
        finally:
            if left := tracker.stop():
                say(f"stopped {len(left)} processes still running after the run: pids {left}")
            tracker.write(xdir)
        if code is not None:
            _judge(out, None if services is None else services.settings, opts, code, result)
    xdir.write_load(result.to_json(), {**result.to_json(), "reasons": result.reasons, "checks": result.checks})
    return result


def job_options(opts: LoadOptions, exp: Experiment | None, seed: int, out: Path) -> JobOptions:
    """A continuous ingest run over the landing area until the stop file (with an experiment: what
    it fixes of the job, as a chaos run of it has, its checkpoint file manager included; not its
    generated input's sizes, which Locust replaces)."""
    given: dict[str, Any] = {"partitions": opts.partitions} if exp is None else experiment_fields(exp, f"load-{out.name}-{seed}")
    given |= {"source": "ingest", "landing": str(out / "landing"), "stop_file": str(ExperimentDir(out).load / "stop")}
    return JobOptions(seed=seed, format=opts.format, trigger_ms=opts.trigger_ms, **given)


def describe(opts: LoadOptions, exp: Experiment | None, seed: int, out: Path) -> None:
    """Write the load run's job into `out` as its run description, for `job_command` to start."""
    describe_run(out, job_options(opts, exp, seed, out))


def job_command(out: Path) -> list[str]:
    """The job `out` describes (its Prometheus /metrics on any free port)."""
    return run_command(out, metrics_port=0)


def locust_command(opts: LoadOptions, url: str, seed: int, out: Path) -> list[str]:
    load = out / "load"
    return [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary", "--host", url,
        "-u", str(opts.users), "-r", str(opts.spawn_rate), "-t", f"{max(1, round(opts.duration_s))}s", "--stop-timeout", "5",
        "--load-shape", opts.shape, "--keys", opts.keys, "--keyspace", str(opts.keyspace), "--batch-size", str(opts.batch_size),
        "--seed", str(seed), "--acked-log", str(load / "client-acks.jsonl"),
        "--csv", str(load / "locust"), "--html", str(load / "locust.html"),
    ]  # fmt: skip


def _drive(
    opts: LoadOptions,
    exp: Experiment | None,
    seed: int,
    out: Path,
    env: dict[str, str],
    services: Any,
    stack: contextlib.ExitStack,
    tracker: Tracker,
    say: Callable[[str], None],
    result: LoadResult,
) -> int | None:
    """Start, load, drain, stop; the job's exit code (None: it never finished)."""
    ingest, url = start_ingest(str(out / "landing"), out / "logs")
    stack.callback(ingest.stop)
    tracker.add(ingest.pid)
    say(f"ingest service pid {ingest.pid} at {url}")
    control = Control(control_file(out))
    history = History(ExperimentDir(out).history)
    nemesis = None if exp is None or not exp.faults else make_nemesis(exp, exp.faults, out, control, history, services, seed, say)
    if nemesis is not None:
        nemesis.prepare()
        stack.callback(nemesis.stop)
    describe(opts, exp, seed, out)
    driver = DriverProcess(job_command(out), python_env({**env, CONTROL_ENV: str(control.path)}), out, out / "logs" / "job")
    stack.callback(driver.stop)
    tracker.add(driver.pid)
    say(f"job pid {driver.pid}: waiting for its query to stream")
    run = past_proxy(out, services)
    query = run.query_storage(run.read_info())  # spark-checkpoint/ here, or a native run's bucket
    _wait(lambda: query.exists("metadata"), [driver.proc.poll], tracker, JOB_READY_TIMEOUT_S, "the job's query")
    _post_warm_up(url)  # one acknowledged event, so the cold first batch (JVM, Python workers) is not in the latencies
    _wait(lambda: query.exists(commit_path(0)), [driver.proc.poll], tracker, JOB_READY_TIMEOUT_S, "batch 0")
    if nemesis is not None:
        nemesis.start()
    locust = Managed("locust", locust_command(opts, url, seed, out), out / "logs" / "locust")
    stack.callback(locust.stop)
    tracker.add(locust.pid)
    say(f"locust pid {locust.pid}: {opts.users} users, {opts.shape}, {opts.duration_s:g} s")
    t0 = time.monotonic()
    kill_at = opts.kill_ingest_at_s
    if kill_at is not None:
        _wait(lambda: not locust.alive() or time.monotonic() - t0 >= kill_at, [driver.proc.poll], tracker, opts.duration_s + 120, "Locust")
        ingest = _restart_ingest(ingest, url, out, stack, tracker, say)
    _wait(lambda: not locust.alive(), [driver.proc.poll], tracker, opts.duration_s + 120, "Locust")
    say(f"locust exited {locust.proc.returncode}; stopping the ingest service, draining the job")
    ingest.stop()
    (out / "load" / "stop").touch()
    _wait(lambda: driver.proc.poll() is not None, [], tracker, DRAIN_TIMEOUT_S, "the job's drain")
    if nemesis is not None:
        nemesis.stop()
        result.checks["faults"] = nemesis.evidence()
    say(f"job exited {driver.proc.returncode}")
    return driver.proc.returncode


def _post_warm_up(url: str) -> None:
    req = urllib.request.Request(
        f"{url}/event", data=b'{"key": 0, "value": 0}', method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
    except OSError as e:
        raise RunFailedError(f"the ingest service did not acknowledge the warm-up event: {e}") from None


def _restart_ingest(
    old: Managed, url: str, out: Path, stack: contextlib.ExitStack, tracker: Tracker, say: Callable[[str], None]
) -> Managed:
    """SIGKILL the ingest service mid-load (no graceful anything), then start a new one on its port."""
    old.signal(signal.SIGKILL)
    old.proc.wait()
    say(f"ingest service pid {old.pid} killed (SIGKILL); restarting on {url}")
    new, _ = start_ingest(str(out / "landing"), out / "logs", port=int(url.rsplit(":", 1)[1]), name="ingest-restarted")
    stack.callback(new.stop)
    tracker.add(new.pid)
    return new


def _wait(done: Callable[[], bool], dead: list[Callable[[], int | None]], tracker: Tracker, timeout_s: float, what: str) -> None:
    """Until `done`; a process in `dead` that exited first, or the timeout, is a failed run."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if any(d() is not None for d in dead):
            raise RunFailedError(f"the job exited while waiting for {what} (see logs/job.err)")
        if time.monotonic() > deadline:
            raise RunFailedError(f"{what}: not done within {timeout_s:g} s")
        tracker.snapshot()
        time.sleep(0.2)  # polling processes and files: there is no event to wait on across processes


def _judge(out: Path, s3: S3Settings | None, opts: LoadOptions, code: int, result: LoadResult) -> None:
    """The load run's verdict: the job's exit, the faults fired, the judge's verifiers, then every
    acknowledged record committed exactly once."""
    verdicts: list[Verdict] = []
    if code != 0:
        verdicts.append("unknown")
        result.reasons.append(f"the job exited {code} (see {out / 'logs' / 'job.err'})")
    for why in unfired(result.checks.get("faults", [])):
        verdicts.append("unknown")
        result.reasons.append(why)
    run = RunDir(out, s3)
    checked = check_run(run, s3)  # every check verify_run makes counts; no attempts check
    result.checks.update(checked.summary)
    verdicts += checked.verdicts
    for name, found in checked.anomalies.items():
        result.reasons += [f"{name}: {a.kind}: {a.detail}" for a in found][:20]
    acc = account(run, IngestSource(open_storage(out / "landing")), [out / "load" / "client-acks.jsonl"])
    _fill(result, acc, out)
    if not acc.acknowledged:
        verdicts.append("unknown")
        result.reasons.append(f"no record was acknowledged: nothing to judge (see {out / 'logs' / 'locust.err'})")
    if acc.lost or acc.false_acks or acc.duplicated:
        verdicts.append(False)
        result.reasons.append(
            f"lost {len(acc.lost)}, false acks {len(acc.false_acks)}, doubled {len(acc.duplicated)}: e.g. {(acc.lost + acc.false_acks + acc.duplicated)[:10]}"
        )
    result.valid = merge_verdicts(verdicts)


def _fill(result: LoadResult, acc: Accounting, out: Path) -> None:
    result.acknowledged, result.committed = acc.acknowledged, acc.committed
    result.lost_acknowledged, result.duplicated = len(acc.lost) + len(acc.false_acks), len(acc.duplicated)
    result.ingest_to_commit_ms = summary_latency(acc)
    result.requests, result.failures = _locust_totals(out / "load" / "locust_stats.csv")
    if acc.latencies:
        span = max(c for c, _, _ in acc.latencies) - min(i for _, i, _ in acc.latencies)
        result.events_per_s = round(sum(n for _, _, n in acc.latencies) / span, 1) if span > 0 else 0.0
    write_series(ExperimentDir(out).series, series_rows(acc, locust_rates(out / "load" / "locust_stats_history.csv")))
    write_latency_histogram(out / "load", acc.latencies)  # the ingest->commit histogram --prometheus serves


def _locust_totals(stats_csv: Path) -> tuple[int, int]:
    if not stats_csv.exists():
        return 0, 0
    with open(stats_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("Name") == "Aggregated":
                return int(row["Request Count"]), int(row["Failure Count"])
    return 0, 0
