"""The harness: one statebed job under a nemesis, judged. Used by `statebed chaos run`
(`experiment_runner.py`: baseline, faulted run, verdict) and `statebed load run` (`statebed_load.load_run`:
the same job fed by the ingest service under Locust).

It owns what both need: the storage (local, or MinIO behind the fault proxy for this run
only), the run's description (`describe`: its `run.json`, written by `statebed_job.runner.describe_run`),
the driver's
launch and the record of every process below it (for stop and the leak check), the nemesis,
and the judge: a scheduled fault without proof that it fired makes a run unknown, never
valid; the verifiers (lineage, state, attempts) and the baseline comparison decide the rest,
false > unknown > true, and the exit code comes from the one table (`EXIT_CODES`).

The job runs as a subprocess started from its run directory (`python -m statebed_job RUN_DIR
--json`, never the `statebed` command above this layer), so a fault can kill its driver and the
harness survives.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from statebed_base.errors import StatebedError
from statebed_base.processes import ProcessIdentity, stop_all, track
from statebed_job.config import ClusterKind, JobOptions
from statebed_job.runner import describe_run
from statebed_model.experimentdir import ExperimentDir
from statebed_model.rundir import RunDir
from statebed_store import S3Settings
from statebed_store.failpoint_control import Control
from statebed_store.failpoints import CONTROL_ENV
from statebed_verify import EXIT_CODES, Verdict, merge_verdicts, summarise, verify_run
from statebed_verify.attempts_check import check_attempts
from statebed_verify.history import History, Outcome
from statebed_verify.history_build import add_run_ops

from .baseline import Baseline, compare_views, state_view
from .driver_process import DriverExit, DriverProcess, python_env
from .experiment import Experiment
from .faults import FaultContext, FaultSpec, fault_class
from .nemesis import Nemesis
from .targets.base import Targets
from .targets.local import LocalTargets

__all__ = [
    "EXIT_HARNESS",
    "ExperimentResult",
    "Tracker",
    "describe",
    "faulted_run",
    "job_options",
    "judge",
    "launch",
    "make_nemesis",
    "run_command",
    "storage",
    "unfired",
]

EXIT_HARNESS = 2
Say = Callable[[str], None]


@dataclass
class ExperimentResult:
    name: str
    seed: int
    valid: Verdict
    anomalies: list[dict[str, Any]]
    faults: list[dict[str, Any]]
    faults_fired: int
    faults_scheduled: int
    baseline_equal: bool | None
    run_dir: str
    seconds: float
    exit_code: int
    reproduce: str
    checks: dict[str, Any] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)  # why not valid (or why unknown)
    error: str | None = None  # a harness failure

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def baseline_itself_invalid(self) -> bool:
        """The fault-free baseline's own verifiers found anomalies (see `_compare`)."""
        return bool(self.checks.get("baseline", {}).get("itself_invalid"))

    def settle(self, verdicts: list[Verdict]) -> None:
        """The verdict over every check, and its exit code from the one table."""
        self.valid = merge_verdicts(verdicts)
        self.exit_code = EXIT_CODES[self.valid]


# -- storage and the job's command line ------------------------------------------------------


@contextlib.contextmanager
def storage(exp: Experiment | None, out: Path, run_dir: Path, seed: int) -> Iterator[tuple[dict[str, str], Any]]:
    """Local storage (or no experiment): nothing to start. S3: MinIO behind the proxy, for this
    run only. Yields the job's environment and the services (None: local)."""
    if exp is None or exp.storage == "local":
        yield {}, None
        return
    from .infra import storage_services

    with storage_services(ExperimentDir(out).infra, run_dir=run_dir, api=exp.proxy_api, seed=seed) as svc:
        env = {
            "STATEBED_S3_ENDPOINT": svc.endpoint,
            "AWS_ACCESS_KEY_ID": svc.settings.access_key,
            "AWS_SECRET_ACCESS_KEY": svc.settings.secret_key,
        }
        yield env, svc


def run_command(run_dir: Path, *, resume: bool = False, master: str | None = None, metrics_port: int | None = None) -> list[str]:
    """`python -m statebed_job RUN_DIR`: the job the run directory describes (`describe_run` wrote it), with
    no verifiers (the harness judges); `resume`: continue it after a death; `master`: submit to that cluster."""
    cmd = [sys.executable, "-m", "statebed_job", str(run_dir), "--json"]
    cmd += [] if master is None else ["--master", master]
    cmd += [] if metrics_port is None else ["--metrics-port", str(metrics_port)]
    return [*cmd, "--resume"] if resume else cmd


