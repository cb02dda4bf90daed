"""The job's options in one place, with defaults that run on a laptop in under a minute."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from statebed_store.errors import UsageError

__all__ = ["SPECULATION_CONF", "JobOptions"]

Mode = Literal["v2", "v1", "native"]
ClusterKind = Literal["local", "standalone"]

# Speculation tuned so a task that stalls gets a copy within seconds (Spark's defaults
# wait for 75% of tasks and a 1.5x median, checked every 100 ms).
SPECULATION_CONF = {
    "spark.speculation": "true",
    "spark.speculation.interval": "200ms",
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.minTaskRuntime": "500ms",
}


@dataclass
class JobOptions:
    workload: str = "count"
    batches: int = 6
    partitions: int = 3
    rows_per_batch: int = 20_000
    keyspace: int = 5_000
    mode: Mode = "v2"
    cluster: ClusterKind = "local"
    workers: int = 2  # standalone only
    checkpoint: str = "checkpoint"  # relative to the run directory, or a path / s3:// URL
    snapshot_interval: int = 10
    # Make attempt 0 of one task slow but alive after its commit ("batch:partition:ms"):
    # Spark then launches a speculative copy and both attempts write files.
    slow_task: str | None = None
    extra_conf: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in ("v2", "v1", "native"):
            raise UsageError(f"mode must be v2, v1 or native, got {self.mode!r}")
        if self.cluster not in ("local", "standalone"):
            raise UsageError(f"cluster must be local or standalone, got {self.cluster!r}")
        for name in ("batches", "partitions", "rows_per_batch", "keyspace", "workers", "snapshot_interval"):
            if int(getattr(self, name)) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.slow_task is not None:
            self.slow_task_spec()

    def slow_task_spec(self) -> tuple[int, int, int] | None:
        if self.slow_task is None:
            return None
        try:
            b, p, ms = (int(x) for x in self.slow_task.split(":"))
        except ValueError:
            raise UsageError(f"--slow-task wants BATCH:PARTITION:MILLISECONDS, got {self.slow_task!r}") from None
        return b, p, ms

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
