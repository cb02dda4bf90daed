"""Run one experiment: a fault-free baseline, the faulted run with the nemesis, then the verdict.

    <out>/experiment.yaml   the experiment as run: realised fault list, seed (replays it)
    <out>/baseline/         the fault-free run's directory (same seed, same input)
    <out>/faulted/          the faulted run's directory (checkpoint, event log, attempts, firings)
    <out>/history.jsonl     every fault, driver process, batch and task attempt (Jepsen's history)
    <out>/logs/             each driver process's stdout (its JSON summary) and stderr
    <out>/processes.json    every process recorded below the drivers (for the leak check)
    <out>/verdict.json      the verdict: checks, anomalies, faults with their proof

The job runs as a subprocess (`statebed run --no-verify --json`), so a fault can kill its
driver and the harness survives. Verdict: false > unknown > true over the verifiers (lineage,
state, attempts), the baseline comparison and the faults-fired accounting (a scheduled fault
without proof that it fired makes the run unknown, never valid). A driver that dies without a
scheduled driver-killing fault, or a run past `timeout_s`, is a harness failure: unknown.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from statebed_model.rundir import RunDir
from statebed_store import S3Settings
from statebed_store.errors import StatebedError
from statebed_store.failpoint_control import Control
from statebed_store.failpoints import CONTROL_ENV
from statebed_verify import EXIT_CODES, Verdict, merge_verdicts, summarise, verify_run
from statebed_verify.attempts_check import check_attempts
from statebed_verify.history import History, Outcome
from statebed_verify.history_build import add_run_ops

from .baseline import Baseline, baseline_key, compare_views, state_view
from .driver_process import DriverExit, DriverProcess, python_env
from .experiment import Experiment
from .faults import FaultContext, FaultSpec, fault_class
from .k8s_backend import K8sSettings, k8s_storage, k8s_targets
from .nemesis import Nemesis
from .schedule import realise
from .targets.local import LocalTargets

__all__ = ["ExperimentResult", "run_experiment"]

EXIT_HARNESS = 2


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


class _Progress:
    def __init__(self, enabled: bool, name: str) -> None:
        self.enabled, self.name, self.t0 = enabled, name, time.monotonic()

    def __call__(self, msg: str) -> None:
        if self.enabled:
            print(f"[chaos {self.name} +{time.monotonic() - self.t0:.1f}s] {msg}", file=sys.stderr, flush=True)


def run_experiment(
    exp: Experiment,
    *,
    seed: int | None = None,
    out_dir: Path,
    progress: bool = True,
    baselines: dict[Any, Any] | None = None,
    k8s: K8sSettings | None = None,
) -> ExperimentResult:
    """Run `exp` into `out_dir` (must not hold a run yet). KeyboardInterrupt stops everything, then propagates.

    `k8s`: the Kubernetes backend (drivers submit to Kubernetes, faults act on pods, storage is the
    chart's MinIO behind Toxiproxy); None: everything on this machine."""
    t0 = time.monotonic()
    seed = seed if seed is not None else exp.seed if exp.seed is not None else random.SystemRandom().randrange(2**31)
    out = Path(out_dir).absolute()
    out.mkdir(parents=True, exist_ok=True)
    specs = realise(exp, seed)
    realised = replace(exp, seed=seed, faults=specs, schedule=None)
    (out / "experiment.yaml").write_text(realised.to_yaml())
    say = _Progress(progress, exp.name)
    history = History(out / "history.jsonl")
    result = ExperimentResult(
        name=exp.name,
        seed=seed,
        valid="unknown",
        anomalies=[],
        faults=[],
        faults_fired=0,
        faults_scheduled=len(specs),
        baseline_equal=None,
        run_dir=str(out),
        seconds=0.0,
        exit_code=3,
        reproduce=f"statebed chaos run {out / 'experiment.yaml'} --seed {seed}",
    )
    try:
        _run(realised, specs, seed, out, history, say, result, baselines, k8s)
    except KeyboardInterrupt:
        result.reasons.append("interrupted: every process of the run was stopped")
        raise
    except StatebedError as e:
        result.error, result.valid, result.exit_code = str(e), "unknown", EXIT_HARNESS
        result.reasons.append(f"harness error: {e}")
        say(f"harness error: {e}")
    finally:
        result.seconds = round(time.monotonic() - t0, 3)
        (out / "verdict.json").write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")
    say(f"verdict {result.valid} (exit {result.exit_code}) in {result.seconds:.0f} s: {out / 'verdict.json'}")
    return result


def _run(
    exp: Experiment,
    specs: list[FaultSpec],
    seed: int,
    out: Path,
    history: History,
    say: _Progress,
    result: ExperimentResult,
    baselines: dict[Any, Any] | None,
    k8s: K8sSettings | None = None,
) -> None:
    storage = _storage(exp, out, seed) if k8s is None or exp.storage == "local" else k8s_storage(k8s)
    master = None if k8s is None else k8s.master
    with storage as (s3_env, services):
        s3 = None if services is None else services.settings
        base = _baseline(exp, seed, out, s3_env, s3, say, baselines, master)
        faulted = out / "faulted"
        control = Control(faulted / "failpoints" / "control.json")
        ctx = FaultContext(
            run=RunDir(faulted),
            mode=exp.format,
            cluster=exp.cluster,
            targets=LocalTargets(faulted) if k8s is None else k8s_targets(k8s, faulted),
            control=control,
            history=history,
            proxy=None if services is None else services.proxy,
            seed=seed,
        )
        if services is not None:
            ctx.proxy_record = services.record
        nemesis = Nemesis(ctx, [(s, fault_class(s.kind)(s)) for s in specs], say)
        say(f"faulted run: {len(specs)} fault(s) scheduled: " + ", ".join(f"{s.id} {s.kind}@batch {s.at.batch}" for s in specs))
        nemesis.prepare()
        try:
            exits = _faulted_run(exp, seed, faulted, control, s3_env, history, nemesis, say, out, master)
        finally:
            nemesis.stop()
        _judge(exp, faulted, s3, exits, nemesis, base, history, result, say)


@contextlib.contextmanager
def _storage(exp: Experiment, out: Path, seed: int) -> Iterator[tuple[dict[str, str], Any]]:
    """Local storage: nothing to start. S3: SeaweedFS behind the proxy, for this experiment only."""
    if exp.storage == "local":
        yield {}, None
        return
    from .infra import storage_services

    with storage_services(out / "infra", run_dir=out / "faulted", api=exp.proxy_api, seed=seed) as svc:
        env = {
            "STATEBED_S3_ENDPOINT": svc.endpoint,
            "AWS_ACCESS_KEY_ID": svc.settings.access_key,
            "AWS_SECRET_ACCESS_KEY": svc.settings.secret_key,
        }
        yield env, svc


def job_command(exp: Experiment, seed: int, run_dir: Path, *, resume: bool = False, master: str | None = None) -> list[str]:
    """The `statebed run` command line of one run of `exp` (the checkpoint on S3 when storage is s3;
    `master`: submit to that cluster, e.g. k8s://..., instead of starting one)."""
    cmd = [sys.executable, "-m", "statebed_cli.main", "run", "--run-dir", str(run_dir), "--no-verify", "--json"]
    cmd += [] if master is None else ["--master", master]
    if resume:
        return [*cmd, "--resume"]
    cmd += ["--seed", str(seed), "--workload", exp.workload, "--cluster", exp.cluster, "--workers", str(exp.workers)]
    cmd += ["--partitions", str(exp.partitions), "--batches", str(exp.batches), "--rows-per-batch", str(exp.rows_per_batch)]
    cmd += ["--keyspace", str(exp.keyspace), "--snapshot-interval", str(exp.snapshot_interval)]
    cmd += ["--native"] if exp.format == "native" else ["--format", exp.format]
    if exp.storage == "s3" and exp.format != "native":
        cmd += ["--checkpoint", f"s3://statebed/{run_dir.parent.name}-{run_dir.name}-{seed}"]
    return cmd


def _launch(cmd: list[str], env: dict[str, str], run_dir: Path, log: Path, history: History, say: _Progress, deadline: float) -> DriverExit:
    driver = DriverProcess(cmd, python_env(env), run_dir, log)
    say(f"driver pid {driver.pid}: {' '.join(cmd[3:])}")
    try:
        ex = driver.wait(deadline)
    finally:
        driver.stop()  # whatever it left (a killed driver's cluster, executors, Python workers)
        _add_processes(log.parent.parent / "processes.json", driver.processes())
    outcome: Outcome = "ok" if ex.code == 0 else "info"
    history.record(
        "driver", outcome, ex.start, ex.end, pid=ex.pid, exit_code=ex.code, timed_out=ex.timed_out, run_dir=str(run_dir), stderr=ex.stderr
    )
    say(f"driver pid {ex.pid} " + ("timed out" if ex.timed_out else f"exited {ex.code}"))
    return ex


def _add_processes(path: Path, procs: list[dict[str, Any]]) -> None:
    """Every process recorded below a driver, kept for the leak check (after stop, none may live)."""
    known = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps(known + procs, indent=2) + "\n")