def job_options(exp: Experiment, seed: int, run_dir: Path) -> JobOptions:
    """The options of one run of `exp` (the checkpoint on S3 when storage is s3)."""
    s3 = exp.storage == "s3"  # statebed's store or Spark's own (through S3A) in a bucket
    checkpoint = f"s3://statebed/{run_dir.parent.name}-{run_dir.name}-{seed}" if s3 else JobOptions.checkpoint
    return JobOptions(
        workload=exp.workload,
        batches=exp.batches,
        partitions=exp.partitions,
        rows_per_batch=exp.rows_per_batch,
        keyspace=exp.keyspace,
        format=exp.format,
        cluster=cast(ClusterKind, exp.cluster),
        workers=exp.workers,
        snapshot_interval=exp.snapshot_interval,
        checkpoint=checkpoint,
        checkpoint_file_manager=exp.checkpoint_file_manager,
        seed=seed,
        extra_conf=exp.spark_conf(),
    )


def describe(exp: Experiment, seed: int, run_dir: Path) -> None:
    """Write one run of `exp` into `run_dir` as its run description, for `run_command` to start."""
    describe_run(run_dir, job_options(exp, seed, run_dir))


# -- processes -------------------------------------------------------------------------------


class Tracker:
    """Every process of the run, pinned by identity as seen while it lived (for stop and the leak check)."""

    def __init__(self) -> None:
        self.seen: dict[int, ProcessIdentity] = {}
        self.roots: list[int] = []

    def add(self, pid: int) -> None:
        self.roots.append(pid)
        self.snapshot()

    def snapshot(self) -> None:
        track(self.roots, self.seen)

    def stop(self) -> list[int]:
        """Stop whatever is left (the PIDs): the job's JVM and Python workers outlive a driver that
        exited on its own, orphaned, until they notice; the leak check must not race them."""
        self.snapshot()
        return stop_all(list(self.seen.values()))

    def write(self, xdir: ExperimentDir) -> None:
        xdir.write_processes([i.to_json() for i in self.seen.values()])


def launch(
    xdir: ExperimentDir, cmd: list[str], env: dict[str, str], run_dir: Path, log: str, history: History, say: Say, deadline: float
) -> DriverExit:
    """One driver until it exits or `deadline`; then every process below it is stopped and recorded."""
    driver = DriverProcess(cmd, python_env(env), run_dir, xdir.log(log))
    say(f"driver pid {driver.pid}: {' '.join(cmd[3:])}")
    try:
        ex = driver.wait(deadline)
    finally:
        driver.stop()  # whatever it left (a killed driver's cluster, executors, Python workers)
        xdir.add_processes(driver.processes())
    outcome: Outcome = "ok" if ex.code == 0 else "info"
    history.record(
        "driver", outcome, ex.start, ex.end, pid=ex.pid, exit_code=ex.code, timed_out=ex.timed_out, run_dir=str(run_dir), stderr=ex.stderr
    )
    say(f"driver pid {ex.pid} " + ("timed out" if ex.timed_out else f"exited {ex.code}"))
    return ex


# -- faults ----------------------------------------------------------------------------------


def past_proxy(run_dir: Path, services: Any) -> RunDir:
    """`run_dir` with S3 read from MinIO itself, past the proxy: what faults and waits observe
    must not be slowed or cut by the faults they observe."""
    return RunDir(run_dir, None if services is None else replace(services.settings, endpoint=services.direct))


def make_nemesis(
    exp: Experiment,
    specs: list[FaultSpec],
    run_dir: Path,
    control: Control,
    history: History,
    services: Any,
    seed: int,
    say: Say,
    targets: Targets | None = None,
) -> Nemesis:
    """The nemesis of `specs` on the run in `run_dir` (targets: this machine's unless given)."""
    ctx = FaultContext(
        run=past_proxy(run_dir, services),
        format=exp.format,
        cluster=exp.cluster,
        targets=LocalTargets(run_dir) if targets is None else targets,
        control=control,
        history=history,
        proxy=None if services is None else services.proxy,
        seed=seed,
    )
    return Nemesis(ctx, [(s, fault_class(s.kind)(s)) for s in specs], say)


def faulted_run(
    xdir: ExperimentDir,
    exp: Experiment,
    seed: int,
    run_dir: Path,
    control: Control,
    env: dict[str, str],
    history: History,
    nemesis: Nemesis,
    say: Say,
    master: str | None = None,
) -> list[DriverExit]:
    """Drivers until one finishes, restarting with --resume after a death when a fault restarts drivers."""
    env = {**env, CONTROL_ENV: str(control.path)}
    deadline = time.monotonic() + exp.timeout_s
    exits: list[DriverExit] = []
    describe(exp, seed, run_dir)
    nemesis.start()
    while True:
        cmd = run_command(run_dir, resume=bool(exits), master=master)
        ex = launch(xdir, cmd, env, run_dir, f"faulted-{len(exits)}", history, say, deadline)
        exits.append(ex)
        if ex.code == 0 or ex.timed_out:
            return exits
        if not nemesis.restarts_driver() or len(exits) > exp.max_driver_restarts:
            return exits
        nemesis.before_resume()
        say(f"restarting the driver with --resume ({len(exits)}/{exp.max_driver_restarts})")


