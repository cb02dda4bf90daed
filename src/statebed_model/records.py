"""Input records, derived deterministically from their sequence numbers.

A run's generator makes batch `b` of `R` records from sequence numbers `[b*R, (b+1)*R)`.
Each number `n` becomes one record: `id = n` (unique), `key` a multiplicative hash of `n`
into the key space, `value` a small integer to sum. Because the derivation is pure, the
generator's records are ground truth a verifier can rebuild without trusting anything the
system under test wrote.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .rundir import INPUT_SCHEMA

__all__ = ["MULTIPLIER", "records_for"]

MULTIPLIER = 2_654_435_761  # Knuth's multiplicative hash; n * MULTIPLIER fits in int64 below 3.4e9 records
VALUE_MOD = 97


def records_for(start: int, end: int, keyspace: int) -> pa.Table:
    """The records of sequence numbers `[start, end)`."""
    v = np.arange(start, end, dtype=np.int64)
    return pa.table({"id": v, "key": (v * MULTIPLIER) % keyspace, "value": v % VALUE_MOD}, schema=INPUT_SCHEMA)
