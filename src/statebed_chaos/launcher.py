"""The launcher: describe one statebed job and start it under a nemesis. Used by `statebed chaos run`
(`experiment_runner.py`: baseline and faulted run) and `statebed load run` (`statebed_load.load_run`:
the same job fed by the ingest service under Locust); `judge.py` decides what the run proved.

It owns what both need to start a run: the storage (local, or MinIO behind the fault proxy for
this run only), the run's description (`describe`: its `run.json`, written by
`statebed_job.runner.describe_run`), the driver's launch and the record of every process below
it (for stop and the leak check), and the nemesis.

The job runs as a subprocess started from its run directory (`python -m statebed_job RUN_DIR
--json`, never the `statebed` command above this layer), so a fault can kill its driver and the
launcher survives.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from statebed_base.processes import ProcessIdentity, stop_all, track
from statebed_job.config import ClusterKind, JobOptions
from statebed_job.runner import describe_run
from statebed_model.experimentdir import ExperimentDir
from statebed_model.rundir import RunDir
from statebed_store.failpoint_control import Control
from statebed_store.failpoints import CONTROL_ENV
from statebed_verify.history import History, Outcome

from .driver_process import DriverExit, DriverProcess, python_env
from .experiment import Experiment
from .faults import FaultContext, FaultSpec, fault_class
from .nemesis import Nemesis
from .targets.base import Targets
from .targets.local import LocalTargets

__all__ = [
    "Say",
    "Tracker",
    "describe",
    "experiment_fields",
    "faulted_run",
    "job_options",
    "launch",
    "make_nemesis",
    "past_proxy",
    "run_command",
    "storage",
]

Say = Callable[[str], None]
BUCKET = "s3://statebed"  # an s3 experiment's checkpoints, one prefix per run


# -- storage and the job's description -------------------------------------------------------


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
    no verifiers (the judge judges); `resume`: continue it after a death; `master`: submit to that cluster."""
    cmd = [sys.executable, "-m", "statebed_job", str(run_dir), "--json"]
    cmd += [] if master is None else ["--master", master]
    cmd += [] if metrics_port is None else ["--metrics-port", str(metrics_port)]
    return [*cmd, "--resume"] if resume else cmd


def experiment_fields(exp: Experiment, checkpoint_name: str) -> dict[str, Any]:
    """The job options `exp` fixes whatever feeds the job (workload, cluster, state partitions,
    snapshots, its faults' Spark conf; on s3 the checkpoint in the bucket, `checkpoint_name` its
    prefix, and Spark's checkpoint file manager): a chaos run and a load run of the same experiment share them. The generated input's
    sizes, the format and the seed are each caller's."""
    fields: dict[str, Any] = {
        "workload": exp.workload,
        "cluster": cast(ClusterKind, exp.cluster),
        "workers": exp.workers,
        "partitions": exp.partitions,
        "snapshot_interval": exp.snapshot_interval,
        "extra_conf": exp.spark_conf(),
    }
    if exp.storage == "s3":  # statebed's store or Spark's own (through S3A) in a bucket
        fields["checkpoint"] = f"{BUCKET}/{checkpoint_name}"
        fields["checkpoint_file_manager"] = exp.checkpoint_file_manager  # abortable: only in a bucket
    return fields


def job_options(exp: Experiment, seed: int, run_dir: Path) -> JobOptions:
    """The options of one run of `exp` (the checkpoint on S3 when storage is s3)."""
    return JobOptions(
        **experiment_fields(exp, f"{run_dir.parent.name}-{run_dir.name}-{seed}"),
        batches=exp.batches,
        rows_per_batch=exp.rows_per_batch,
        keyspace=exp.keyspace,
        format=exp.format,
        seed=seed,
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
