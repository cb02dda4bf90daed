"""The `statebed run` command line that gives back a run's options: the report's reproduce line.

`run_argv` builds a command line from options by the table of run options
(`statebed_job.config.Flag`, the fields' flags): the real CLI parser turns it back into exactly
the same options (tests/run_description/test_job_argv.py).
"""

from __future__ import annotations

from statebed_job.config import JobOptions, run_flags

__all__ = ["run_argv"]

_ALWAYS = ("workload", "format", "seed", "extra_conf")  # written first (or per pair), not by default


def run_argv(opts: JobOptions) -> list[str]:
    """The `statebed run` options that give back exactly `opts`. Workload, mode and seed always;
    every other field only when it differs from the default. `stop_file` round-trips when absolute
    (the CLI makes it so)."""
    argv = ["--workload", opts.workload, *(["--native"] if opts.format.legacy else ["--format", opts.format])]
    argv += ["--seed", str(opts.seed)]
    default = JobOptions(seed=0)
    for name, flag in run_flags().items():
        value = getattr(opts, name)
        if name not in _ALWAYS and value is not None and value != getattr(default, name):
            argv += [flag.name, repr(value) if isinstance(value, float) else str(value)]
    for key, val in opts.extra_conf.items():
        argv += ["--conf", f"{key}={val}"]
    return argv
