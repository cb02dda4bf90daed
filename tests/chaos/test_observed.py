"""`observed_counts`: what a chaos history shows happened, as the matrix keeps it per cell."""

from __future__ import annotations

from statebed_chaos.observed import observed_counts
from statebed_verify.history import Op


def _attempt(batch: int, attempt: int, speculative: bool) -> Op:
    return Op("task-attempt", 1.0, 2.0, "ok", {"batch": batch, "partition": 0, "attempt": attempt, "speculative": speculative})


def test_counts_speculation_retries_restarts_and_reruns() -> None:
    ops = [
        Op("driver", 0.0, 5.0, "info", {"exit_code": 137}),
        Op("driver", 6.0, 9.0, "ok", {"exit_code": 0}),
        _attempt(0, 0, False),
        _attempt(1, 0, False),
        _attempt(1, 1, True),  # a speculative copy
        _attempt(2, 1, False),  # a retry after a failure
        Op("batch", 1.0, 2.0, "ok", {"batch": 1, "status": "committed"}),
        Op("batch", 7.0, 7.5, "ok", {"batch": 1, "status": "re-emitted"}),  # run again by the resumed driver
        Op("batch", 8.0, 9.0, "ok", {"batch": 2, "status": "committed"}),
        Op("fault", 3.0, 3.1, "ok", {"id": "f1", "kind": "restart-driver", "phase": "inject"}),
    ]
    assert observed_counts(ops) == {"speculative_attempts": 1, "task_retries": 1, "driver_restarts": 1, "batch_reruns": 1}


def test_an_empty_history_observed_nothing() -> None:
    assert observed_counts([]) == {"speculative_attempts": 0, "task_retries": 0, "driver_restarts": 0, "batch_reruns": 0}
