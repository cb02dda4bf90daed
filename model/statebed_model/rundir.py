"""The run directory: everything one run leaves for the verifiers, the report and a human.

    <run>/
      run.json                 what ran: workload, parameters, mode, where the checkpoint is
      input/<batchId>.parquet  the input records of each batch (id, key, value)
      staged/<batchId>.parquet a batch's output before its commit (rewritten by reruns; the
                               committed batch's one is what a restarted driver re-emits)
      output/<batchId>.parquet the sink: one file per committed batch, written create-only
      checkpoint/              statebed's checkpoint (commits/ + state/) unless run.json names
                               another location (a directory or s3://...)
      spark-checkpoint/        Spark's own query checkpoint (offsets, commits; in native
                               mode also Spark's state: then it *is* the checkpoint)
      events/                  Spark event log (speculation, task attempts, failures)
      timings.jsonl            one line per batch: seconds, records, attempts
      cluster/                 standalone master/worker work dirs and logs

A batch's input is written before its tasks run and may be rewritten by a rerun (Spark
replays the same offsets, so the same records); its output is written only after the
commit log names the batch, create-only, so a rerun never duplicates it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from statebed_store.errors import AlreadyExistsError, CorruptFileError, MissingFileError, UsageError
from statebed_store.storage import LocalStorage

__all__ = ["INPUT_SCHEMA", "RUN_SCHEMA", "RunDir", "RunInfo"]

RUN_SCHEMA = 1
INPUT_SCHEMA = pa.schema([("id", pa.int64()), ("key", pa.int64()), ("value", pa.int64())])


@dataclass
class RunInfo:
    workload: str
    mode: str  # "v2", "v1" (statebed's store) or "native" (Spark's RocksDB store, V2)
    partitions: int
    checkpoint: str  # directory or s3:// URL; relative paths are relative to the run dir
    params: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    schema: int = RUN_SCHEMA

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class RunDir:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()

    # -- layout ---------------------------------------------------------------------------
    @property
    def info_path(self) -> Path:
        return self.root / "run.json"

    def input_path(self, batch_id: int) -> Path:
        return self.root / "input" / f"{batch_id}.parquet"

    def output_path(self, batch_id: int) -> Path:
        return self.root / "output" / f"{batch_id}.parquet"

    @property
    def spark_checkpoint(self) -> Path:
        return self.root / "spark-checkpoint"

    @property
    def events(self) -> Path:
        return self.root / "events"

    @property
    def cluster(self) -> Path:
        return self.root / "cluster"

    def checkpoint_location(self, info: RunInfo) -> str:
        loc = info.checkpoint
        if loc.startswith("s3://") or os.path.isabs(loc):
            return loc
        return str(self.root / loc)

    # -- run.json -------------------------------------------------------------------------
    def create(self, info: RunInfo) -> None:
        if self.info_path.exists():
            raise UsageError(f"{self.root}: already a run directory; pick a new one (or resume with the same parameters)")
        self.root.mkdir(parents=True, exist_ok=True)
        self.save_info(info)

    def save_info(self, info: RunInfo) -> None:
        _write(self.root, self.info_path, json.dumps(info.to_json(), indent=2).encode() + b"\n", overwrite=True)

    def read_info(self) -> RunInfo:
        path = self.info_path
        if not path.is_file():
            raise UsageError(f"{self.root}: not a run directory (no run.json)")
        try:
            doc = json.loads(path.read_bytes())
        except ValueError as e:
            raise UsageError(f"{path}: not valid JSON ({e}); not a usable run directory") from None
        if not isinstance(doc, dict) or doc.get("schema") != RUN_SCHEMA:
            raise UsageError(
                f"{path}: unknown run.json schema {doc.get('schema') if isinstance(doc, dict) else doc!r} (this reader knows {RUN_SCHEMA})"
            )
        try:
            return RunInfo(**doc)
        except TypeError as e:
            raise UsageError(f"{path}: unexpected or missing fields ({e})") from None

    # -- batches --------------------------------------------------------------------------
    def write_input(self, batch_id: int, table: pa.Table) -> None:
        _write(self.root, self.input_path(batch_id), table_bytes(table.cast(INPUT_SCHEMA)), overwrite=True)

    def write_output(self, batch_id: int, table: pa.Table) -> bool:
        """Publish a committed batch's output once; False if it was already there (a rerun)."""
        return _write(self.root, self.output_path(batch_id), table_bytes(table), overwrite=False)

    def staged_path(self, batch_id: int) -> Path:
        return self.root / "staged" / f"{batch_id}.parquet"

    def stage_output(self, batch_id: int, table: pa.Table) -> None:
        _write(self.root, self.staged_path(batch_id), table_bytes(table), overwrite=True)

    def read_staged(self, batch_id: int) -> pa.Table:
        return _read_table(self.staged_path(batch_id))

    def read_input(self, batch_id: int) -> pa.Table:
        return _read_table(self.input_path(batch_id))

    def read_output(self, batch_id: int) -> pa.Table:
        return _read_table(self.output_path(batch_id))

    def batches(self, what: str) -> list[int]:
        d = self.root / what
        if not d.is_dir():
            return []
        return sorted(int(p.stem) for p in d.glob("*.parquet") if p.stem.isdigit())

    def append_timing(self, record: dict[str, Any]) -> None:
        with open(self.root / "timings.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")


def _write(root: Path, path: Path, data: bytes, *, overwrite: bool) -> bool:
    """Publish a file whole (fsynced temp file, then rename or link); False if create-only and present."""
    try:
        LocalStorage(root).write(str(path.relative_to(root)), data, create_only=not overwrite)
        return True
    except AlreadyExistsError:
        return False


def table_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def _read_table(path: Path) -> pa.Table:
    if not path.is_file():
        raise MissingFileError(str(path), "file does not exist")
    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise CorruptFileError(str(path), f"not a readable Parquet file ({e})") from None
