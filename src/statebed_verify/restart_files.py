"""Can Spark resume the query from this checkpoint? The files a restart reads besides the state.

Spark 4.3 restarting a streaming query reads, before any state: the query's `metadata` (its id),
the offset log's latest entry `offsets/L` (where batch L ends in each source, and the confs the
checkpoint fixes: partitions, state formats, store provider, codec, row checksums, encoding)
and `offsets/L-1` (where it starts), the commit log's latest entry (is batch L done?), each file
source's log (`sources/<i>/`: its latest compaction and every entry after it, the files it has
seen), and, per stateful operator, its metadata and state schema files. Each is checked here
for presence, parse and Hadoop `.crc`, and against the others; what Spark 4.3 does with each
damage is measured by `benchmarks/restart_oracle.py` (Spark's own restart as the oracle):

* a file Spark refuses to restart on, or one whose damage makes it resume with wrong state, is
  an anomaly naming it: `missing-query-file`, `damaged-query-file` (does not parse as Spark
  wrote it), `inconsistent-query-file` (parses, but disagrees with the rest: the latest entry's
  partition count against the commit's, a conf against every earlier entry, the offset against
  the source log, a compaction against its entries, an operator's name against its stores);
* a file Spark does not read at restart or tolerates is a note: offset entries before L-1
  (Spark reads only L and L-1), source log entries below the latest compaction (read from it),
  the commit log's latest entry missing (the batch runs again), an operator metadata file it
  cannot parse (Spark 4.3 skips it; its `statestore` reader does not), a changed batch id inside
  a source log entry, a conf Spark takes from the latest entry that changes nothing on disk
  (`rocksdb.formatVersion`, `multipleWatermarkPolicy`), a `.crc` that is not Hadoop's;
* what cannot be told from the files is `unknown`, never resumable: a `.crc` that does not match
  its file (Spark 4.3's local file system does not check it; which one changed is not known), a
  logged input file that is gone while its directory is there, a latest batch that read nothing
  of a source whose log has a later entry (a driver stopped while planning the next batch, or
  an offset moved back: the entry's files are then read twice).

A checkpoint with none of these files (statebed's store directory: Spark's query files are in
the run's `spark-checkpoint/`) is `unknown`, with that reason, and its verdict is not changed.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from statebed_base.errors import CheckpointFileError, CorruptFileError
from statebed_base.jsonsafe import loads_strict
from statebed_store import CommitLog, Storage, StoreId
from statebed_store.checksum import hadoop_crc
from statebed_store.commitlog import CommitRecord, parse_commit
from statebed_store.naming import COMMITS_DIR, METADATA_DIR, OFFSETS_DIR, SOURCES_DIR, STATE_DIR, hadoop_crc_name, parse_index
from statebed_store.offset_conf import SHUFFLE_PARTITIONS_CONF
from statebed_store.spark_schema import parse_schema_file

from .result import Anomaly, Verdict

__all__ = ["DAMAGED", "INCONSISTENT", "KINDS", "MISSING", "RestartReport", "StoreLog", "check_restart_files", "query_commits"]

MISSING, DAMAGED, INCONSISTENT = "missing-query-file", "damaged-query-file", "inconsistent-query-file"
KINDS = (MISSING, DAMAGED, INCONSISTENT)

QUERY_METADATA = "metadata"
OFFSET_LOG_VERSION = "v1"
SOURCE_LOG_VERSION = "v1"
OPERATOR_METADATA_VERSIONS = ("v1", "v2")
# confs a restart takes from offsets/L that change nothing already on disk (Spark 4.3 resumes right)
TOLERATED_CONFS = frozenset({"spark.sql.streaming.stateStore.rocksdb.formatVersion", "spark.sql.streaming.multipleWatermarkPolicy"})
CONF_HISTORY = 10  # earlier offset entries a conf of offsets/L is compared with
# the operators that write state metadata (`StateStoreWriter`s); a reader's name there is a hand's
READER_OPERATORS = frozenset({"stateStoreRestore"})
JOIN_OPERATOR = "symmetricHashJoin"
JOIN_STORES = frozenset({"left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"})
SCHEMA_DIR = "_stateSchema"
_UUID = re.compile(r"\A[0-9a-fA-F]{1,8}-[0-9a-fA-F]{1,4}-[0-9a-fA-F]{1,4}-[0-9a-fA-F]{1,4}-[0-9a-fA-F]{1,12}\Z")  # UUID.fromString


@dataclass
class RestartReport:
    """`resumable` with its reasons; anomalies and notes for the lineage report."""

    query: bool  # the checkpoint holds Spark's query files (else nothing here was checked)
    resumable: Verdict
    reasons: list[str]
    anomalies: list[Anomaly] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Offsets:
    batch: int
    conf: dict[str, str]
    sources: list[Any]  # per source: None ("-") or its offset's JSON


@dataclass
class _Check:
    storage: Storage
    anomalies: list[Anomaly] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # why not resumable, where the anomaly is another check's (the lineage's)

    def shown(self, path: str) -> str:
        return self.storage.display(path)

    def add(self, kind: str, path: str, detail: str, batches: Iterable[int] = (), operator: int | None = None) -> None:
        self.anomalies.append(Anomaly(kind=kind, operator=operator, files=[self.shown(path)], batches=list(batches), detail=detail))

    def read(self, path: str, what: str) -> bytes | None:
        """The file's bytes, its `.crc` checked; None (an anomaly added) when it is absent or unreadable."""
        if not self.storage.exists(path):
            self.add(MISSING, path, f"{what} is missing")
            return None
        try:
            data = self.storage.read(path)
        except CheckpointFileError as e:
            self.add(DAMAGED, path, f"{what} cannot be read: {e.detail}")
            return None
        self.crc(path, data)
        return data

    def crc(self, path: str, data: bytes) -> None:
        crc = posixpath.join(posixpath.dirname(path), hadoop_crc_name(posixpath.basename(path)))
        try:
            stored = self.storage.read(crc) if self.storage.exists(crc) else None
        except CheckpointFileError:
            stored = None
        if stored is None:
            return
        want = hadoop_crc(data)
        if stored[:8] != want[:8]:
            self.notes.append(f"{self.shown(crc)}: not a Hadoop checksum file of 512-byte chunks; not checked")
        elif stored != want:
            self.unknown.append(
                f"{self.shown(path)}: its .crc does not match (the file or its checksum changed after Spark wrote it; "
                "Spark 4.3's local file system does not check it, HDFS does)"
            )


