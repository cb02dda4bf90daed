"""The `statebed run` command line that gives back a run's options: the report's reproduce line.

The one table of which `statebed run` flag sets which `JobOptions` field (`FLAGS`): `run_argv`
builds a command line from options (the real CLI parser turns it back into exactly the same
options, tests/harness/test_job_argv.py), and the CLI names a bad field by its flag
(`flag_of`). The job knows no flag: its options validate by field name.
"""

from __future__ import annotations

from statebed_job.config import JobOptions

__all__ = ["FLAGS", "flag_of", "run_argv"]

# JobOptions field -> its `statebed run` flag (workload, mode, seed and extra_conf: see run_argv)
FLAGS = {
    "batches": "--batches",
    "partitions": "--partitions",
    "rows_per_batch": "--rows-per-batch",
    "keyspace": "--keyspace",
    "cluster": "--cluster",
    "workers": "--workers",
    "checkpoint": "--checkpoint",
    "snapshot_interval": "--snapshot-interval",
    "hedge": "--hedge",
    "slow_task": "--slow-task",
    "source": "--source",
    "landing": "--landing",
    "duration_s": "--duration",
    "until_records": "--until-records",
    "stop_file": "--stop-file",
    "trigger_ms": "--trigger-ms",
    "retain": "--retain",
    "maintenance_interval_s": "--maintenance-interval",
    "sst_grace_s": "--sst-grace",
    "checkpoint_file_manager": "--checkpoint-file-manager",
}
_OTHER = {"workload": "--workload", "format": "--format", "seed": "--seed", "extra_conf": "--conf"}


def flag_of(field: str) -> str:
    """The `statebed run` flag of a JobOptions field (the field itself when no flag sets it)."""
    return FLAGS.get(field) or _OTHER.get(field) or field


def run_argv(opts: JobOptions) -> list[str]:
    """The `statebed run` options that give back exactly `opts`. Workload, mode and seed always;
    every other field only when it differs from the default. `stop_file` round-trips when absolute
    (the CLI makes it so)."""
    argv = ["--workload", opts.workload, *(["--native"] if opts.fmt.legacy else ["--format", opts.format])]
    argv += ["--seed", str(opts.seed)]
    default = JobOptions(seed=0)
    for name, flag in FLAGS.items():
        value = getattr(opts, name)
        if value is not None and value != getattr(default, name):
            argv += [flag, repr(value) if isinstance(value, float) else str(value)]
    for key, val in opts.extra_conf.items():
        argv += ["--conf", f"{key}={val}"]
    return argv
