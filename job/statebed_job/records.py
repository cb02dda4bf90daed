"""Input records, derived deterministically from the rate source's sequence numbers.

Spark's `rate-micro-batch` source emits `value` = 0, 1, 2, ... with exactly
`rowsPerBatch` rows per batch, so batch `b` holds values `[b*R, (b+1)*R)`. Each value
becomes one record: `id = value` (unique), `key` a multiplicative hash of it into the key
space, `value` a small integer to sum. The same formulas exist as Spark columns (for the
job) and as numpy (for native mode, whose inputs the verifier rebuilds from offsets).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from .rundir import INPUT_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["MULTIPLIER", "record_columns", "records_for"]

MULTIPLIER = 2_654_435_761  # Knuth's multiplicative hash; value * MULTIPLIER fits in int64 below 3.4e9 values
VALUE_MOD = 97


def records_for(start: int, end: int, keyspace: int) -> pa.Table:
    """The records of rate values `[start, end)`."""
    v = np.arange(start, end, dtype=np.int64)
    return pa.table({"id": v, "key": (v * MULTIPLIER) % keyspace, "value": v % VALUE_MOD}, schema=INPUT_SCHEMA)


def record_columns(keyspace: int) -> list[Column]:
    """The same derivation as Spark columns over the rate source's `value`."""
    from pyspark.sql import functions as F

    v = F.col("value").cast("long")
    return [
        v.alias("id"),
        F.pmod(v * F.lit(MULTIPLIER), F.lit(keyspace)).cast("long").alias("key"),
        F.pmod(v, F.lit(VALUE_MOD)).cast("long").alias("value"),
    ]
