"""The partitioner a `statebed run` routes each workload's state keys with.

`query.py` runs `df.repartition(P, "key")` on the long `key` column, so a task of partition
p sees exactly the records whose `pmod(Murmur3(key), P)` is p; count and sample3 keep
their state under keys that start with that long (8 bytes, big-endian). bucket-collect's
tasks draw buckets among the ones they own (`bucket % P == p`, see its module). The run
records this in its checkpoint (`partitioner.json`) and the verifiers check every state
key against it.
"""

from __future__ import annotations

from statebed_base.errors import UsageError
from statebed_store.partitioner import Partitioner

__all__ = ["run_partitioner"]

_SCHEMES = {"count": "spark-murmur3", "sample3": "spark-murmur3", "bucket-collect": "modulo"}


def run_partitioner(workload: str, partitions: int) -> Partitioner:
    try:
        scheme = _SCHEMES[workload]
    except KeyError:
        raise UsageError(f"no partitioner is known for workload {workload!r} (known: {', '.join(_SCHEMES)})") from None
    return Partitioner(scheme, partitions, "i64be", origin=f"statebed run, workload {workload}")
