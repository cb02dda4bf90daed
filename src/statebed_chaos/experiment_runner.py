"""Run one experiment: a fault-free baseline, the faulted run with the nemesis, then the verdict.

    <out>/experiment.yaml   the experiment as run: realised fault list, seed (replays it)
    <out>/baseline/         the fault-free run's directory (same seed, same input)
    <out>/faulted/          the faulted run's directory (checkpoint, event log, attempts, firings)
    <out>/history.jsonl     every fault, driver process, batch and task attempt (Jepsen's history)
    <out>/logs/             each driver process's stdout (its JSON summary) and stderr
    <out>/processes.json    every process recorded below the drivers (for the leak check)
    <out>/verdict.json      the verdict: checks, anomalies, faults with their proof

The launcher (`launcher.py`) runs the job under the nemesis and the judge (`judge.py`) decides:
verdict false > unknown > true over the verifiers (lineage, state, attempts), the baseline
comparison and the faults-fired accounting (a scheduled fault without proof that it fired makes
the run unknown, never valid). A driver that dies without a scheduled driver-killing fault, or
a run past `timeout_s`, is a harness failure: unknown.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import replace
from pathlib import Path

from statebed_base.errors import StatebedError
from statebed_model.experimentdir import ExperimentDir, control_file
from statebed_model.rundir import RunDir
from statebed_store import S3Settings
from statebed_store.failpoint_control import Control
from statebed_store.failpoints import CONTROL_ENV
from statebed_verify import EXIT_CODES, summarise, verify_run
from statebed_verify.history import History

from .baseline import Baseline, baseline_key, state_view
from .baseline_cache import Baselines
from .experiment import Experiment, on_backend
from .faults import FaultSpec
from .judge import EXIT_HARNESS, ExperimentResult, judge
from .k8s_backend import K8sSettings, k8s_storage, k8s_targets
from .launcher import describe, faulted_run, launch, make_nemesis, run_command, storage
from .schedule import realise
from .shared_cluster import SharedCluster
from .targets.base import Targets
from .targets.local import LocalTargets

__all__ = ["ExperimentResult", "run_experiment"]


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
    baselines: Baselines | None = None,
    k8s: K8sSettings | None = None,
    cluster: SharedCluster | None = None,
) -> ExperimentResult:
    """Run `exp` into `out_dir` (must not hold a run yet). KeyboardInterrupt stops everything, then propagates.

    `k8s`: the Kubernetes backend (drivers submit to Kubernetes, faults act on pods, storage is the
    chart's MinIO behind Toxiproxy); None: everything on this machine. `cluster`: on a standalone
    experiment, the matrix's long-lived cluster both runs submit to; None: each run starts its own."""
    t0 = time.monotonic()
    exp = on_backend(exp, "local" if k8s is None else "k8s")
    seed = seed if seed is not None else exp.seed if exp.seed is not None else random.SystemRandom().randrange(2**31)
    xdir = ExperimentDir(out_dir)
    xdir.root.mkdir(parents=True, exist_ok=True)
    specs = realise(exp, seed)
    realised = replace(exp, seed=seed, faults=specs, schedule=None)
    xdir.write_experiment(realised.to_yaml())
    say = _Progress(progress, exp.name)
    history = History(xdir.history)
    result = ExperimentResult(
        name=exp.name,
        seed=seed,
        valid="unknown",
        anomalies=[],
        faults=[],
        faults_fired=0,
        faults_scheduled=len(specs),
        baseline_equal=None,
        run_dir=str(xdir.root),
        seconds=0.0,
        exit_code=EXIT_CODES["unknown"],
        reproduce=xdir.reproduce(seed),
    )
    try:
        _run(realised, specs, seed, xdir, history, say, result, baselines, k8s, cluster)
    except KeyboardInterrupt:
        result.reasons.append("interrupted: every process of the run was stopped")
        raise
    except StatebedError as e:
        result.error, result.valid, result.exit_code = str(e), "unknown", EXIT_HARNESS
        result.reasons.append(f"harness error: {e}")
        say(f"harness error: {e}")
    finally:
        result.seconds = round(time.monotonic() - t0, 3)
        xdir.write_verdict(result.to_json())
    say(f"verdict {result.valid} (exit {result.exit_code}) in {result.seconds:.0f} s: {xdir.verdict}")
    return result


def _run(
    exp: Experiment,
    specs: list[FaultSpec],
    seed: int,
    xdir: ExperimentDir,
    history: History,
    say: _Progress,
    result: ExperimentResult,
    baselines: Baselines | None,
    k8s: K8sSettings | None = None,
    cluster: SharedCluster | None = None,
) -> None:
    faulted = xdir.faulted
    services_of_run = storage(exp, xdir.root, faulted, seed) if k8s is None or exp.storage == "local" else k8s_storage(k8s)
    shared = cluster if k8s is None and exp.cluster == "standalone" else None
    with services_of_run as (s3_env, services):
        s3 = None if services is None else services.settings
        master = k8s.master if k8s is not None else None if shared is None else shared.master(exp.workers)
        base = _baseline(exp, seed, xdir, s3_env, s3, say, baselines, master)
        control = Control(control_file(faulted))
        if shared is not None:
            master = shared.master(exp.workers)  # checked again: restarted if a daemon is gone
            say(f"standalone cluster: the matrix's ({master}, {shared.dir})")
            targets: Targets | None = LocalTargets(faulted, cluster_dir=shared.dir, shared_cluster=True)
        else:
            targets = None if k8s is None else k8s_targets(k8s, faulted)
        nemesis = make_nemesis(exp, specs, faulted, control, history, services, seed, say, targets)
        say(f"faulted run: {len(specs)} fault(s) scheduled: " + ", ".join(f"{s.id} {s.kind}@batch {s.at.batch}" for s in specs))
        nemesis.prepare()
        try:
            exits = faulted_run(xdir, exp, seed, faulted, control, s3_env, history, nemesis, say, master)
        finally:
            nemesis.stop()
        judge(exp, faulted, s3, exits, nemesis, base, history, result, say)


def _baseline(
    exp: Experiment,
    seed: int,
    xdir: ExperimentDir,
    env: dict[str, str],
    s3: S3Settings | None,
    say: _Progress,
    cache: Baselines | None,
    master: str | None = None,
) -> Baseline | None:
    if "baseline" not in exp.verifiers:
        return None
    key = baseline_key(exp, seed)
    cached = None if cache is None else cache.get(key)
    if cached is not None:
        say(f"baseline: cached ({cached.run_dir})")
        return cached
    run_dir = xdir.baseline
    say("baseline: the same run without faults")
    env = {**env, CONTROL_ENV: str(control_file(run_dir))}
    describe(exp, seed, run_dir)
    cmd = run_command(run_dir, master=master)
    ex = launch(xdir, cmd, env, run_dir, "baseline", History(xdir.baseline_history), say, time.monotonic() + exp.timeout_s)
    if ex.code != 0:
        base = Baseline(
            str(run_dir), None, {}, error=f"the baseline run {'timed out' if ex.timed_out else f'exited {ex.code}'} (see {ex.stderr})"
        )
    else:
        try:
            base = Baseline(str(run_dir), state_view(RunDir(run_dir, s3)), summarise(verify_run(run_dir, s3)))
        except StatebedError as e:
            base = Baseline(str(run_dir), None, {}, error=f"the baseline's final state is unreadable: {e}")
    if cache is not None:
        cache.put(key, base, durable=exp.storage == "local")
    return base
