"""The run directory: everything one run leaves for the verifiers, the report and a human.

    <run>/
      run.json                 what ran: workload, parameters, mode, source, where the checkpoint is
      input/<batchId>.parquet  what the driver saw per batch (id, key, value): a diagnostic log,
                               compared with the source's ground truth, never trusted as it
      staged/<batchId>.parquet a batch's output before its commit (rewritten by reruns; the
                               committed batch's one is what a restarted driver re-emits)
      output/<batchId>.parquet the sink: one file per committed batch, written create-only
      timings/<batchId>-<ns>.json  one object per batch run: seconds, records, attempts
      maintenance.jsonl        one line per store per maintenance pass (`statebed_job.maintenance`),
                               and one per trim of the commit log (store "commits", `trimmed_below`):
                               written before the trim's delete, so `committed_batches` knows
                               every batch the log no longer lists
      checkpoint/              statebed's checkpoint (commits/ + state/) unless run.json names
                               another location (a directory or s3://...)
      spark-checkpoint/        Spark's own query checkpoint (offsets, commits, the file source's
                               log `sources/0/`; in native mode also Spark's state)
      source/                  the generated source files (generated source only)
      events/                  Spark event log (speculation, task attempts, failures)
      attempts/                one record per statebed task attempt (`attempts.py`; local side)
      cluster/                 standalone master/worker work dirs and logs

The run directory is a `Storage` root: a local directory or `s3://bucket/prefix`; every
file above the checkpoint line goes through it, one whole object per write (no appends),
so a run on Kubernetes can keep it on S3 and the verifiers read it from there. Spark's own
files (spark-checkpoint, source, events, cluster, scratch) are local paths: Spark here has
no s3a:// filesystem. For a run directory on S3 they live under `local`, when given.

A batch's input log is written before its tasks run and may be rewritten by a rerun;
its output is written only after the commit log names the batch, create-only, so a rerun
never duplicates it.
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

from statebed_base.errors import AlreadyExistsError, CorruptFileError, MissingFileError, NotRegularFileError, UsageError
from statebed_base.jsonsafe import loads_strict
from statebed_store.commitlog import CommitLog
from statebed_store.config import S3Settings
from statebed_store.formats import Format, from_run_json, get_format, to_run_json
from statebed_store.location import Location, is_remote, parse_location
from statebed_store.naming import COMMITS_DIR
from statebed_store.storage import Storage, open_storage

from .attempts import ATTEMPTS_DIR

__all__ = ["INPUT_SCHEMA", "MAINTENANCE_LOG", "RUN_SCHEMA", "SPARK_CHECKPOINT", "RunDir", "RunInfo", "read_parquet", "table_bytes"]

RUN_SCHEMA = 1
SPARK_CHECKPOINT = "spark-checkpoint"  # run-relative: Spark's query checkpoint (a native run's may be a bucket instead)
MAINTENANCE_LOG = "maintenance.jsonl"
INPUT_SCHEMA = pa.schema([("id", pa.int64()), ("key", pa.int64()), ("value", pa.int64())])


@dataclass
class RunInfo:
    workload: str
    format: Format  # v1, v2 (statebed's store), native-v1, native-v2, native (Spark's); a name is parsed on construction
    partitions: int
    checkpoint: str  # directory or s3:// URL; relative paths are relative to the run dir
    params: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    schema: int = RUN_SCHEMA
    source: dict[str, Any] = field(default_factory=dict)  # `Source.describe()`; {} = generated from params (older runs)
    started: bool = True  # False: described (`statebed_job.runner.describe_run`), its job not started yet

    def __post_init__(self) -> None:
        if isinstance(self.format, str):  # another type: the readers' own type checks name it (`report`)
            self.format = get_format(self.format, field="mode")

    def to_json(self) -> dict[str, Any]:
        """run.json's fields (the format under `mode`)."""
        return to_run_json(asdict(self))

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RunInfo:
        """`to_json`'s inverse; a TypeError names an unexpected or missing field."""
        return cls(**from_run_json(doc))


