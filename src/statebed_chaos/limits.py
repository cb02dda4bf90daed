"""Upper bounds of every size and duration a user gives an experiment (or `statebed load run`).

Each is far above what a real run on one machine or a small cluster wants, and far below
what would exhaust it before the first batch: a typo (`batches: 10000000000`) or a hostile
file is refused at load with the limit in the message, instead of an hour of work, a full
disk or an integer Spark cannot take. Raise one here (and nowhere else) when a real run
needs more.
"""

from __future__ import annotations

__all__ = ["MAX_DURATION_S", "MAX_EXPERIMENT_BYTES", "MAX_FAULT_S", "MAX_PARAM_MS", "MAX_SEED", "MAX_SIZES", "MAX_TIMEOUT_S"]

MAX_SIZES: dict[str, int] = {
    # one worker JVM per loopback address: a 2-core laptop runs 2, a big box a few dozen
    "workers": 20,
    # shuffle/state partitions: each is a RocksDB instance and a file tree per version; Spark's default is 200
    "partitions": 1024,
    # micro-batches of one run: at ~1 s per batch, 100000 is more than a day of batches
    "batches": 100_000,
    # records per batch: 500k was measured at ~5 s per batch here; 10M is still one (large) batch in memory
    "rows_per_batch": 10_000_000,
    # distinct keys: 1M measured here; 100M keys of state is ~GBs per run, far beyond any fault's needs
    "keyspace": 100_000_000,
    # versions between snapshots: more than batches never snapshots, which 100000 already says
    "snapshot_interval": 100_000,
    # driver restarts after driver-killing faults: each restart re-runs Spark's start-up
    "max_driver_restarts": 100,
    # faults of one run, explicit and drawn by `schedule.random.count`: one per batch of a long run is plenty
    "faults": 1000,
    # Locust users of `statebed load run`: a 2-core runner saturates long before
    "users": 10_000,
}

# One run (baseline or faulted) before everything is killed: a 100000-batch run needs days
MAX_TIMEOUT_S = 7 * 24 * 3600.0
# A fault's window (`for_s`), wait (`after_s`, `wait_s`): a fault lasting over an hour is an outage, not a fault
MAX_FAULT_S = 3600.0
# Millisecond params of faults (`ms`, `hold_ms`, toxics' `latency`, `timeout`, ...): same hour
MAX_PARAM_MS = 3_600_000
# `--duration` of `statebed run` (continuous ingest) and `statebed load run`: a day of load
MAX_DURATION_S = 24 * 3600.0
# An experiment file: the examples are < 2 KiB; more is not an experiment someone wrote
MAX_EXPERIMENT_BYTES = 1 << 20
# `seed`: it becomes a Java long in Spark's conf and task seeds
MAX_SEED = 2**63 - 1