@dataclass(frozen=True)
class StoreLog:
    """statebed's own commit log beside a separate query checkpoint: its latest batch and file."""

    latest: int
    file: str


def check_restart_files(
    storage: Storage,
    commits: Mapping[int, CommitRecord],
    commit_batches: Sequence[int],
    stores: Sequence[StoreId],
    *,
    store_log: StoreLog | None = None,
) -> RestartReport:
    """Check what a restart of the query reads (see the module doc). `storage`: the query
    checkpoint; `commits`: its commit log's readable entries; `commit_batches`: every entry it
    lists; `stores`: the state's stores in it (none for statebed's store, which keeps its state
    and commit log elsewhere: `store_log`, its latest batch, must then be Spark's latest commit C
    or the batch after it, planned (foreachBatch commits statebed's log first): C <= S <= L)."""
    c = _Check(storage)
    offsets = sorted(b for b in (parse_index(f.name) for f in storage.list(OFFSETS_DIR)) if b is not None)
    if not offsets and not storage.exists(QUERY_METADATA):
        return RestartReport(
            False,
            "unknown",
            [
                f"{storage.display('')} holds no query files (no {OFFSETS_DIR}/, no {QUERY_METADATA}): only the state's lineage was "
                "checked; give Spark's query checkpoint (`--query`, a statebed run's spark-checkpoint/) to know whether the query can resume"
            ],
        )
    _check_metadata(c)
    latest = max(commit_batches) if commit_batches else None
    if latest is not None and latest not in commits:
        if store_log is None:  # the lineage check reports it (unreadable-file): one anomaly per file
            c.refused.append(
                f"{storage.display(f'{COMMITS_DIR}/{latest}')}: the latest commit entry does not parse; Spark refuses to restart"
            )
        else:
            c.add(DAMAGED, f"{COMMITS_DIR}/{latest}", "Spark's latest commit entry does not parse: Spark refuses to restart", [latest])
    if not offsets:
        c.add(MISSING, OFFSETS_DIR, "the offset log has no entry: Spark has nothing to restart from")
    else:
        _check_offsets(c, offsets, commits, latest, stores)
        if store_log is not None:
            _check_store_log(c, store_log, latest, offsets[-1])
    _check_operators(c, stores)
    if c.anomalies or c.refused:
        value: Verdict = False
        reasons = c.refused + [f"{a.files[0]}: {a.detail}" for a in c.anomalies]
    elif c.unknown:
        value, reasons = "unknown", list(c.unknown)
    else:
        value, reasons = True, []
    return RestartReport(True, value, reasons, c.anomalies, c.notes)


