"""The workloads as plain Spark stateful queries on Spark's own RocksDB store (native mode).

Each is written the way the seed's appendix writes it, so a native run asks Spark's store
the appendix's question:

* `count`: `groupBy(key).agg(count, sum(value))` (deterministic, exact oracle).
* `bucket-collect`: a `rand()`-bucketed key, `groupBy(bucket).agg(collect_list(id))`. The
  bucket is drawn in the map stage with the seed `rand()` draws when the query is planned, so
  a batch replayed after a driver restart distributes its records afresh (the appendix's
  "Task1 puts foo in 6, Task2 in 8").
* `sample3`: `transformWithStateInPandas` with a ListState keep-3 reservoir per key (the
  appendix's second example): below 3 elements it appends (a RocksDB merge), a replacement
  rewrites the list. Its draws derive from (run seed, batch, partition, attempt, key), so two
  attempts of one task keep different samples and a run replays. No timers (`timeMode`
  "None"): processing-time timers under `Trigger.AvailableNow` never let the query end.

The batch's output is cast to the workload's `output_schema` (the same sink statebed mode
writes), so one `Workload.check` judges both stores.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from statebed_base.errors import UsageError
from statebed_model.native_state import NATIVE_WORKLOADS, SAMPLE_FAMILY, SEEN_FAMILY
from statebed_model.workloads.bucket_collect import BUCKETS
from statebed_model.workloads.sample3 import K

from .config import JobOptions

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

__all__ = ["native_transform"]

_MASK = (1 << 63) - 1


def native_transform(src: DataFrame, opts: JobOptions) -> DataFrame:
    """The workload's stateful query over the `(id, key, value)` source; update-mode output."""
    from pyspark.sql import functions as F

    if opts.workload == "count":
        return src.groupBy("key").agg(F.count(F.lit(1)).alias("count"), F.sum("value").alias("sum"))
    if opts.workload == "bucket-collect":
        bucketed = src.withColumn("bucket", (F.rand() * BUCKETS).cast("long"))
        agg = bucketed.groupBy("bucket").agg(F.collect_list("id").alias("ids"))
        id_sum = F.aggregate("ids", F.lit(0).cast("long"), lambda acc, x: acc + x).bitwiseAND(F.lit(_MASK))
        return agg.select("bucket", F.size("ids").cast("long").alias("size"), id_sum.alias("id_sum"))
    if opts.workload == "sample3":
        assert opts.seed is not None
        return src.groupBy("key").transformWithStateInPandas(
            _sample3_processor(opts.seed), "key long, sample array<long>, seen long", "Update", "None"
        )
    raise UsageError(f"native mode runs the workloads {', '.join(NATIVE_WORKLOADS)} (asked: {opts.workload})")


def _sample3_processor(seed: int) -> Any:
    """A `Sample3Processor` (pyspark's StatefulProcessor, imported only where Spark runs)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Sample3Processor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.sample = handle.getListState(SAMPLE_FAMILY, "id long")
            self.seen = handle.getValueState(SEEN_FAMILY, "seen long")

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], _timer_values: Any) -> Iterator[pd.DataFrame]:
            import pandas as pd

            (k,) = key
            sample = [int(t[0]) for t in self.sample.get()] if self.sample.exists() else []
            seen_row = self.seen.get() if self.seen.exists() else None
            seen = int(seen_row[0]) if seen_row is not None else 0
            ids = sorted(int(i) for pdf in rows for i in pdf["id"].tolist())
            held = len(sample)
            sample, seen, rewritten = _reservoir(_rng(seed, int(k)), sample, seen, ids)
            if rewritten:  # an element dropped: the list is rewritten
                self.sample.put([(i,) for i in sample])
            elif len(sample) > held:  # only appends: RocksDB merges
                self.sample.appendList([(i,) for i in sample[held:]])
            self.seen.update((seen,))
            yield pd.DataFrame({"key": [int(k)], "sample": [sorted(sample)], "seen": [seen]})

        def close(self) -> None:
            pass

    return Sample3Processor()


def _rng(seed: int, key: int) -> random.Random:
    """Draws from (run seed, batch, partition, attempt, key): attempts differ, a run replays."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    where = (None, None, None) if ctx is None else (ctx.getLocalProperty("streaming.sql.batchId"), ctx.partitionId(), ctx.attemptNumber())
    return random.Random(f"{seed}:{where[0]}:{where[1]}:{where[2]}:{key}")


def _reservoir(rng: random.Random, sample: list[int], seen: int, ids: list[int]) -> tuple[list[int], int, bool]:
    """Reservoir sampling of `ids` into `sample` (at most K); True when an element was replaced."""
    rewritten = False
    for rid in ids:
        seen += 1
        if len(sample) < K:
            sample.append(rid)
        elif rng.randrange(seen) < K:
            sample[rng.randrange(K)] = rid
            rewritten = True
    return sample, seen, rewritten
