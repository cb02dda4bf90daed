"""Sources: where a run's records come from, and the ground truth a verifier rebuilds from
outside the system under test (never from the input log the driver writes itself).

Spark reads a source as a file stream over one local directory, one file per batch
(`maxFilesPerTrigger=1`, `Trigger.AvailableNow`). Which batch read which file is Spark's
own record: its offset log, `offsets/<b>`, ends each batch at an entry of its file source
log, `sources/0/<e>`, in the query checkpoint (`RunDir.query_checkpoint`, see `batch_reads`).
A committed batch's records are then the records of those files, as the source knows them:

- `GeneratedSource`: file `source/<n>.parquet` holds `records_for(n*R, (n+1)*R, K)`; the
  ground truth is recomputed from run.json's parameters alone (the files are not read).
- `IngestSource`: a landing area an ingest service writes (`land`), with an
  acknowledgement per landed file; the ground truth is the set of acknowledged records:
  each must be in exactly one committed batch, or in a file newer than every file a
  committed batch read (not yet processed). Layout, under the landing root (a `Storage`):

      data/<seq:012d>.parquet   one file per ingest request batch (id, key, value),
                                written create-only; seq is monotonic (next free number)
      acks/<seq:012d>.json      its acknowledgement, written create-only after the data:
                                {"schema": 1, "seq", "file": "data/<seq>.parquet",
                                 "records", "ids": [...], "ingested_at": ISO-8601 UTC}

  A data file without an ack was never acknowledged (the service died in between): its
  records may be processed, but nobody was promised them.
"""

from __future__ import annotations

import json
import os
import posixpath
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote, urlparse

import pyarrow as pa

from statebed_base.errors import AlreadyExistsError, CheckpointFileError, CorruptFileError, MissingFileError, UsageError
from statebed_base.jsonsafe import loads_strict
from statebed_store.config import S3Settings
from statebed_store.location import is_remote, parse_location
from statebed_store.naming import OFFSETS_DIR
from statebed_store.storage import LocalStorage, Storage, open_storage

from .records import records_for
from .rundir import INPUT_SCHEMA, RunDir, RunInfo, read_parquet, table_bytes
from .workloads import Finding

__all__ = [
    "ACK_SCHEMA",
    "SOURCE_KINDS",
    "SOURCE_LOG",
    "Ack",
    "GeneratedSource",
    "GroundTruth",
    "IngestSource",
    "Source",
    "batch_reads",
    "batch_source_files",
    "file_source_offsets",
    "open_source",
    "source_log",
]

SOURCE_LOG = "sources/0"  # Spark's file source log, in the query checkpoint (`RunDir.query_checkpoint`)
SOURCE_KINDS = ("generated", "ingest")
ACK_SCHEMA = 1


@dataclass
class GroundTruth:
    """The committed batches' records, as the source knows them, and what the source itself checks."""

    inputs: dict[int, pa.Table] = field(default_factory=dict)
    unknown: dict[int, str] = field(default_factory=dict)  # committed batch -> why its records are unknown
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def source_log(storage: Storage, base: str = SOURCE_LOG) -> dict[int, list[str]]:
    """Source log entry -> base names of the files Spark's file source logged in it (see `batch_reads`).

    Every 10th entry is a compaction (`<b>.compact`) holding all entries so far, and Spark
    may delete older plain entries; a batch's plain entry wins, else the newest compaction's.
    """
    files = [f.name for f in storage.list(base) if f.name.removesuffix(".compact").isdigit()]
    plain = sorted((n for n in files if n.isdigit()), key=int)
    compact = sorted((n for n in files if not n.isdigit()), key=lambda n: -int(n.removesuffix(".compact")))
    out: dict[int, list[str]] = {}
    for name in plain + compact:
        for batch, names in _log_entries(storage, f"{base}/{name}").items():
            out.setdefault(batch, names)
    return out


def file_source_offsets(text: str) -> dict[int, int]:
    """Source index -> the file source `logOffset` an `offsets/<b>` entry ends at (file sources only).

    The entry is `v1`, the batch's metadata, then one line per source: `-` (no offset), a file
    source's `{"logOffset": N}`, or another source's own format (left out).
    """
    out: dict[int, int] = {}
    for i, line in enumerate(text.splitlines()[2:]):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("logOffset"), int) and not isinstance(doc["logOffset"], bool):
            out[i] = doc["logOffset"]
    return out


def _log_offset(storage: Storage, batch_id: int, source: int) -> int | None:
    name = f"{OFFSETS_DIR}/{batch_id}"
    return file_source_offsets(storage.read(name).decode("utf-8", "replace")).get(source) if storage.exists(name) else None


