"""The streaming queries: statebed's store behind `foreachBatch`, or Spark's own (native).

Both read the run's source (`statebed_model.sources`): Parquet files of `(id, key, value)`
records in one local directory (`<run>/source/` generated, or an ingest landing area's
`data/`), one file per batch (`maxFilesPerTrigger=1`, `Trigger.AvailableNow`), so a run
processes exactly the files there when it starts, and both modes see identical batches.

statebed mode: `foreachBatch(df, b)` hands the batch to `BatchDriver`: the input is
recorded, `df.repartition(P, key).mapInArrow(run_task)` runs one task per state partition,
the driver checks base ids and commits. Spark's own checkpoint (`spark-checkpoint/`) only
tracks the source; the state and its commit log live in statebed's checkpoint.

native mode: the workload as a plain Spark stateful query on the RocksDB provider with
checkpoint format V1 or V2 (`native_workloads`: count, the appendix's bucket-collect and
sample3); `foreachBatch` on its update-mode output is the sink, and the batch's input is
read from the source file Spark's source log names.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa

from statebed_model.rundir import INPUT_SCHEMA, RunDir
from statebed_model.sources import Source, batch_source_files
from statebed_model.workloads import get_workload
from statebed_store import failpoints
from statebed_store.storage.base import Storage

from .config import JobOptions
from .driver import BatchDriver, BatchOutcome
from .native_workloads import native_transform
from .s3a import hadoop_url
from .task import RESULT_DDL, TaskResult, TaskSpec, ipc_to_table, run_task

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["start_query"]

OnBatch = Callable[[BatchOutcome], None]


def _source(spark: SparkSession, source: Source, opts: JobOptions) -> DataFrame:
    """One file per batch; a continuous run takes every file landed since the last batch."""
    reader = spark.readStream.schema("id long, key long, value long")
    if not opts.continuous:
        reader = reader.option("maxFilesPerTrigger", 1)
    return reader.parquet(str(source.stream_dir()))


def start_query(
    spark: SparkSession, run: RunDir, opts: JobOptions, source: Source, driver: BatchDriver | None, on_batch: OnBatch
) -> StreamingQuery:
    info = run.read_info()
    if opts.native:
        df = native_transform(_source(spark, source, opts), opts)
        handler = partial(_native_batch, run, run.query_storage(info), opts, source, on_batch)
        writer = df.writeStream.outputMode("update").foreachBatch(handler)
    else:
        assert driver is not None
        writer = _source(spark, source, opts).writeStream.foreachBatch(partial(_statebed_batch, driver, on_batch))
    writer = writer.option("checkpointLocation", hadoop_url(run.query_checkpoint(info))).queryName(
        f"statebed-{opts.workload}-{opts.format}"
    )
    if opts.continuous:
        return writer.trigger(processingTime=f"{opts.trigger_ms} milliseconds").start()
    return writer.trigger(availableNow=True).start()


# -- statebed mode ------------------------------------------------------------------------------
def _statebed_batch(driver: BatchDriver, on_batch: OnBatch, df: DataFrame, batch_id: int) -> None:
    def execute(spec: TaskSpec) -> list[TaskResult]:
        rows = df.repartition(spec.partitions, "key").mapInArrow(partial(run_task, spec), RESULT_DDL).toArrow()
        return [
            TaskResult(
                r["partition"],
                r["version"],
                r["checkpoint_id"],
                r["base_id"],
                r["attempt"],
                r["seconds"],
                ipc_to_table(r["outputs"]),
                json.loads(r["phases"]),
            )
            for r in rows.to_pylist()
        ]

    on_batch(driver.process(batch_id, lambda: df.toArrow().select(INPUT_SCHEMA.names).cast(INPUT_SCHEMA), execute))


# -- native mode ----------------------------------------------------------------------------------
def _native_batch(run: RunDir, query: Storage, opts: JobOptions, source: Source, on_batch: OnBatch, df: DataFrame, batch_id: int) -> None:
    t0 = time.perf_counter()
    workload = get_workload(opts.workload)
    out = df.toArrow()  # runs the query's job: the state tasks of this batch
    with failpoints.task_context(batch=batch_id):  # `[batch=B]` filters aim here
        failpoints.hit("driver.tasks.after")  # before the sink output and Spark's commit (a replanned batch writes its own)
    table = pa.table({f.name: out[f.name].cast(f.type) for f in workload.output_schema}, schema=workload.output_schema)
    inputs = source.records(batch_source_files(query, batch_id))
    run.write_input(batch_id, inputs)
    run.write_output(batch_id, table)
    seconds = time.perf_counter() - t0
    run.append_timing(
        {"batch": batch_id, "status": "committed", "seconds": round(seconds, 4), "records": inputs.num_rows, "committed_at": time.time()}
    )
    on_batch(BatchOutcome(batch_id, "committed", inputs.num_rows, seconds))
