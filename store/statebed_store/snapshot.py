"""Snapshot zips in Spark's RocksDB layout.

`<version>[_<id>].zip` holds RocksDB's small metadata files (CURRENT, MANIFEST-*,
OPTIONS-*, ...) and a `metadata` file: a `v1` line, then JSON naming the SST files, which
live once in `SSTs/<fileNo>-<uuid>.sst` and are shared between snapshots::

    {"sstFiles":[{"localFileName":"000017.sst","dfsSstFileName":"000017-<uuid>.sst","sizeBytes":1228}],
     "logFiles":[],"numKeys":2, "lineage":[...], "checkpointUniqueId":"...", "version":23}

Spark 4.1 writes no lineage there; statebed adds `lineage` (the seed asks for it), the
snapshot's own `(version, checkpointUniqueId)`, and ignores fields it does not know.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from typing import Any

from .errors import CorruptFileError, UnknownFormatError
from .lineage import Lineage, lineage_from_json, lineage_to_json, validate_lineage
from .naming import is_valid_id

__all__ = ["METADATA", "ImmutableFile", "SnapshotMetadata", "build_zip", "read_zip"]

METADATA = "metadata"
LOGS_DIR = "logs"


@dataclass(frozen=True)
class ImmutableFile:
    """A RocksDB file stored once in DFS: its local name, DFS name and size."""

    local: str
    dfs: str
    size: int


@dataclass(frozen=True)
class SnapshotMetadata:
    sst_files: tuple[ImmutableFile, ...]
    log_files: tuple[ImmutableFile, ...] = ()
    num_keys: int = 0
    lineage: Lineage | None = None
    checkpoint_id: str | None = None
    version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_bytes(self) -> bytes:
        doc: dict[str, Any] = dict(self.extra)
        doc["sstFiles"] = [{"localFileName": f.local, "dfsSstFileName": f.dfs, "sizeBytes": f.size} for f in self.sst_files]
        doc["logFiles"] = [{"localFileName": f.local, "dfsLogFileName": f.dfs, "sizeBytes": f.size} for f in self.log_files]
        doc["numKeys"] = self.num_keys
        if self.lineage is not None:
            doc["lineage"] = json.loads(lineage_to_json(self.lineage))
        if self.checkpoint_id is not None:
            doc["checkpointUniqueId"] = self.checkpoint_id
        if self.version is not None:
            doc["version"] = self.version
        return b"v1\n" + json.dumps(doc, separators=(",", ":")).encode()


def _files(doc: dict[str, Any], key: str, dfs_key: str, file: str) -> tuple[ImmutableFile, ...]:
    out = []
    listed = doc.get(key) or []
    if not isinstance(listed, list):
        raise CorruptFileError(file, f"snapshot metadata {key} is not a list")
    for i, f in enumerate(listed):
        try:
            local, dfs, size = f["localFileName"], f[dfs_key], int(f["sizeBytes"])
        except (KeyError, TypeError, ValueError, OverflowError):
            raise CorruptFileError(file, f"snapshot metadata {key}[{i}] lacks localFileName/{dfs_key}/sizeBytes") from None
        for name in (local, dfs):
            if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
                raise CorruptFileError(file, f"snapshot metadata {key}[{i}] has a bad file name {name!r}")
        out.append(ImmutableFile(local, dfs, size))
    return tuple(out)


def parse_metadata(data: bytes, *, file: str, version: int | None = None) -> SnapshotMetadata:
    text = data.decode("utf-8", errors="replace")
    first, _, body = text.partition("\n")
    if first.strip() != "v1":
        raise UnknownFormatError(file, f"snapshot metadata version {first.strip()[:20]!r} is unknown (this reader knows v1)")
    try:
        doc = json.loads(body)
    except ValueError as e:
        raise CorruptFileError(file, f"snapshot metadata is not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise CorruptFileError(file, "snapshot metadata JSON is not an object")
    lineage = None
    if doc.get("lineage") is not None:
        if not isinstance(doc["lineage"], list):
            raise CorruptFileError(file, "snapshot metadata lineage is not a list")
        lineage = lineage_from_json(json.dumps(doc["lineage"]), file=file)
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
    known = {"sstFiles", "logFiles", "numKeys", "lineage", "checkpointUniqueId", "version"}
    return SnapshotMetadata(
        sst_files=_files(doc, "sstFiles", "dfsSstFileName", file),
        log_files=_files(doc, "logFiles", "dfsLogFileName", file),
        num_keys=num_keys,
        lineage=lineage,
        checkpoint_id=cid,
        version=ver,
        extra={k: v for k, v in doc.items() if k not in known},
    )


def build_zip(files: dict[str, bytes], metadata: SnapshotMetadata) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in sorted(files.items()):
            z.writestr(name, data)
        z.writestr(METADATA, metadata.to_bytes())
    return buf.getvalue()


def read_zip(data: bytes, *, file: str, version: int | None = None) -> tuple[SnapshotMetadata, dict[str, bytes]]:
    """Metadata and the other members of a snapshot zip; damage is a CorruptFileError naming it."""
    if not data:
        raise CorruptFileError(file, "snapshot zip is empty")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            members: dict[str, bytes] = {}
            for info in z.infolist():
                name = info.filename
                if "/" in name or "\\" in name or name.startswith(".") or not name:
                    raise CorruptFileError(file, f"snapshot zip has an unsafe member name {name!r}")
                members[name] = z.read(info)
    except CorruptFileError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as e:
        raise CorruptFileError(file, f"snapshot zip is unreadable ({e})") from None
    except Exception as e:  # zlib.error and friends from a damaged member
        raise CorruptFileError(file, f"snapshot zip member is damaged ({type(e).__name__}: {e})") from None
    if METADATA not in members:
        raise CorruptFileError(file, "snapshot zip has no 'metadata' member")
    meta = parse_metadata(members.pop(METADATA), file=file, version=version)
    return meta, members
