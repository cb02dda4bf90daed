"""Snapshot zips in Spark's RocksDB layout.

`<version>[_<id>].zip` holds RocksDB's small metadata files (CURRENT, MANIFEST-*,
OPTIONS-*, ...) and a `metadata` file: a `v1` line, then JSON naming the SST files, which
live once in `SSTs/<fileNo>-<uuid>.sst` and are shared between snapshots::

    {"sstFiles":[{"localFileName":"000017.sst","dfsSstFileName":"000017-<uuid>.sst","sizeBytes":1228}],
     "logFiles":[],"numKeys":2, "lineage":[...], "checkpointUniqueId":"...", "version":23}

Spark 4.1 writes no lineage there; statebed adds `lineage` (the seed asks for it), the
snapshot's own `(version, checkpointUniqueId)` and store (`statebedStore`), each SST's
`crc32c`, and ignores fields it does not know. A reader compares the identity fields, when
present, with the file's name: a zip copied over another name is a ForeignFileError.

Only the `metadata` member is read into memory; the others are streamed to disk when a
snapshot is unpacked, and members whose declared sizes are absurd (a zip bomb, or damage)
are refused before anything is decompressed.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statebed_base.errors import CorruptFileError, ForeignFileError, UnknownFormatError
from statebed_base.jsonsafe import loads_strict

from .lineage import CheckpointRef, Lineage, lineage_from_list, lineage_to_json, validate_lineage
from .naming import ZIP_METADATA, StoreId, is_valid_id

__all__ = ["METADATA", "ImmutableFile", "SnapshotMetadata", "build_zip", "check_identity", "read_zip"]

METADATA = ZIP_METADATA
MAX_METADATA_BYTES = 64 << 20  # a metadata member lists SST names: megabytes at most
MAX_MEMBER_BYTES = 1 << 30  # RocksDB's small files (CURRENT, MANIFEST, OPTIONS) of a checkpoint
MAX_RATIO = 200  # deflate cannot exceed ~1032:1; RocksDB metadata files compress far less than 200:1
_RATIO_FLOOR = 1 << 20  # below this a member is too small to matter, whatever its ratio


@dataclass(frozen=True)
class ImmutableFile:
    """A RocksDB file stored once in DFS: its local name, DFS name and size."""

    local: str
    dfs: str
    size: int
    crc32c: int | None = None  # unsigned CRC32C of the whole file, when the writer recorded it (statebed does)


@dataclass(frozen=True)
class SnapshotMetadata:
    sst_files: tuple[ImmutableFile, ...]
    log_files: tuple[ImmutableFile, ...] = ()
    num_keys: int = 0
    lineage: Lineage | None = None
    checkpoint_id: str | None = None
    version: int | None = None
    store: StoreId | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_bytes(self) -> bytes:
        doc: dict[str, Any] = dict(self.extra)
        doc["sstFiles"] = [_file_json(f, "dfsSstFileName") for f in self.sst_files]
        doc["logFiles"] = [_file_json(f, "dfsLogFileName") for f in self.log_files]
        doc["numKeys"] = self.num_keys
        if self.lineage is not None:
            doc["lineage"] = json.loads(lineage_to_json(self.lineage))
        if self.checkpoint_id is not None:
            doc["checkpointUniqueId"] = self.checkpoint_id
        if self.version is not None:
            doc["version"] = self.version
        if self.store is not None:
            doc["statebedStore"] = {"operator": self.store.operator, "partition": self.store.partition, "storeName": self.store.store_name}
        return b"v1\n" + json.dumps(doc, separators=(",", ":")).encode()


def _file_json(f: ImmutableFile, dfs_key: str) -> dict[str, Any]:
    doc: dict[str, Any] = {"localFileName": f.local, dfs_key: f.dfs, "sizeBytes": f.size}
    if f.crc32c is not None:
        doc["crc32c"] = f.crc32c
    return doc


def _files(doc: dict[str, Any], key: str, dfs_key: str, file: str) -> tuple[ImmutableFile, ...]:
    out = []
    listed = doc.get(key) or []
    if not isinstance(listed, list):
        raise CorruptFileError(file, f"snapshot metadata {key} is not a list")
    for i, f in enumerate(listed):
        try:
            local, dfs, size = f["localFileName"], f[dfs_key], int(f["sizeBytes"])
            crc = None if f.get("crc32c") is None else int(f["crc32c"])
        except (KeyError, TypeError, ValueError, OverflowError, AttributeError):
            raise CorruptFileError(file, f"snapshot metadata {key}[{i}] lacks localFileName/{dfs_key}/sizeBytes") from None
        if size < 0 or (crc is not None and not 0 <= crc < 1 << 32):
            raise CorruptFileError(file, f"snapshot metadata {key}[{i}] has a bad size or crc32c")
        for name in (local, dfs):
            if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
                raise CorruptFileError(file, f"snapshot metadata {key}[{i}] has a bad file name {name!r}")
        out.append(ImmutableFile(local, dfs, size, crc))
    return tuple(out)


METADATA_VERSION = "v1"  # the first line of a snapshot's metadata (Spark's and ours): a file header


def parse_metadata(data: bytes, *, file: str, version: int | None = None) -> SnapshotMetadata:
    text = data.decode("utf-8", errors="replace")
    first, _, body = text.partition("\n")
    if first.strip() != METADATA_VERSION:
        raise UnknownFormatError(file, f"snapshot metadata version {first.strip()[:20]!r} is unknown (this reader knows v1)")
    doc = loads_strict(body, file=file, what="snapshot metadata")
    if not isinstance(doc, dict):
        raise CorruptFileError(file, "snapshot metadata JSON is not an object")
    lineage = None
    if doc.get("lineage") is not None:
        if not isinstance(doc["lineage"], list):
            raise CorruptFileError(file, "snapshot metadata lineage is not a list")
        lineage = lineage_from_list(doc["lineage"], file=file)
        validate_lineage(lineage, version=version, file=file)
    try:
        num_keys = int(doc.get("numKeys") or 0)
    except (TypeError, ValueError, OverflowError):
        raise CorruptFileError(file, f"snapshot metadata numKeys {doc.get('numKeys')!r} is not a number") from None
    cid, ver = doc.get("checkpointUniqueId"), doc.get("version")
    if cid is not None and not (isinstance(cid, str) and is_valid_id(cid)):
        raise CorruptFileError(file, f"snapshot metadata checkpointUniqueId {cid!r} is malformed")
    if ver is not None and (not isinstance(ver, int) or isinstance(ver, bool) or ver < 0):
        raise CorruptFileError(file, f"snapshot metadata version {ver!r} is not a version number")
    known = {"sstFiles", "logFiles", "numKeys", "lineage", "checkpointUniqueId", "version", "statebedStore"}
    return SnapshotMetadata(
        sst_files=_files(doc, "sstFiles", "dfsSstFileName", file),
        log_files=_files(doc, "logFiles", "dfsLogFileName", file),
        num_keys=num_keys,
        lineage=lineage,
        checkpoint_id=cid,
        version=ver,
        store=_store(doc.get("statebedStore"), file),
        extra={k: v for k, v in doc.items() if k not in known},
    )


def _store(raw: object, file: str) -> StoreId | None:
    if raw is None:
        return None
    try:
        assert isinstance(raw, dict)
        op, part, name = raw["operator"], raw["partition"], raw["storeName"]
        assert isinstance(op, int) and isinstance(part, int) and isinstance(name, str)
        return StoreId(op, part, name)
    except Exception:
        raise CorruptFileError(file, f"snapshot metadata statebedStore {raw!r} is malformed") from None


def check_identity(meta: SnapshotMetadata, ref: CheckpointRef, store: StoreId, *, file: str) -> None:
    """ForeignFileError when the metadata's own `(version, id)` or store differ from the file's name and place.

    Spark's zips carry neither: only what is recorded is compared.
    """
    said = CheckpointRef(ref.version if meta.version is None else meta.version, meta.checkpoint_id)
    if (meta.version is not None or meta.checkpoint_id is not None) and said != ref:
        raise ForeignFileError(file, f"snapshot metadata says it is checkpoint {said}, but the file is named {ref}: copied over?")
    if meta.store is not None and meta.store != store:
        raise ForeignFileError(file, f"snapshot metadata says it belongs to {meta.store}, not {store}: copied in?")


def build_zip(files: dict[str, bytes], metadata: SnapshotMetadata) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in sorted(files.items()):
            z.writestr(name, data)
        z.writestr(METADATA, metadata.to_bytes())
    return buf.getvalue()


def read_zip(data: bytes, *, file: str, version: int | None = None, extract_to: Path | None = None) -> tuple[SnapshotMetadata, list[str]]:
    """Metadata and the names of the other members of a snapshot zip; damage is a CorruptFileError naming it.

    Only `metadata` is read into memory; the other members are streamed, to `extract_to`
    when given, else only through their CRC check.
    """
    if not data:
        raise CorruptFileError(file, "snapshot zip is empty")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = _checked_members(z.infolist(), file)
            meta_info = infos.pop(METADATA, None)
            if meta_info is None:
                raise CorruptFileError(file, "snapshot zip has no 'metadata' member")
            raw = z.read(meta_info)
            for name, info in infos.items():  # streamed: to disk, else only to check its CRC
                with z.open(info) as src:
                    if extract_to is None:
                        while src.read(1 << 20):
                            pass
                    else:
                        with open(extract_to / name, "wb") as dst:
                            shutil.copyfileobj(src, dst, 1 << 20)
    except CorruptFileError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as e:
        raise CorruptFileError(file, f"snapshot zip is unreadable ({e})") from None
    except OSError:
        raise  # the local disk, not the zip
    except Exception as e:  # zlib.error and friends from a damaged member
        raise CorruptFileError(file, f"snapshot zip member is damaged ({type(e).__name__}: {e})") from None
    return parse_metadata(raw, file=file, version=version), sorted(infos)


def _checked_members(infos: list[zipfile.ZipInfo], file: str) -> dict[str, zipfile.ZipInfo]:
    """Members by name, refusing unsafe names, duplicates and sizes no RocksDB checkpoint has (zip bombs)."""
    out: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        name = info.filename
        if "/" in name or "\\" in name or name.startswith(".") or not name:
            raise CorruptFileError(file, f"snapshot zip has an unsafe member name {name!r}")
        if name in out:
            raise CorruptFileError(file, f"snapshot zip has member {name!r} twice")
        limit = MAX_METADATA_BYTES if name == METADATA else MAX_MEMBER_BYTES
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > limit or (info.file_size > _RATIO_FLOOR and ratio > MAX_RATIO):
            raise CorruptFileError(
                file,
                f"snapshot zip member {name!r} declares {info.file_size} bytes from {info.compress_size} compressed "
                f"(limit {limit} bytes, ratio {MAX_RATIO}:1): refused as damaged or a zip bomb",
            )
        out[name] = info
    return out