def _source_index(base: str) -> int:
    tail = posixpath.basename(base)
    if not tail.isdigit():
        raise ValueError(f"{base}: not a file source log (sources/<index>)")
    return int(tail)


def batch_reads(storage: Storage, base: str = SOURCE_LOG) -> dict[int, list[str]]:
    """Query batch id -> base names of the files Spark's file source read in it.

    A batch reads the source log's entries after the previous batch's `logOffset` up to its
    own (`offsets/<b>`). The two numberings drift apart: a driver killed after the source
    logged entry e but before `offsets/<b>` was written comes back, logs entry e+1 and plans
    batch b over both. A batch whose offsets entry Spark purged (`minBatchesToRetain`) is
    left out unless no drift is possible below the oldest kept entry (its `logOffset` equals
    its batch id): then entry b is batch b.
    """
    source = _source_index(base)
    entries = source_log(storage, base)
    offsets: dict[int, int] = {}
    for f in storage.list(OFFSETS_DIR):
        if f.name.isdigit() and (o := _log_offset(storage, int(f.name), source)) is not None:
            offsets[int(f.name)] = o
    if not offsets:
        return {}
    oldest = min(offsets)
    aligned = offsets[oldest] == oldest  # no drift below the oldest kept entry: entry e is batch e
    out = {e: names for e, names in entries.items() if e < oldest} if aligned else {}
    for b, end in sorted(offsets.items()):
        start = -1 if b == 0 else offsets.get(b - 1, oldest - 1 if b == oldest and aligned else None)
        if start is not None and all(e in entries for e in range(start + 1, end + 1)):  # else: unknown
            out[b] = [n for e in range(start + 1, end + 1) for n in entries[e]]
    return out


def batch_source_files(storage: Storage, batch_id: int, base: str = SOURCE_LOG) -> list[str]:
    """The files one batch read, while the run is live: its offsets entry's range of the source log."""
    source = _source_index(base)
    end = _log_offset(storage, batch_id, source)
    if end is None:
        raise MissingFileError(
            storage.display(f"{OFFSETS_DIR}/{batch_id}"), f"Spark's offset log has no file source offset for batch {batch_id}"
        )
    start = -1 if batch_id == 0 else _log_offset(storage, batch_id - 1, source)
    if start is None:
        raise MissingFileError(
            storage.display(f"{OFFSETS_DIR}/{batch_id - 1}"), f"Spark's offset log has no file source offset for batch {batch_id - 1}"
        )
    names: list[str] = []
    for e in range(start + 1, end + 1):
        for name in (f"{base}/{e}", f"{base}/{e}.compact"):
            if storage.exists(name):
                names += _log_entries(storage, name).get(e, [])
                break
        else:
            raise MissingFileError(storage.display(f"{base}/{e}"), f"Spark's file source log has no entry {e} (batch {batch_id})")
    return names


def _log_entries(storage: Storage, path: str) -> dict[int, list[str]]:
    lines = storage.read(path).decode("utf-8", "replace").splitlines()
    out: dict[int, list[str]] = {}
    try:
        for line in lines[1:]:  # the first line is the log's version, "v1"
            if line.strip():
                e = loads_strict(line, file=storage.display(path), what="file source log entry")
                out.setdefault(int(e["batchId"]), []).append(posixpath.basename(unquote(urlparse(e["path"]).path)))
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptFileError(storage.display(path), f"not a Spark file source log entry ({e})") from None
    return out


