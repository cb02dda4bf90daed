"""`python -m statebed_job.cds_dump FORMAT RUN_DIR`: the small run whose classes `jvm_startup`
archives, the job itself in this process (no CLI above it). Its own module: `jvm_startup` is
imported by the session and the cluster, and this one imports the runner that imports both."""

from __future__ import annotations

import sys

from statebed_store.formats import get_format

from .config import JobOptions
from .runner import run_job


def main(argv: list[str]) -> int:
    fmt, run_dir = argv
    run_job(
        run_dir, JobOptions(workload="count", format=get_format(fmt), batches=3, rows_per_batch=1000, keyspace=100, seed=1), progress=False
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