def _baseline(
    exp: Experiment,
    seed: int,
    out: Path,
    env: dict[str, str],
    s3: S3Settings | None,
    say: _Progress,
    cache: dict[Any, Any] | None,
    master: str | None = None,
) -> Baseline | None:
    if "baseline" not in exp.verifiers:
        return None
    key = baseline_key(exp, seed)
    if cache is not None and key in cache:
        say(f"baseline: cached ({cache[key].run_dir})")
        return cache[key]  # type: ignore[no-any-return]
    run_dir = out / "baseline"
    say("baseline: the same run without faults")
    env = {**env, CONTROL_ENV: str(run_dir / "failpoints" / "control.json")}
    ex = _launch(
        job_command(exp, seed, run_dir, master=master),
        env,
        run_dir,
        out / "logs" / "baseline",
        History(out / "baseline-history.jsonl"),
        say,
        time.monotonic() + exp.timeout_s,
    )
    if ex.code != 0:
        base = Baseline(
            str(run_dir), None, {}, error=f"the baseline run {'timed out' if ex.timed_out else f'exited {ex.code}'} (see {ex.stderr})"
        )
    else:
        try:
            base = Baseline(str(run_dir), state_view(RunDir(run_dir, s3)), summarise(verify_run(run_dir, s3)))
        except StatebedError as e:
            base = Baseline(str(run_dir), None, {}, error=f"the baseline's final state is unreadable: {e}")
    if cache is not None and base.error is None:
        cache[key] = base
    return base


