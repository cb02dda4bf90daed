"""A snapshot from checkpoint storage to a local RocksDB directory, and the checks a load relies on.

Loads, `statebed plan` and the lineage verifier must agree on which snapshots are usable,
so all three check a snapshot here, the same way: its metadata names itself (`(version,
id)`, store) as the file is named, every SST and log file it names is present with the
recorded size and, when the writer recorded one (statebed does), the recorded CRC32C. An
SST without a recorded checksum (Spark's) is checked by opening the snapshot and reading
every entry (RocksDB reports a damaged block only to the reader that meets it), then the
blocks a scan never reads, the bloom filter first, against their trailers (`sst_blocks`).
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from statebed_base.errors import CorruptFileError, MissingFileError, StatebedError
from statebed_base.localfs import link_or_copy

from .engine import RocksEngine
from .lineage import CheckpointRef
from .merge import checkpoint_merge_operator, configure_snapshot_options
from .naming import LOGS_DIR, SNAPSHOT, SST_DIR
from .row_checksum import RowChecksums
from .snapshot import ImmutableFile, SnapshotMetadata, check_identity, read_zip
from .sst_blocks import check_sst_blocks
from .store_files import StoreFiles

__all__ = ["Fetch", "check_listed", "check_snapshot", "open_snapshot", "throwaway_snapshot", "unpack_snapshot"]

Fetch = Callable[[ImmutableFile, str], Path]  # (file, subdir) -> a local copy checked by `StoreFiles.read_immutable`


def _named(meta: SnapshotMetadata) -> list[tuple[ImmutableFile, str]]:
    return [(f, SST_DIR) for f in meta.sst_files] + [(f, LOGS_DIR) for f in meta.log_files]


def unpack_snapshot(files: StoreFiles, snap: CheckpointRef, db_dir: Path, fetch: Fetch) -> SnapshotMetadata:
    """Extract the zip's RocksDB files into `db_dir` (streamed) and link in every file it names."""
    shown = files.display(snap, SNAPSHOT)
    meta, _ = read_zip(files.read_verified(snap, SNAPSHOT), file=shown, version=snap.version, extract_to=db_dir)
    check_identity(meta, snap, files.store, file=shown)
    configure_snapshot_options(db_dir, lambda: checkpoint_merge_operator(files.storage), file=shown)
    for f, sub in _named(meta):
        try:
            src = fetch(f, sub)
        except MissingFileError as e:
            raise MissingFileError(e.file, f"file named by {shown} is missing") from None
        link_or_copy(src, db_dir / f.local)
    return meta


def open_snapshot(files: StoreFiles, snap: CheckpointRef, db_dir: Path, meta: SnapshotMetadata) -> RocksEngine:
    """Open an unpacked snapshot; if any SST has no recorded checksum, check the blocks no scan
    reads and read every entry. The blocks are checked before RocksDB opens the directory: once
    open, a background compaction may replace (and delete) the very files being read."""
    origin = {f.local: files.storage.display(f"{files.store.dir}/{sub}/{f.dfs}") for f, sub in _named(meta)}
    unchecked = [f for f in meta.sst_files if f.crc32c is None]
    for f in unchecked:  # the blocks a scan never reads: a point lookup (Spark's get) would
        check_sst_blocks(db_dir / f.local, origin[f.local])
    try:
        engine = RocksEngine(db_dir, origin)
    except CorruptFileError:
        raise
    except StatebedError as e:
        raise CorruptFileError(files.display(snap, SNAPSHOT), str(e)) from None
    try:
        if unchecked:
            engine.verify()
        if files.row_checksums is not None:
            _verify_rows(engine, files.row_checksums, files.display(snap, SNAPSHOT))
    except BaseException:
        with contextlib.suppress(Exception):  # a background compaction that met the same operand fails the close too
            engine.close()
        raise
    return engine


def _verify_rows(engine: RocksEngine, rows: RowChecksums, shown: str) -> None:
    """Every row's checksum, as Spark's reads verify them (the snapshot is named: its SSTs are shared)."""
    with contextlib.closing(engine.items()) as entries:  # closed at a mismatch too: a live iterator holds the instance open
        for key, value in entries:
            rows.unframe(key, value, file=shown)


def check_snapshot(files: StoreFiles, snap: CheckpointRef) -> SnapshotMetadata:
    """Everything a load relies on in `snap`, without loading it (once per StoreFiles); raises the first problem."""
    meta = files.verified_snapshot_metadata(snap)
    for f, sub, path in check_listed(files, snap, meta):
        if f.crc32c is not None:
            files.checked_once(("contents", path), functools.partial(_contents, files, f, sub))
    if any(f.crc32c is None for f in meta.sst_files) or files.row_checksums is not None:
        files.checked_once(("snapshot contents", files.display(snap, SNAPSHOT)), lambda: _scan(files, snap))
    return meta


def check_listed(files: StoreFiles, snap: CheckpointRef, meta: SnapshotMetadata) -> list[tuple[ImmutableFile, str, str]]:
    """Every file `meta` names is listed with its recorded size (no reads); returns (file, subdir, path) of each."""
    listings = {sub: files.sst_listing(sub) for sub in {sub for _, sub in _named(meta)}}
    out = []
    for f, sub in _named(meta):
        path = f"{files.store.dir}/{sub}/{f.dfs}"
        info = listings[sub].get(f.dfs)
        if info is None:
            raise MissingFileError(files.storage.display(path), f"file named by {files.display(snap, SNAPSHOT)} is missing")
        if info.size != f.size:
            raise CorruptFileError(files.storage.display(path), f"is {info.size} bytes, {files.display(snap, SNAPSHOT)} expects {f.size}")
        out.append((f, sub, path))
    return out


def _contents(files: StoreFiles, f: ImmutableFile, sub: str) -> None:
    files.read_immutable(f, sub)  # size and CRC32C; the bytes are not kept


def _scan(files: StoreFiles, snap: CheckpointRef) -> None:
    """Open `snap` in a throwaway directory and read every entry (SSTs without recorded checksums)."""
    with throwaway_snapshot(files, snap, "statebed-check-"):
        pass


@contextlib.contextmanager
def throwaway_snapshot(files: StoreFiles, snap: CheckpointRef, prefix: str) -> Iterator[RocksEngine]:
    """`snap` opened in a temporary directory (no provider, no local cache), removed afterwards;
    opening checks every entry (CRC32C, or a full read where none is recorded)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        db_dir, got = Path(tmp) / "db", Path(tmp) / "files"
        db_dir.mkdir()
        got.mkdir()

        def fetch(f: ImmutableFile, sub: str) -> Path:
            local = got / f.dfs
            local.write_bytes(files.read_immutable(f, sub))
            return local

        engine = open_snapshot(files, snap, db_dir, unpack_snapshot(files, snap, db_dir, fetch))
        try:
            yield engine
        finally:
            engine.close()
