"""The workloads a run can use, by name (`--workload`)."""

from __future__ import annotations

from statebed_base.errors import UsageError

from .base import Finding, TaskContext, Workload
from .bucket_collect import BucketCollect
from .count import Count
from .sample3 import Sample3

__all__ = ["WORKLOADS", "Finding", "TaskContext", "Workload", "get_workload"]

WORKLOADS: dict[str, type[Workload]] = {w.name: w for w in (Count, BucketCollect, Sample3)}


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]()
    except KeyError:
        raise UsageError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}") from None
