"""What a chaos run's history shows actually happened, as counts: the matrix keeps them per cell
(a valid cell's directory is removed at the end, its counts stay in the matrix's record)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from statebed_verify.history import Op

__all__ = ["observed_counts"]


def observed_counts(history: Iterable[Op]) -> dict[str, int]:
    """Speculative attempts, task retries, driver restarts and batch reruns in one history."""
    ops = list(history)
    attempts = [op for op in ops if op.type == "task-attempt"]
    runs = Counter(op.fields.get("batch") for op in ops if op.type == "batch")
    return {
        "speculative_attempts": sum(1 for op in attempts if op.fields.get("speculative")),
        "task_retries": sum(1 for op in attempts if not op.fields.get("speculative") and int(op.fields.get("attempt") or 0) > 0),
        "driver_restarts": max(sum(1 for op in ops if op.type == "driver") - 1, 0),
        "batch_reruns": sum(n - 1 for n in runs.values()),
    }
