"""Spark's own reading of a native run's final state, checked against statebed's reader.

A native run's state is judged with statebed's reader of Spark's RocksDB checkpoint
(`statebed_verify.state`). That reader is itself under test: so, while the run's session is
still up, Spark's state data source (`spark.read.format("statestore")`, per state variable
for transformWithState) reads the same committed version, both are put into the workload's
statebed encoding (`statebed_model.native_state`) and compared entry by entry. The outcome
goes to the run directory (`readers.json`); the state verifier turns a disagreement into
an anomaly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from statebed_base.errors import StatebedError
from statebed_model.native_state import (
    SAMPLE_FAMILY,
    SEEN_FAMILY,
    ReaderCheck,
    collect_list_ids,
    encode_bucket,
    encode_count,
    encode_sample,
    write_reader_check,
)
from statebed_model.rundir import RunDir
from statebed_verify.state import final_state

from .s3a import hadoop_url

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["check_readers", "spark_state"]

SHOW = 5


def spark_state(spark: SparkSession, run: RunDir, workload: str) -> list[tuple[bytes, bytes]]:
    """The run's latest committed state as Spark's state data source reads it, in statebed's encoding."""
    _ = spark.streams.active  # the StateStoreCoordinator a RocksDB read needs (Spark 4.1)
    return sorted(_translate(spark, hadoop_url(run.query_checkpoint(run.read_info())), workload))


def _read(spark: SparkSession, checkpoint: str, **options: str) -> list[Any]:
    reader = spark.read.format("statestore")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(checkpoint).collect()


def _translate(spark: SparkSession, checkpoint: str, workload: str) -> Iterator[tuple[bytes, bytes]]:
    if workload == "count":
        for r in _read(spark, checkpoint):
            yield encode_count(r["key"][0], r["value"][0], r["value"][1])
    elif workload == "bucket-collect":
        for r in _read(spark, checkpoint):
            yield encode_bucket(r["key"][0], collect_list_ids(bytes(r["value"][0]), what="statestore collect_list buffer"))
    elif workload == "sample3":
        samples: dict[int, list[int]] = {}
        for r in _read(spark, checkpoint, stateVarName=SAMPLE_FAMILY):
            samples.setdefault(r["key"][0], []).append(r["list_element"][0])
        seen = {r["key"][0]: r["value"][0] for r in _read(spark, checkpoint, stateVarName=SEEN_FAMILY)}
        for k in samples.keys() | seen.keys():
            yield from encode_sample(k, samples.get(k, []), seen.get(k))
    else:
        raise StatebedError(f"no statestore reading for workload {workload!r}")


def check_readers(spark: SparkSession, run: RunDir) -> ReaderCheck:
    """Both readers on the run's latest committed version; the outcome is saved in the run directory.
    A reader that fails is recorded as such (the check is then undecided), never as agreement."""
    info = run.read_info()
    t0 = time.perf_counter()
    committed = run.committed_batches(info)
    check = ReaderCheck(batch=committed[-1] if committed else None)
    try:
        ours = sorted(final_state(run))
        theirs = spark_state(spark, run, info.workload)
    except Exception as e:  # a reader that cannot read is an outcome to record, not a crash of the run
        check.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]
    else:
        only_ours, only_theirs = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
        check.agree = ours == theirs
        check.entries = {"statebed": len(ours), "spark": len(theirs)}
        check.only_statebed = [k.hex() for k, _ in only_ours[:SHOW]]
        check.only_spark = [k.hex() for k, _ in only_theirs[:SHOW]]
    check.seconds = round(time.perf_counter() - t0, 3)
    write_reader_check(run, check)
    return check
