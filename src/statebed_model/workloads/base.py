"""What a workload is: how a task turns a batch into state updates and outputs, and how
a verifier judges the final state (an oracle when deterministic, invariants otherwise).

Both halves live with the workload because both are its semantics. Tasks call `apply`
once per partition and batch with the whole partition as one Arrow table; verifiers call
`check` with the committed inputs, committed outputs and final state, and get findings.
No Spark import here: verifiers run without a JVM.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from statebed_store import StateStore

__all__ = ["Finding", "TaskContext", "Workload", "decode_i64", "encode_i64", "fixed_binary"]


@dataclass(frozen=True)
class TaskContext:
    partition: int
    partitions: int
    batch_id: int
    rng: np.random.Generator  # from (run seed, batch, partition, attempt): attempts differ, as in Spark; a run replays


@dataclass(frozen=True)
class Finding:
    """One violated expectation; the verifier turns it into an anomaly."""

    kind: str
    detail: str
    keys: list[Any] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    records: list[int] = field(default_factory=list)


def fixed_binary(rows: np.ndarray, width: int) -> pa.Array:
    """A binary array whose i-th value is the `width` bytes of `rows[i]` (no Python per row)."""
    data = np.ascontiguousarray(rows)
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(data), [None, pa.py_buffer(data.tobytes())])
    return fixed.cast(pa.binary())


def encode_i64(values: np.ndarray) -> pa.Array:
    """int64 -> 8-byte big-endian binary: RocksDB's byte order is numeric order for keys >= 0."""
    return fixed_binary(np.asarray(values, dtype=">i8"), 8)


def decode_i64(blobs: Sequence[bytes | None], width: int = 1) -> np.ndarray:
    """Values of `width` big-endian int64 each; None (absent) decodes as zeros. Shape (n, width)."""
    zero = bytes(8 * width)
    joined = b"".join(zero if b is None else b for b in blobs)
    return np.frombuffer(joined, dtype=">i8").astype(np.int64).reshape(len(blobs), width)


class Workload(ABC):
    name: ClassVar[str]
    output_schema: ClassVar[pa.Schema]
    description: ClassVar[str]

    @abstractmethod
    def apply(self, txn: StateStore, records: pa.Table, ctx: TaskContext) -> pa.Table:
        """Update state for one partition's records of a batch; return that batch's output rows."""

    @abstractmethod
    def check(self, inputs: pa.Table, outputs: pa.Table, state: Iterable[tuple[bytes, bytes]]) -> list[Finding]:
        """Judge the final state. `inputs`/`outputs` carry a `batch` column; `state` is every (key, value)."""

    @abstractmethod
    def baseline_view(self, state: Iterable[tuple[bytes, bytes]]) -> dict[Any, Any]:
        """What every valid execution's final state agrees on, whatever its attempt numbers drew:
        a chaos run's final state is compared with a fault-free run's through this view."""

    def empty_output(self) -> pa.Table:
        return self.output_schema.empty_table()