class RunDir:
    """A run directory on a `Storage` root (local or S3); `local` holds Spark's own files."""

    def __init__(
        self, location: str | os.PathLike[str], s3: S3Settings | None = None, *, local: str | os.PathLike[str] | None = None
    ) -> None:
        loc = os.fspath(location)
        self.storage: Storage = open_storage(parse_location(loc if is_remote(loc) else Path(loc).absolute(), s3))
        self.url = self.storage.url
        self.s3 = s3
        self.local: Path | None = Path(local).absolute() if local is not None else (None if is_remote(loc) else Path(loc).absolute())

    def __repr__(self) -> str:
        return f"RunDir({self.url!r})"

    # -- layout ---------------------------------------------------------------------------
    @property
    def root(self) -> Path:
        """The local directory of Spark's own files (the run directory itself when local)."""
        if self.local is None:
            raise UsageError(f"{self.url}: a run directory on S3 keeps Spark's own files locally; no local directory was given")
        return self.local

    @property
    def spark_checkpoint(self) -> Path:
        return self.root / SPARK_CHECKPOINT

    @property
    def events(self) -> Path:
        return self.root / "events"

    @property
    def cluster(self) -> Path:
        return self.root / "cluster"

    @property
    def local_state(self) -> Path:
        return self.root / "local-state"

    @property
    def s3_requests(self) -> Path:
        """Where every process of the run logs its S3 requests (`statebed_store.storage.request_log`)."""
        return self.root / "s3-requests"

    @property
    def attempts(self) -> Path:
        """Where task attempts write their records (`attempts.py`): local disk, next to Spark's files."""
        return self.root / ATTEMPTS_DIR

    def display(self, name: str) -> str:
        """A run-relative name as a user should see it (absolute path or s3:// URL)."""
        return self.storage.display(name)

    def location(self, loc: str) -> str:
        """A location named in run.json: absolute paths and URLs as they are, others in the run directory."""
        if is_remote(loc) or os.path.isabs(loc):
            return loc
        return f"{self.url}/{loc}" if is_remote(self.url) else str(Path(self.url) / loc)

    def checkpoint_location(self, info: RunInfo) -> str:
        return self.location(info.checkpoint)

    def checkpoint(self, info: RunInfo) -> Location:
        """The run's checkpoint as a Location reached with the run's S3 settings."""
        return parse_location(self.checkpoint_location(info), self.s3)

    def query_checkpoint(self, info: RunInfo) -> str:
        """Where Spark keeps the run's query checkpoint (offsets, commits, its file source's log;
        a native run's state too): `spark-checkpoint/` here, or a native run's checkpoint URL."""
        return self.checkpoint_location(info) if info.format.native else self.location(SPARK_CHECKPOINT)

    def query_storage(self, info: RunInfo) -> Storage:
        return open_storage(parse_location(self.query_checkpoint(info), self.s3))

    # -- run.json -------------------------------------------------------------------------
    @property
    def info_path(self) -> str:
        return self.display("run.json")

    def exists(self) -> bool:
        return self.storage.exists("run.json")

    def create(self, info: RunInfo) -> None:
        if self.exists():
            raise UsageError(f"{self.url}: already a run directory; pick a new one (or resume with the same parameters)")
        self.save_info(info)

    def save_info(self, info: RunInfo) -> None:
        self.storage.write("run.json", json.dumps(info.to_json(), indent=2).encode() + b"\n")

    def read_info(self) -> RunInfo:
        name = self.info_path
        try:
            data = self.storage.read("run.json")
        except MissingFileError:
            raise UsageError(f"{self.url}: not a run directory (no run.json)") from None
        except NotRegularFileError as e:  # a FIFO, directory, symlink loop: named, never opened blocking
            raise UsageError(f"{e}; not a usable run directory") from None
        try:
            doc = loads_strict(data, file=name, what="contents")
        except CorruptFileError as e:
            raise UsageError(f"{e}; not a usable run directory") from None
        if not isinstance(doc, dict) or doc.get("schema") != RUN_SCHEMA:
            raise UsageError(
                f"{name}: unknown run.json schema {doc.get('schema') if isinstance(doc, dict) else doc!r} (this reader knows {RUN_SCHEMA})"
            )
        try:
            return RunInfo.from_json(doc)
        except TypeError as e:
            raise UsageError(f"{name}: unexpected or missing fields ({e})") from None
        except UsageError as e:  # the format's name: one line naming the file
            raise UsageError(f"{name}: {e}") from None

    # -- batches --------------------------------------------------------------------------
    @staticmethod
    def input_name(batch_id: int) -> str:
        return f"input/{batch_id}.parquet"

    @staticmethod
    def staged_name(batch_id: int) -> str:
        return f"staged/{batch_id}.parquet"

    @staticmethod
    def output_name(batch_id: int) -> str:
        return f"output/{batch_id}.parquet"

    def write_input(self, batch_id: int, table: pa.Table) -> None:
        self.storage.write(self.input_name(batch_id), table_bytes(table.cast(INPUT_SCHEMA)))

    def write_output(self, batch_id: int, table: pa.Table) -> bool:
        """Publish a committed batch's output once; False if it was already there (a rerun)."""
        try:
            self.storage.write(self.output_name(batch_id), table_bytes(table), create_only=True)
            return True
        except AlreadyExistsError:
            return False

    def has_output(self, batch_id: int) -> bool:
        return self.storage.exists(self.output_name(batch_id))

    def stage_output(self, batch_id: int, table: pa.Table) -> None:
        self.storage.write(self.staged_name(batch_id), table_bytes(table))

    def read_staged(self, batch_id: int) -> pa.Table:
        return read_parquet(self.storage, self.staged_name(batch_id))

    def read_input(self, batch_id: int) -> pa.Table:
        return read_parquet(self.storage, self.input_name(batch_id))

    def read_output(self, batch_id: int) -> pa.Table:
        return read_parquet(self.storage, self.output_name(batch_id))

    def batches(self, what: str) -> list[int]:
        """Batch ids with a file in `input`, `staged` or `output`."""
        stems = (f.name.removesuffix(".parquet") for f in self.storage.list(what) if f.name.endswith(".parquet"))
        return sorted(int(s) for s in stems if s.isdigit())

    # -- timings: one object per batch run (S3 has no append) -------------------------------
    def append_timing(self, record: dict[str, Any]) -> None:
        name = f"timings/{int(record['batch']):06d}-{time.time_ns()}.json"
        self.storage.write(name, json.dumps(record).encode(), create_only=True)

    def timings(self) -> list[dict[str, Any]]:
        """Every timing record, by batch, then in the order they were written."""
        names = sorted(f.name for f in self.storage.list("timings") if f.name.endswith(".json"))
        return [self._timing(f"timings/{n}") for n in names]

    def _timing(self, name: str) -> dict[str, Any]:
        doc = loads_strict(self.storage.read(name), file=self.display(name), what="timing record")
        if not isinstance(doc, dict):
            raise CorruptFileError(self.display(name), "a timing record must be a JSON object")
        return doc

    # -- maintenance passes: the whole log per write (S3 has no append; one writer per run) --
    def write_maintenance(self, rows: list[dict[str, Any]]) -> None:
        self.storage.write(MAINTENANCE_LOG, b"".join(json.dumps(r).encode() + b"\n" for r in rows))

    def trimmed_below(self) -> int:
        """The run's maintenance deleted the commit log's entries below this batch (0: none)."""
        rows = [r for r in self.maintenance() if r.get("store") == COMMITS_DIR and r.get("error") is None]
        below = [r.get("trimmed_below") for r in rows]
        return max((b for b in below if isinstance(b, int) and not isinstance(b, bool) and b > 0), default=0)

    def committed_batches(self, info: RunInfo, checkpoint: Storage | None = None) -> list[int]:
        """Every committed batch: the commit log's entries, and the batches below them its
        maintenance trimmed, or Spark purged (`purged_below`); batch ids start at 0, and a hole
        above the trim stays a hole."""
        ids = CommitLog(checkpoint or open_storage(self.checkpoint(info))).batch_ids()
        below = self.trimmed_below()
        if below and (not ids or below > ids[-1]):  # a trim always keeps the newest entry
            newest = f"its newest entry, batch {ids[-1]}" if ids else "no entry"
            raise CorruptFileError(self.display(MAINTENANCE_LOG), f"a trim below batch {below}, but the commit log holds {newest}")
        below = max(below, self.purged_below(info, ids))
        return sorted(set(range(below)) | set(ids)) if below else ids

    @staticmethod
    def purged_below(info: RunInfo, ids: list[int]) -> int:
        """In a native run the commit log is Spark's: Spark commits batches in order and purges its
        log only below its `minBatchesToRetain` window, so a first entry k means batches 0..k-1
        committed and purged (0: nothing purged, or not Spark's log)."""
        return ids[0] if ids and info.format.native else 0

    def maintenance(self) -> list[dict[str, Any]]:
        """Every maintenance record so far ([] before the first pass)."""
        if not self.storage.exists(MAINTENANCE_LOG):
            return []
        lines = self.storage.read(MAINTENANCE_LOG).splitlines()
        rows = [loads_strict(line, file=self.display(MAINTENANCE_LOG), what="maintenance record") for line in lines if line.strip()]
        if not all(isinstance(r, dict) for r in rows):
            raise CorruptFileError(self.display(MAINTENANCE_LOG), "a maintenance record must be a JSON object")
        return rows


def table_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def read_parquet(storage: Storage, name: str) -> pa.Table:
    """A Parquet file from storage; MissingFileError or CorruptFileError naming it."""
    data = storage.read(name)
    try:
        return pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as e:
        raise CorruptFileError(storage.display(name), f"not a readable Parquet file ({e})") from None