def unfired(faults: list[dict[str, Any]]) -> list[str]:
    """Why each scheduled fault without proof that it fired makes the run unknown."""
    return [
        f"fault {f['id']} {f['kind']} did not provably fire ({f.get('fired')}): {f.get('detail')}"
        for f in faults
        if f.get("fired") is not True
    ]


# -- the judge -------------------------------------------------------------------------------


def judge(
    exp: Experiment,
    run_dir: Path,
    s3: S3Settings | None,
    exits: list[DriverExit],
    nemesis: Nemesis,
    base: Baseline | None,
    history: History,
    result: ExperimentResult,
    say: Say,
) -> None:
    verdicts: list[Verdict] = []
    last = exits[-1]
    if last.timed_out:
        verdicts.append("unknown")
        result.reasons.append(f"the run did not finish within timeout_s={exp.timeout_s:g}: everything was stopped")
    elif last.code != 0:
        verdicts.append("unknown")
        why = "no scheduled fault restarts drivers" if not nemesis.restarts_driver() else f"after {len(exits) - 1} restart(s)"
        result.reasons.append(f"the driver exited {last.code} ({why}); see {last.stderr}")
    run = RunDir(run_dir, s3)
    for note in add_run_ops(history, run) if run.exists() else []:  # (no run.json: nothing to add, and read_info raises)
        result.reasons.append(f"history: {note}")
    result.faults = nemesis.evidence()
    result.faults_fired = sum(1 for f in result.faults if f["fired"] is True)
    for why in unfired(result.faults):
        verdicts.append("unknown")
        result.reasons.append(why)
    if not run.exists():
        result.settle([*verdicts, "unknown"])
        result.reasons.append("the faulted run left no run directory")
        return
    verdicts += _verifiers(exp, run, s3, result)
    if base is not None and last.code == 0:
        verdicts.append(_compare(run, base, result))
    elif base is not None:
        result.reasons.append("baseline: not compared (the faulted run did not finish)")
    result.settle(verdicts)
    if result.valid is not True and not result.reasons and result.anomalies:
        result.reasons.append(f"{len(result.anomalies)} anomal{'y' if len(result.anomalies) == 1 else 'ies'}")
    say("checks: " + ", ".join(f"{k} {v.get('valid')}" for k, v in result.checks.items()) + f"; baseline_equal {result.baseline_equal}")


def _verifiers(exp: Experiment, run: RunDir, s3: S3Settings | None, result: ExperimentResult) -> list[Verdict]:
    """The experiment's verifiers (lineage, state, attempts) on the faulted run."""
    verdicts: list[Verdict] = []
    composite = verify_run(run.root, s3)
    result.checks = summarise(composite)
    for name, report in composite.reports.items():
        if name in exp.verifiers:
            verdicts.append(report.valid)
            result.anomalies += [{"check": name, **a.to_json()} for a in report.anomalies]
    if "attempts" in exp.verifiers:
        orphans = getattr(composite.reports.get("lineage"), "orphans", None)
        try:
            att = check_attempts(run, orphans or [])
        except StatebedError as e:
            verdicts.append("unknown")
            result.reasons.append(f"attempts check: {e}")
        else:
            result.checks["attempts"] = att.to_json()
            verdicts.append(att.valid)
            result.anomalies += [{"check": "attempts", **a.to_json()} for a in att.anomalies]
    return verdicts


def _compare(run: RunDir, base: Baseline, result: ExperimentResult) -> Verdict:
    itself = sorted(name for name, v in base.verdicts.items() if isinstance(v, dict) and v.get("valid") is False)
    result.checks["baseline"] = {"run_dir": base.run_dir, "verdicts": base.verdicts, "error": base.error, "itself_invalid": itself}
    if itself:  # e.g. V1 under speculation alone: its anomalies need no fault, so a finding proves no fault
        result.reasons.append(f"the fault-free baseline is itself invalid ({', '.join(itself)}): not every anomaly is the faults' doing")
    if base.view is None:
        result.reasons.append(f"baseline: {base.error}")
        return "unknown"
    try:
        diffs = compare_views(state_view(run), base.view)
    except StatebedError as e:
        result.reasons.append(f"baseline: the faulted run's final state is unreadable: {e}")
        return "unknown"
    result.baseline_equal = not diffs
    result.checks["baseline"]["valid"] = not diffs
    if diffs:
        result.anomalies.append({"check": "baseline", "kind": "baseline-mismatch", "detail": "; ".join(diffs)})
    return not diffs