class Source(ABC):
    """One kind of source: the directory Spark streams, and the ground truth of its files."""

    kind: ClassVar[str]

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What run.json records so a verifier can rebuild this source (`open_source`)."""

    @abstractmethod
    def stream_dir(self) -> Path:
        """The local directory Spark reads as a file stream."""

    @abstractmethod
    def prepare(self, batches: int) -> int:
        """Make (or count) the files a run reads; the number of batches they make."""

    @abstractmethod
    def records(self, names: list[str]) -> pa.Table:
        """The records of source files named by base name (ValueError/CheckpointFileError if unknown)."""

    def ground_truth(self, read: dict[int, list[str]], committed: list[int]) -> GroundTruth:
        """The committed batches' records from the files Spark's log says each read."""
        truth = GroundTruth()
        for b in committed:
            names = read.get(b)
            if names is None:
                truth.unknown[b] = (
                    f"Spark's offset and file source logs ({OFFSETS_DIR}, {SOURCE_LOG}) do not say which files batch {b} read"
                )
                continue
            try:
                truth.inputs[b] = self.records(names)
            except (ValueError, CheckpointFileError) as e:
                truth.unknown[b] = f"batch {b} read {names}: {e}"
        return truth


class GeneratedSource(Source):
    """The deterministic generator: file `<n:06d>.parquet` holds sequence numbers `[n*R, (n+1)*R)`."""

    kind = "generated"

    def __init__(self, rows_per_batch: int, keyspace: int, directory: Path | None = None) -> None:
        self.rows_per_batch, self.keyspace, self.directory = rows_per_batch, keyspace, directory

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "rows_per_batch": self.rows_per_batch, "keyspace": self.keyspace}

    @staticmethod
    def file_name(n: int) -> str:
        return f"{n:06d}.parquet"

    def stream_dir(self) -> Path:
        if self.directory is None:
            raise UsageError("the generated source has no local directory here (a run directory on S3 without a local one)")
        return self.directory

    def prepare(self, batches: int) -> int:
        """Write every batch's file not written yet; mtimes increase with the batch (Spark's order)."""
        d = LocalStorage(self.stream_dir())
        for n in range(batches):
            name = self.file_name(n)
            if not d.exists(name):
                d.write(name, table_bytes(self.file_records(n)))
                os.utime(self.stream_dir() / name, (1_000_000 + n, 1_000_000 + n))
        return batches

    def file_records(self, n: int) -> pa.Table:
        r = self.rows_per_batch
        return records_for(n * r, (n + 1) * r, self.keyspace)

    def records(self, names: list[str]) -> pa.Table:
        stems = [name.removesuffix(".parquet") for name in names]
        bad = [name for name, s in zip(names, stems, strict=True) if not (s.isdigit() and name.endswith(".parquet"))]
        if bad:
            raise ValueError(f"not files of the generator: {bad}")
        return pa.concat_tables([self.file_records(int(s)) for s in stems]) if stems else INPUT_SCHEMA.empty_table()


@dataclass(frozen=True)
class Ack:
    """The ingest service's promise: these records landed durably in `file`."""

    seq: int
    file: str
    ids: list[int]
    ingested_at: str
    schema: int = ACK_SCHEMA

    @property
    def records(self) -> int:
        return len(self.ids)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "records": self.records}