def _faulted_run(
    exp: Experiment,
    seed: int,
    run_dir: Path,
    control: Control,
    env: dict[str, str],
    history: History,
    nemesis: Nemesis,
    say: _Progress,
    out: Path,
    master: str | None = None,
) -> list[DriverExit]:
    """Drivers until one finishes, restarting with --resume after a death when a fault restarts drivers."""
    env = {**env, CONTROL_ENV: str(control.path)}
    deadline = time.monotonic() + exp.timeout_s
    exits: list[DriverExit] = []
    nemesis.start()
    while True:
        cmd = job_command(exp, seed, run_dir, resume=bool(exits), master=master)
        ex = _launch(cmd, env, run_dir, out / "logs" / f"faulted-{len(exits)}", history, say, deadline)
        exits.append(ex)
        if ex.code == 0 or ex.timed_out:
            return exits
        if not nemesis.restarts_driver() or len(exits) > exp.max_driver_restarts:
            return exits
        nemesis.before_resume()
        say(f"restarting the driver with --resume ({len(exits)}/{exp.max_driver_restarts})")


def _judge(
    exp: Experiment,
    run_dir: Path,
    s3: S3Settings | None,
    exits: list[DriverExit],
    nemesis: Nemesis,
    base: Baseline | None,
    history: History,
    result: ExperimentResult,
    say: _Progress,
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
    for note in add_run_ops(history, run):
        result.reasons.append(f"history: {note}")
    result.faults = nemesis.evidence()
    result.faults_fired = sum(1 for f in result.faults if f["fired"] is True)
    for f in result.faults:
        if f["fired"] is not True:
            verdicts.append("unknown")
            result.reasons.append(f"fault {f['id']} {f['kind']} did not provably fire ({f['fired']}): {f['detail']}")
    if not run.exists():
        result.valid, result.exit_code = merge_verdicts([*verdicts, "unknown"]), 3
        result.reasons.append("the faulted run left no run directory")
        return
    composite = verify_run(run_dir, s3)
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
    if base is not None and last.code == 0:
        verdicts.append(_compare(run, base, result))
    elif base is not None:
        result.reasons.append("baseline: not compared (the faulted run did not finish)")
    result.valid = merge_verdicts(verdicts)
    result.exit_code = EXIT_CODES[result.valid]
    if result.valid is not True and not result.reasons and result.anomalies:
        result.reasons.append(f"{len(result.anomalies)} anomal{'y' if len(result.anomalies) == 1 else 'ies'}")
    say("checks: " + ", ".join(f"{k} {v.get('valid')}" for k, v in result.checks.items()) + f"; baseline_equal {result.baseline_equal}")


def _compare(run: RunDir, base: Baseline, result: ExperimentResult) -> Verdict:
    result.checks["baseline"] = {"run_dir": base.run_dir, "verdicts": base.verdicts, "error": base.error}
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
