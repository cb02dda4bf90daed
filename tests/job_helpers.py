"""Run the job's driver and tasks in-process, with explicit attempts on named "executors".

The same `BatchDriver` and `run_partition` the Spark job uses; only the scheduling is
spelled out, so tests can stage the exact races of the seed's appendix. It plays Spark's
file source too: each batch's file goes into Spark's source log (`sources/0/<b>`, Spark's
format), where the state verifier finds which file a batch read.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from statebed_job.config import JobOptions
from statebed_job.driver import BatchDriver, BatchOutcome
from statebed_job.task import TaskResult, TaskSpec, run_partition
from statebed_model.rundir import SPARK_CHECKPOINT, RunDir, RunInfo
from statebed_model.sources import SOURCE_LOG, GeneratedSource, IngestSource, open_source, source_log
from statebed_store import S3Settings, default_uploader, open_storage
from statebed_store.location import parse_location
from statebed_store.murmur3 import hash_longs

QUERY_SOURCE_LOG = f"{SPARK_CHECKPOINT}/{SOURCE_LOG}"  # Spark's file source log, run-relative (a statebed run's query checkpoint)


def partition_of(records: pa.Table, partitions: int) -> list[pa.Table]:
    """As `df.repartition(P, "key")` routes records: pmod(Murmur3(key), P) (the verifiers check state keys against it)."""
    homes = hash_longs(records["key"].to_numpy()).astype(np.int64) % partitions
    return [records.filter(pa.array(homes == p)) for p in range(partitions)]


class InProcessJob:
    """A run directory plus a driver whose tasks run here, one executor per local root.

    `root` may be an s3:// URL (then `local` holds the executors' RocksDB directories).
    """

    def __init__(self, root: Path | str, opts: JobOptions, *, s3: S3Settings | None = None, local: Path | None = None) -> None:
        self.run = RunDir(root, s3, local=local)
        self.opts = opts
        source = (
            {"kind": "ingest", "landing": opts.landing}
            if opts.source == "ingest"
            else GeneratedSource(opts.rows_per_batch, opts.keyspace).describe()
        )
        info = RunInfo(
            workload=opts.workload,
            format=opts.format,
            partitions=opts.partitions,
            checkpoint=opts.checkpoint,
            params=opts.to_json(),
            source=source,
        )
        self.run.create(info)
        self.source = open_source(info, self.run, s3)
        self.storage = open_storage(parse_location(self.run.checkpoint_location(info), s3), create_bucket=s3 is not None)
        self.driver = BatchDriver(self.run, opts, self.storage, s3)

    def executor(self, name: str, spec: TaskSpec) -> TaskSpec:
        return dataclasses.replace(spec, local_root=str(self.run.root / "executors" / name))

    def read_files(self, batch_id: int, land: pa.Table | None) -> list[str]:
        """What Spark's file source does at planning: pick the batch's file, log it (a rerun replays the log)."""
        path = f"{QUERY_SOURCE_LOG}/{batch_id}"
        if self.run.storage.exists(path):
            return [posixpath.basename(json.loads(line)["path"]) for line in self.run.storage.read(path).decode().splitlines()[1:]]
        if isinstance(self.source, IngestSource):  # the file `land` lands now, else the oldest no batch read yet
            if land is not None:
                seq = self.source.land(land).seq
            else:
                read = {int(n.removesuffix(".parquet")) for names in source_log(self.run.storage, QUERY_SOURCE_LOG).values() for n in names}
                seq = min(set(self.source.landed()) - read)
            name = posixpath.basename(IngestSource.data_name(seq))
        else:
            name = GeneratedSource.file_name(batch_id)
        entry = {"path": f"file:///source/{name}", "timestamp": 1_000_000 + batch_id, "batchId": batch_id}
        self.run.storage.write(path, b"v1\n" + json.dumps(entry).encode() + b"\n")
        if not self.run.storage.exists(f"{SPARK_CHECKPOINT}/metadata"):  # the query's id, as Spark writes it at its start
            self.run.storage.write(f"{SPARK_CHECKPOINT}/metadata", json.dumps({"id": str(uuid.uuid4())}).encode())
        offsets = {"batchWatermarkMs": 0, "batchTimestampMs": 1_000_000 + batch_id, "conf": {}}  # the batch ends at its entry
        self.run.storage.write(
            f"{SPARK_CHECKPOINT}/offsets/{batch_id}", f"v1\n{json.dumps(offsets)}\n{json.dumps({'logOffset': batch_id})}".encode()
        )
        return [name]

    def batch(
        self,
        batch_id: int,
        inputs: pa.Table | None = None,
        schedule: Callable[[TaskSpec, list[pa.Table]], list[TaskResult]] | None = None,
        land: pa.Table | None = None,
    ) -> BatchOutcome:
        """Run a batch; by default every partition once on executor "e0".

        The batch reads its source file (generated: file `batch_id`; ingest: `land`, landed
        and acknowledged first); `inputs` replaces what the driver is handed (a driver that
        saw something other than what the source holds).
        """
        names = self.read_files(batch_id, land)
        table = self.source.records(names) if inputs is None else inputs

        def execute(spec: TaskSpec) -> list[TaskResult]:
            parts = partition_of(table, spec.partitions)
            if schedule is not None:
                return schedule(spec, parts)
            return [run_partition(self.executor("e0", spec), p, parts[p]) for p in range(spec.partitions)]

        out = self.driver.process(batch_id, table, execute)
        assert default_uploader().drain(60)
        return out


def records(ids: list[int], keys: list[int], values: list[int] | None = None) -> pa.Table:
    return pa.table(
        {"id": np.asarray(ids, np.int64), "key": np.asarray(keys, np.int64), "value": np.asarray(values or [1] * len(ids), np.int64)}
    )