def _check_store_log(c: _Check, log: StoreLog, committed: int | None, planned: int) -> None:
    low = -1 if committed is None else committed
    if not low <= log.latest <= planned:
        where = (
            f"behind Spark's latest commit {committed}: Spark would not run those batches again"
            if log.latest < low
            else f"ahead of the offset log's latest entry {planned}"
        )
        c.anomalies.append(
            Anomaly(
                kind=INCONSISTENT,
                files=[log.file],
                batches=[log.latest, planned],
                detail=f"statebed's commit log ends at batch {log.latest}, {where}",
            )
        )


def query_commits(storage: Storage) -> tuple[dict[int, CommitRecord], list[int]]:
    """A separate query checkpoint's commit log: its latest entry parsed (what a restart reads), every batch it lists."""
    batches = CommitLog(storage).batch_ids()
    out: dict[int, CommitRecord] = {}
    if batches:
        path = f"{COMMITS_DIR}/{batches[-1]}"
        try:
            out[batches[-1]] = parse_commit(storage.read(path), file=storage.display(path), batch_id=batches[-1])
        except CheckpointFileError:
            pass  # reported as the latest commit entry that does not parse
    return out, batches


def _check_metadata(c: _Check) -> None:
    data = c.read(QUERY_METADATA, "the query's metadata (its id; Spark 4.2+ refuses to restart without it, 4.1 starts a new query)")
    if data is None:
        return
    doc = _json(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("id"), str) or not _UUID.match(doc["id"]):
        c.add(DAMAGED, QUERY_METADATA, 'the query\'s metadata is not {"id": "<query id, a UUID>"}: Spark cannot read its id')


