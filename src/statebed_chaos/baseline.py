"""The fault-free baseline (RisingWave's practice): the same experiment, same seed, no faults;
the chaos run's final state must agree with it on what every valid execution agrees on
(`Workload.baseline_view`: count's (count, sum) per key, bucket-collect's multiset of ids,
sample3's records seen per key).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statebed_model.rundir import RunDir
from statebed_model.workloads import get_workload
from statebed_verify.state import final_state

from .experiment import Experiment

__all__ = ["Baseline", "baseline_key", "compare_views", "state_view"]

SHOW = 5


@dataclass
class Baseline:
    """A finished fault-free run: where it is, its verdicts, and its final state's view (None: unreadable)."""

    run_dir: str
    view: dict[Any, Any] | None
    verdicts: dict[str, Any]
    error: str | None = None


def baseline_key(exp: Experiment, seed: int) -> tuple[Any, ...]:
    """What a baseline depends on: everything but the faults (a matrix runs one per key)."""
    return (
        exp.workload,
        exp.format.name,
        exp.storage,
        exp.cluster,
        exp.workers,
        exp.partitions,
        exp.batches,
        exp.rows_per_batch,
        exp.keyspace,
        exp.snapshot_interval,
        tuple(sorted(exp.spark_conf().items())),
        seed,
    )


def state_view(run: RunDir) -> dict[Any, Any]:
    return get_workload(run.read_info().workload).baseline_view(final_state(run))


def compare_views(faulted: dict[Any, Any], baseline: dict[Any, Any]) -> list[str]:
    """Differences, one line each (empty when equal)."""
    out = []
    missing = sorted(baseline.keys() - faulted.keys())
    extra = sorted(faulted.keys() - baseline.keys())
    differ = sorted(k for k in faulted.keys() & baseline.keys() if faulted[k] != baseline[k])
    if missing:
        out.append(f"{len(missing)} key(s) of the baseline are missing, e.g. {missing[:SHOW]}")
    if extra:
        out.append(f"{len(extra)} key(s) are not in the baseline, e.g. {extra[:SHOW]}")
    if differ:
        out.append(f"{len(differ)} key(s) differ, e.g. " + "; ".join(f"{k}: {faulted[k]} (baseline {baseline[k]})" for k in differ[:SHOW]))
    return out