class IngestSource(Source):
    """A landing area written by an ingest service, with one acknowledgement per landed file."""

    kind = "ingest"

    ID_STRIDE = 1 << 20  # records a file may hold when `land` assigns ids: id = seq * ID_STRIDE + i

    def __init__(self, landing: Storage) -> None:
        self.landing = landing
        self._lock = threading.Lock()
        self._next: int | None = None  # the next sequence number to try (None: list the landing area)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "landing": self.landing.url}

    @staticmethod
    def data_name(seq: int) -> str:
        return f"data/{seq:012d}.parquet"

    @staticmethod
    def ack_name(seq: int) -> str:
        return f"acks/{seq:012d}.json"

    def stream_dir(self) -> Path:
        if is_remote(self.landing.url):
            raise UsageError(f"{self.landing.url}: Spark here reads local files only; land into a local --landing directory")
        return Path(self.landing.url) / "data"

    def landed(self) -> list[int]:
        """Sequence numbers of the landed data files, in order."""
        stems = (f.name.removesuffix(".parquet") for f in self.landing.list("data") if f.name.endswith(".parquet"))
        return sorted(int(s) for s in stems if s.isdigit())

    def prepare(self, batches: int) -> int:
        n = len(self.landed())
        if n == 0:
            raise UsageError(f"{self.landing.display('data')}: nothing has landed yet (no <seq>.parquet files)")
        return n

    def land(self, records: pa.Table) -> Ack:
        """Write one ingest batch durably, then acknowledge it; the ack is returned only after both.

        Records without an `id` column get `seq * ID_STRIDE + i`: unique across writers and
        restarts, since each file's seq is claimed create-only. Safe to call from many threads.
        """
        if "id" not in records.column_names and records.num_rows > self.ID_STRIDE:
            raise UsageError(f"an ingest batch holds at most {self.ID_STRIDE} records, got {records.num_rows}")
        while True:
            seq = self._claim()
            table = _with_ids(records, seq * self.ID_STRIDE)
            try:
                self.landing.write(self.data_name(seq), table_bytes(table), create_only=True)
                break
            except AlreadyExistsError:
                with self._lock:
                    self._next = None  # another writer took this number: look again
        stamp = time.time()
        at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp)) + f".{int(stamp % 1 * 1e6):06d}Z"
        ack = Ack(seq, self.data_name(seq), table["id"].to_pylist(), at)
        self.landing.write(self.ack_name(seq), json.dumps(ack.to_json()).encode(), create_only=True)
        return ack

    def _claim(self) -> int:
        with self._lock:
            if self._next is None:
                self._next = (self.landed() or [-1])[-1] + 1
            seq, self._next = self._next, self._next + 1
            return seq

    def acks(self) -> list[Ack]:
        return [self._read_ack(f.name) for f in sorted(self.landing.list("acks"), key=lambda f: f.name) if f.name.endswith(".json")]

    def _read_ack(self, name: str) -> Ack:
        path = f"acks/{name}"
        doc = loads_strict(self.landing.read(path), file=self.landing.display(path), what="ack record")
        try:
            if doc.get("schema") != ACK_SCHEMA:
                raise ValueError(f"unknown schema {doc.get('schema')!r}")
            return Ack(int(doc["seq"]), str(doc["file"]), [int(i) for i in doc["ids"]], str(doc["ingested_at"]))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptFileError(self.landing.display(path), f"not an ack record ({e})") from None

    def records(self, names: list[str]) -> pa.Table:
        tables = [read_parquet(self.landing, f"data/{name}").select(INPUT_SCHEMA.names).cast(INPUT_SCHEMA) for name in names]
        return pa.concat_tables(tables) if tables else INPUT_SCHEMA.empty_table()

    def ground_truth(self, read: dict[int, list[str]], committed: list[int]) -> GroundTruth:
        truth = super().ground_truth(read, committed)
        read_by: dict[int, list[int]] = {}  # seq -> committed batches that read it
        for b in committed:
            for name in read.get(b, []):
                stem = name.removesuffix(".parquet")
                if stem.isdigit():
                    read_by.setdefault(int(stem), []).append(b)
        newest = max(read_by, default=-1)
        pending: list[Ack] = []
        for ack in self.acks():
            batches = read_by.pop(ack.seq, [])
            if not batches:
                if ack.seq > newest:
                    pending.append(ack)
                else:
                    truth.findings.append(
                        _lost(
                            ack, f"acknowledged file {ack.file} is older than files committed batches read, but no committed batch read it"
                        )
                    )
            elif len(batches) > 1:
                truth.findings.append(
                    Finding(
                        "duplicated-acknowledged",
                        f"acknowledged file {ack.file} was read by committed batches {batches}",
                        batches=batches,
                        records=ack.ids[:20],
                    )
                )
            elif batches[0] in truth.inputs:
                missing = sorted(set(ack.ids) - set(truth.inputs[batches[0]]["id"].to_pylist()))
                if missing:
                    truth.findings.append(
                        _lost(ack, f"{len(missing)} acknowledged record(s) are not in the landed file {ack.file}", missing, batches)
                    )
        if pending:
            truth.notes.append(
                f"not-yet-processed: {len(pending)} acknowledged file(s), {sum(a.records for a in pending)} record(s), "
                f"landed after the last committed batch's files (seq {pending[0].seq}..{pending[-1].seq})"
            )
        if read_by:
            truth.notes.append(
                f"committed batches read {len(read_by)} landed file(s) that were never acknowledged (seq {sorted(read_by)[:10]})"
            )
        return truth


def _with_ids(records: pa.Table, first: int) -> pa.Table:
    """`records` as INPUT_SCHEMA, with ids `first, first+1, …` when it has none."""
    if "id" not in records.column_names:
        records = records.append_column("id", pa.array(range(first, first + records.num_rows), pa.int64()))
    return records.select(INPUT_SCHEMA.names).cast(INPUT_SCHEMA)


def _lost(ack: Ack, detail: str, ids: list[int] | None = None, batches: list[int] | None = None) -> Finding:
    return Finding("lost-acknowledged", detail, batches=batches or [], records=(ids if ids is not None else ack.ids)[:20])


def open_source(info: RunInfo, run: RunDir, s3: S3Settings | None = None) -> Source:
    """The source a run used, from run.json (a run without `source` used the generator)."""
    desc = info.source or {"kind": "generated"}
    kind = desc.get("kind")
    if kind == "generated":
        params = {**info.params, **desc}
        try:
            rows, keys = int(params["rows_per_batch"]), int(params["keyspace"])
        except (KeyError, TypeError, ValueError):
            raise UsageError(f"{run.info_path}: the generated source needs rows_per_batch and keyspace") from None
        return GeneratedSource(rows, keys, run.local / "source" if run.local is not None else None)
    if kind == "ingest" and isinstance(desc.get("landing"), str):
        return IngestSource(open_storage(parse_location(desc["landing"], s3 or run.s3)))
    raise UsageError(f"{run.info_path}: unknown source {desc!r} (known kinds: {', '.join(SOURCE_KINDS)})")