def _parse_offsets(c: _Check, batch: int, what: str) -> _Offsets | None:
    path = f"{OFFSETS_DIR}/{batch}"
    data = c.read(path, what)
    if data is None:
        return None
    lines = data.decode("utf-8", "replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    if not lines or lines[0] != OFFSET_LOG_VERSION:
        head = lines[0][:20] if lines else ""
        if head.startswith("v") and head[1:].isdigit():
            c.unknown.append(f"{c.shown(path)}: offset log format {head} is not read by this check")
        else:
            c.add(DAMAGED, path, f"{what} does not start with the offset log's version line", [batch])
        return None
    meta = _json(lines[1]) if len(lines) > 1 else None
    conf = meta.get("conf", {}) if isinstance(meta, dict) else None
    if (
        not isinstance(meta, dict)
        or not isinstance(conf, dict)
        or not all(isinstance(meta.get(k, 0), int) for k in ("batchWatermarkMs", "batchTimestampMs"))
    ):
        c.add(DAMAGED, path, f"{what}: its second line is not the batch's JSON metadata", [batch])
        return None
    sources: list[Any] = []
    for i, line in enumerate(lines[2:]):
        if line == "-":
            sources.append(None)
            continue
        offset = _json(line)
        if offset is _NOT_JSON:
            c.add(DAMAGED, path, f"{what}: the offset of source {i} is not JSON", [batch])
            return None
        sources.append(offset)
    return _Offsets(batch, {str(k): str(v) for k, v in conf.items()}, sources)


def _check_offsets(
    c: _Check, offsets: list[int], commits: Mapping[int, CommitRecord], latest: int | None, stores: Sequence[StoreId]
) -> None:
    last = offsets[-1]
    entry = _parse_offsets(c, last, f"the offset log's latest entry (batch {last})")
    previous = None
    if last > 0:
        previous = _parse_offsets(c, last - 1, f"the offset log's entry of batch {last - 1} (where batch {last} starts)")
    if latest is not None and not last - 1 <= latest <= last:
        where = f"is ahead of the offset log's latest entry {last}" if latest > last else f"is {last - latest} batches behind it"
        c.add(INCONSISTENT, f"{COMMITS_DIR}/{latest}", f"the commit log's latest entry {latest} {where}", [latest, last])
    if entry is None:
        return
    earlier = [b for b in reversed(offsets[:-1][-CONF_HISTORY:]) if b != last - 1]  # L-1 is read above
    history = ([previous] if previous is not None else []) + [e for b in earlier if (e := _quiet_offsets(c, b)) is not None]
    if previous is not None and previous.sources and len(previous.sources) != len(entry.sources):
        c.add(
            INCONSISTENT,
            f"{OFFSETS_DIR}/{last}",
            f"the offset log's latest entry has {len(entry.sources)} source offsets, batch {last - 1}'s has {len(previous.sources)}",
            [last],
        )
    _check_confs(c, entry, history)
    if latest is not None and latest in commits:
        _check_partitions(c, entry, commits[latest], stores)
    for i, offset in enumerate(entry.sources):
        if isinstance(offset, dict) and _is_log_offset(offset.get("logOffset")):
            start = previous.sources[i] if previous is not None and i < len(previous.sources) else None
            start_offset = start.get("logOffset") if isinstance(start, dict) else None
            _check_file_source(c, i, entry, start_offset if _is_log_offset(start_offset) else None, latest == last)


_NOT_JSON = object()


def _json(text: bytes | str) -> Any:
    """The JSON document `text` holds (finite numbers, bounded nesting: `loads_strict`), `_NOT_JSON` when it holds none."""
    try:
        return loads_strict(text, file="")
    except CorruptFileError:
        return _NOT_JSON


def _is_log_offset(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _quiet_offsets(c: _Check, batch: int) -> _Offsets | None:
    """An earlier entry for comparison: Spark does not read it at restart, so its damage is not counted."""
    probe = _Check(c.storage)
    out = _parse_offsets(probe, batch, f"offsets entry {batch}")
    if out is None:
        c.notes.append(f"{c.shown(f'{OFFSETS_DIR}/{batch}')}: unreadable; Spark reads only the latest two entries at restart")
    return out


def _check_confs(c: _Check, entry: _Offsets, history: list[_Offsets]) -> None:
    """Spark restarts with offsets/L's confs: each must be what every earlier entry says."""
    path = f"{OFFSETS_DIR}/{entry.batch}"
    for key in sorted({k for e in history for k in e.conf} | set(entry.conf)):
        if key == SHUFFLE_PARTITIONS_CONF:
            continue  # checked against the commit (a repartition changes it legitimately)
        earlier = [e.conf[key] for e in history if key in e.conf]
        if not earlier:
            continue  # a conf a newer Spark records from its first batch on
        mine = entry.conf.get(key)
        if mine in earlier or (mine is None and len(earlier) < len(history)):
            continue  # agrees, or a key not every earlier entry has either (one of them damaged, or older)
        text = f"the offset log's latest entry lacks {key}" if mine is None else f"the offset log's latest entry says {key}={mine}"
        value, n = Counter(earlier).most_common(1)[0]
        detail = f"{text}; the {len(earlier)} entries before it say {value}" if n == len(earlier) else f"{text}; earlier entries disagree"
        if key in TOLERATED_CONFS:
            c.notes.append(f"{c.shown(path)}: {detail} (a restart takes it; nothing on disk depends on it)")
        elif mine is None or n != len(earlier) or len(earlier) < 2:
            c.unknown.append(f"{c.shown(path)}: {detail}: which one the query ran with is not known")
        else:
            c.add(INCONSISTENT, path, f"{detail}: Spark restarts with the latest entry's", [entry.batch])


def _check_partitions(c: _Check, entry: _Offsets, commit: CommitRecord, stores: Sequence[StoreId]) -> None:
    path = f"{OFFSETS_DIR}/{entry.batch}"
    raw = entry.conf.get(SHUFFLE_PARTITIONS_CONF)
    if raw is None:
        c.unknown.append(f"{c.shown(path)}: records no {SHUFFLE_PARTITIONS_CONF}: Spark takes the session's")
        return
    if not (raw.isascii() and raw.isdigit() and 0 < int(raw) <= 1_000_000):
        c.add(DAMAGED, path, f"{SHUFFLE_PARTITIONS_CONF}={raw[:20]!r} is not a partition count", [entry.batch])
        return
    count = int(raw)
    if commit.state_ids is not None:
        for op, parts in sorted(commit.state_ids.items()):
            if len(parts) != count:
                c.add(
                    INCONSISTENT,
                    path,
                    f"the offset log's latest entry says {count} partitions; batch {commit.batch_id} committed "
                    f"{len(parts)} for operator {op}: Spark would load the state over the wrong partitions",
                    [entry.batch, commit.batch_id],
                    operator=op,
                )
        return
    dirs: dict[int, set[int]] = {}
    for s in stores:
        dirs.setdefault(s.operator, set()).add(s.partition)
    for op, present in sorted(dirs.items()):
        if present != set(range(count)):
            c.unknown.append(
                f"{c.shown(path)}: says {count} partitions; operator {op} has state directories {sorted(present)[:8]} "
                "and its V1 commits name none, so which the state holds is not known"
            )


@dataclass(frozen=True)
class _LogEntry:
    paths: list[str]
    batch_ids: list[int]


def _read_source_entry(c: _Check, path: str, what: str) -> _LogEntry | None:
    data = c.read(path, what)
    if data is None:
        return None
    lines = data.decode("utf-8", "replace").split("\n")
    if lines[0] != SOURCE_LOG_VERSION:
        c.add(DAMAGED, path, f"{what} does not start with the file source log's version line")
        return None
    paths, ids = [], []
    for line in lines[1:]:
        if not line.strip():
            continue
        doc = _json(line)
        if not isinstance(doc, dict) or not isinstance(doc.get("path"), str) or not _is_log_offset(doc.get("batchId")):
            c.add(DAMAGED, path, f"{what}: a line is not a file source log entry")
            return None
        paths.append(doc["path"])
        ids.append(doc["batchId"])
    if not paths:
        c.add(DAMAGED, path, f"{what} names no file")
        return None
    return _LogEntry(paths, ids)


def _check_file_source(c: _Check, index: int, entry: _Offsets, start: int | None, committed: bool) -> None:
    """Spark restores a file source's seen files from its latest compaction and every entry after it."""
    base = f"{SOURCES_DIR}/{index}"
    end = entry.sources[index]["logOffset"]
    names = {f.name for f in c.storage.list(base)}
    plain = sorted(int(n) for n in names if n.isascii() and n.isdigit())
    compacts = sorted(int(n.removesuffix(".compact")) for n in names if n.endswith(".compact") and n.removesuffix(".compact").isdigit())
    top = max(plain[-1:] + compacts[-1:], default=-1)
    if top < end:
        c.add(
            MISSING,
            f"{base}/{end}",
            f"batch {entry.batch}'s offsets end source {index} at log entry {end}, but its log ends at {top if top >= 0 else 'nothing'}",
            [entry.batch],
        )
        return
    if start is not None and end < start:
        c.add(INCONSISTENT, f"{OFFSETS_DIR}/{entry.batch}", f"source {index}'s offset goes back from {start} to {end}", [entry.batch])
        return
    compact = compacts[-1] if compacts else None
    seen: dict[int, list[str]] = {}
    if compact is not None:
        path = f"{base}/{compact}.compact"
        log = _read_source_entry(c, path, f"source {index}'s latest log compaction")
        if log is None:
            return
        for b, p in zip(log.batch_ids, log.paths, strict=True):
            seen.setdefault(b, []).append(p)
        lost = sorted(set(range(compact + 1)) - set(seen))
        if lost or max(seen) > compact:
            what = f"lacks entries {_few(lost)}" if lost else f"holds entries past {compact}"
            c.add(DAMAGED, path, f"source {index}'s log compaction at {compact} {what}")
            return
        for b in plain:
            if b <= compact:
                _compare_plain(c, base, b, seen[b], index)
    first = 0 if compact is None else compact + 1
    gone = [b for b in range(first) if b not in plain]
    if gone:
        c.notes.append(f"{c.shown(base)}: entries {_few(gone)} are only in the compaction at {compact}, which a restart reads")
    for b in range(first, top + 1):
        log = _read_source_entry(c, f"{base}/{b}", f"source {index}'s log entry {b}")
        if log is None:
            return
        if set(log.batch_ids) != {b}:
            c.notes.append(f"{c.shown(f'{base}/{b}')}: records batch id(s) {sorted(set(log.batch_ids))[:4]}; Spark reads it as entry {b}")
        seen[b] = log.paths
    if committed and start is not None and end == start and top > end:
        c.unknown.append(
            f"{c.shown(f'{OFFSETS_DIR}/{entry.batch}')}: batch {entry.batch} read nothing of source {index} (offset {end}), yet its "
            f"log has entry {end + 1}: a driver stopped while planning the next batch, or an offset moved back (its files read twice)"
        )
    _check_input_paths(c, index, seen)


def _compare_plain(c: _Check, base: str, batch: int, compacted: list[str], index: int) -> None:
    probe = _Check(c.storage)
    log = _read_source_entry(probe, f"{base}/{batch}", f"source {index}'s log entry {batch}")
    if log is None:
        c.notes.append(f"{c.shown(f'{base}/{batch}')}: unreadable; a restart reads the entry from the compaction")
    elif sorted(log.paths) != sorted(compacted):
        c.add(INCONSISTENT, f"{base}/{batch}", f"source {index}'s log entry {batch} and its compaction name different files")


def _check_input_paths(c: _Check, index: int, seen: Mapping[int, list[str]]) -> None:
    """A logged local file that is gone while its directory is here: the entry or the input changed."""
    local = [(b, unquote(urlparse(p).path)) for b, paths in seen.items() for p in paths if urlparse(p).scheme in ("file", "")]
    present_dirs = {d for d in {os.path.dirname(p) for _, p in local} if os.path.isdir(d)}
    if not present_dirs:
        if local:
            c.notes.append(f"source {index}: its logged input files are not on this machine; their paths were not checked")
        return
    gone = sorted((b, p) for b, p in local if not os.path.exists(p))
    if gone:
        b, p = gone[0]
        c.unknown.append(
            f"source {index}: {len(gone)} logged input file(s) not found, first {p!r} (entry {b}): moved or deleted "
            "(cleanSource) or the log entry was changed (Spark would read the real file again)"
        )


def _few(values: Sequence[int]) -> str:
    shown = ", ".join(map(str, values[:5]))
    return shown + (f" (+{len(values) - 5} more)" if len(values) > 5 else "")


def _check_operators(c: _Check, stores: Sequence[StoreId]) -> None:
    names: dict[int, set[str]] = {}
    for s in stores:
        names.setdefault(s.operator, set()).add(s.store_name)
    for op_dir in c.storage.list_dirs(STATE_DIR):
        op = parse_index(op_dir)
        if op is None:
            continue
        schemas = _check_operator_metadata(c, op, names.get(op, set()))
        _check_schemas(c, op, schemas)


def _check_operator_metadata(c: _Check, op: int, store_names: set[str]) -> list[str]:
    """Spark 4.3 reads the latest v2 operator metadata at restart (and refuses one it cannot parse)
    and tolerates a v1 file it cannot parse; a name that writes no state, or a join's name on
    other stores, it refuses. Returns the v3 schema files the v2 metadata names, in this checkpoint."""
    base = f"{STATE_DIR}/{op}/{METADATA_DIR}"
    files = [(f"{base}/metadata", False)] if c.storage.exists(f"{base}/metadata") else []
    v2 = sorted(b for b in (parse_index(f.name) for f in c.storage.list(f"{base}/v2")) if b is not None)
    files += [(f"{base}/v2/{v2[-1]}", True)] if v2 else []
    schemas: list[str] = []
    for path, required in files:
        try:
            data = c.storage.read(path)
        except CheckpointFileError:
            data = b""
        head, _, body = data.decode("utf-8", "replace").partition("\n")
        doc = _json(body) if head in OPERATOR_METADATA_VERSIONS else None
        name = (doc.get("operatorInfo") or {}).get("operatorName") if isinstance(doc, dict) else None
        infos = doc.get("stateStoreInfo") if isinstance(doc, dict) else None
        if not isinstance(name, str) or not isinstance(infos, list) or not all(isinstance(i, dict) for i in infos):
            if required:
                c.add(DAMAGED, path, "the latest operator metadata (v2) is not one Spark can read: it refuses the restart", operator=op)
            else:
                c.notes.append(
                    f"{c.shown(path)}: not operator metadata Spark can read; a restart goes on without it, its state reader does not"
                )
            continue
        c.crc(path, data)
        if name in READER_OPERATORS:
            c.add(INCONSISTENT, path, f"names operator {name!r}, which writes no state: Spark refuses the restart", operator=op)
        elif (name == JOIN_OPERATOR) != bool(store_names & JOIN_STORES) and store_names:
            c.add(INCONSISTENT, path, f"names operator {name!r}, but its stores are {sorted(store_names)[:4]}", operator=op)
        if required:
            schemas += _named_schemas(c, path, op, infos)
    return schemas


def _named_schemas(c: _Check, path: str, op: int, infos: list[dict[str, Any]]) -> list[str]:
    """The v3 schema files a v2 operator metadata names (absolute paths, of where the checkpoint was
    written), as files of this checkpoint: a copy is judged as if it were where it was written."""
    out: list[str] = []
    for info in infos:
        listed = info.get("stateSchemaFilePaths", [])
        if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
            c.add(DAMAGED, path, "stateSchemaFilePaths is not a list of paths", operator=op)
            continue
        mapped = []
        for p in listed:
            parts = unquote(urlparse(p).path).split("/")
            if len(parts) < 5 or parts[-5:-2] != [STATE_DIR, str(op), SCHEMA_DIR]:
                c.add(DAMAGED, path, f"names schema file {p[:200]!r}, which is not one of this operator's", operator=op)
                continue
            mapped.append("/".join(parts[-5:]))
        if mapped and not any(c.storage.exists(f) for f in mapped):
            c.add(MISSING, path, f"none of the schema files it names exists ({mapped[-1]!r}, ...)", operator=op)
        out += mapped
    return out


def _check_schemas(c: _Check, op: int, named: list[str]) -> None:
    """Spark checks the query's schema against partition 0's schema files (v1/v2) and the v3 files
    the operator metadata names (those it finds: an old one gone is skipped)."""
    part0 = f"{STATE_DIR}/{op}/0"
    paths = [f"{part0}/{METADATA_DIR}/schema"] + [f"{part0}/{d}/{METADATA_DIR}/schema" for d in c.storage.list_dirs(part0)]
    for path in paths + named:
        if not c.storage.exists(path):
            continue
        data = c.read(path, "a state schema file")
        if data is None:
            continue
        try:
            parse_schema_file(data)
        except ValueError as e:
            c.add(DAMAGED, path, f"state schema file: {e}", operator=op)
