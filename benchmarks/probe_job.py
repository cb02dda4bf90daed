"""The no-durability probe (`../shared/DESIGN.md` §4): the ceiling a Python store of statebed's
shape can reach on this machine, measured beside statebed and native in `job_throughput.py`.

The same query and data as `statebed run --workload count` (the generated source, one file per
batch, `Trigger.AvailableNow`, `local[2]`, statebed's Spark confs): `foreachBatch` ->
`repartition(P, key)` -> `mapInArrow`, where each task groups its records with pyarrow, reads the
keys' (count, sum) from a local RocksDB of its partition in one sorted pass, writes them back in
one WriteBatch, and returns its updated rows to the driver. No changelog, no snapshot, no upload,
no lineage, no commit log, no input or output files. Each task opens its partition's instance,
flushes and closes it (a partition may land in another Python worker next batch; RocksDB allows
one process per directory), so the state is right whatever the placement; the driver checks the
final counts against the source. One JSON line on stdout, in `statebed run --json`'s terms:

    python benchmarks/probe_job.py WORK_DIR --batches N --rows-per-batch R --keyspace K --partitions P
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

RESULT = "key long, count long, sum long"
STATE = np.dtype("<i8")


def update(local: str, batches: Any) -> Any:
    """One state task: the partition's records in, its updated (key, count, sum) out."""
    import pyarrow.compute as pc
    from pyspark import TaskContext

    from statebed_store.engine import RocksEngine

    table = pa.Table.from_batches(list(batches))
    if table.num_rows == 0:
        return
    agg = table.group_by("key").aggregate([("value", "count"), ("value", "sum")])
    keys = agg["key"].combine_chunks()
    raw = pc.cast(keys, pa.int64()).to_numpy().astype(">i8").view("S8")
    tc = TaskContext.get()
    assert tc is not None, "a state task runs inside a Spark task (mapInArrow)"
    engine = RocksEngine(Path(local) / str(tc.partitionId()))
    try:
        key_bin = pa.array(raw.tolist(), pa.binary())
        old = engine.get_many(key_bin)
        prev = np.frombuffer(b"".join(v if v is not None else bytes(16) for v in old), dtype=STATE).reshape(-1, 2)
        count = prev[:, 0] + agg["value_count"].to_numpy()
        total = prev[:, 1] + agg["value_sum"].to_numpy()
        values = np.stack([count, total], axis=1).astype(STATE)
        engine.put_many(key_bin, pa.array([values[i].tobytes() for i in range(len(values))], pa.binary()))
        engine.db.flush()
    finally:
        engine.close()
    yield pa.RecordBatch.from_pydict({"key": keys, "count": count, "sum": total})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work_dir", type=Path)
    ap.add_argument("--batches", type=int, required=True)
    ap.add_argument("--rows-per-batch", type=int, required=True)
    ap.add_argument("--keyspace", type=int, required=True)
    ap.add_argument("--partitions", type=int, required=True)
    args = ap.parse_args(argv)

    from functools import partial

    from pyspark.sql import SparkSession

    from statebed_job.config import JobOptions
    from statebed_job.session import spark_conf
    from statebed_model.rundir import RunDir
    from statebed_model.sources import GeneratedSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the Python workers run this interpreter, as statebed's do
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    work = args.work_dir.resolve()
    source = GeneratedSource(args.rows_per_batch, args.keyspace, work / "source")
    source.stream_dir().mkdir(parents=True, exist_ok=True)
    source.prepare(args.batches)
    opts = JobOptions(
        workload="count", batches=args.batches, rows_per_batch=args.rows_per_batch, keyspace=args.keyspace, partitions=args.partitions
    )
    run = RunDir(work / "run")
    run.events.mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder
    for k, v in spark_conf(opts, run, "local[2]").items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    counts = np.zeros(args.keyspace, dtype=np.int64)
    task = partial(update, str(work / "local"))

    def each(df: Any, batch_id: int) -> None:
        out = df.repartition(args.partitions, "key").mapInArrow(task, RESULT).toArrow()
        counts[out["key"].to_numpy()] = out["count"].to_numpy()

    started = time.perf_counter()
    reader = spark.readStream.schema("id long, key long, value long").option("maxFilesPerTrigger", 1)
    query = (
        reader.parquet(str(source.stream_dir()))
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(work / "spark-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    spark.stop()
    wall = time.perf_counter() - started
    expected = np.bincount(np.concatenate([source.file_records(n)["key"].to_numpy() for n in range(args.batches)]), minlength=args.keyspace)
    steady = progress[1:]
    seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in steady]
    print(
        json.dumps(
            {
                "batches": len(progress),
                "steady_records_per_s": sum(p["numInputRows"] for p in steady) / sum(seconds) if seconds else 0.0,
                "records_per_s": sum(p["numInputRows"] for p in progress)
                / sum(p["durationMs"]["triggerExecution"] / 1000 for p in progress),
                "batch_p50_s": float(np.percentile(seconds, 50)) if seconds else 0.0,
                "batch_p99_s": float(np.percentile(seconds, 99)) if seconds else 0.0,
                "query_wall_s": round(wall, 3),
                "verdicts": {"counts": {"valid": bool(np.array_equal(counts, expected))}},
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
