"""Spark-native V2 checkpoints (tests/fixtures/native/spark-<ver>.tar.gz) and their UnsafeRow bytes.

Each tarball has one top directory `spark-<ver>/` with the checkpoints `agg/`,
`dedup_agg/` (operators 0 and 1) and `join/` (four named stores per partition), plus
`<name>.expected.json`. Keys and values in Spark's RocksDB store are
`<1 byte encoding version><UnsafeRow bytes>` (RocksDBStateEncoder prepends the version
byte): so in an UnsafeRow of one long field (a count) the long sits at row offset 8,
which is byte 9 of the stored value. `decode_*` check that layout before trusting it.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

NATIVE_DIR = Path(__file__).parent / "fixtures" / "native"
SPARK_VERSIONS = ("4.1.4", "4.3.0")
QUERIES = ("agg", "dedup_agg", "join")
JOIN_STORES = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")


def extract_native(dest: Path) -> dict[str, Path]:
    """Extract every tarball under `dest`; returns Spark version -> `dest/spark-<ver>`."""
    out = {}
    for ver in SPARK_VERSIONS:
        with tarfile.open(NATIVE_DIR / f"spark-{ver}.tar.gz") as tar:
            tar.extractall(dest, filter="data")
        root = dest / f"spark-{ver}"
        assert root.is_dir(), f"{root} missing after extracting spark-{ver}.tar.gz"
        out[ver] = root
    return out


def extract_one(name: str, dest: Path) -> Path:
    """Extract `tests/fixtures/native/<name>.tar.gz` under `dest`; returns `dest/<name>`."""
    with tarfile.open(NATIVE_DIR / f"{name}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    root = dest / name
    assert root.is_dir(), f"{root} missing after extracting {name}.tar.gz"
    return root


_EXTRACTED: dict[str, Path] = {}


@pytest.fixture(scope="session")
def native(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Read-only extracted fixtures, extracted once per session (copy before modifying)."""
    if not _EXTRACTED:  # both tests/store and tests/cli register this fixture: extract once
        _EXTRACTED.update(extract_native(tmp_path_factory.mktemp("native")))
    return dict(_EXTRACTED)


def expected(root: Path, query: str) -> dict[str, Any]:
    return json.loads((root / f"{query}.expected.json").read_text())


def _row(stored: bytes, what: str) -> bytes:
    assert stored[:1] == b"\x00", f"{what} {stored.hex()} does not start with encoding version byte 0"
    row = stored[1:]
    assert len(row) % 8 == 0, f"{what} {stored.hex()}: UnsafeRow length {len(row)} is not word-aligned"
    return row


def decode_string_key(stored: bytes) -> str:
    """The first field of a key row, a string: null bitset, then (offset << 32 | size)."""
    row = _row(stored, "key")
    assert row[:8] == bytes(8), f"key {stored.hex()} has null bits set"
    off_size = int.from_bytes(row[8:16], "little")
    offset, size = off_size >> 32, off_size & 0xFFFFFFFF
    assert offset >= 16 and offset + size <= len(row), f"key {stored.hex()}: bad offset/size {offset}/{size}"
    return row[offset : offset + size].decode("utf-8")


def decode_long(stored: bytes) -> int:
    """A one-field row holding a long (a count, an id): the long at row offset 8."""
    row = _row(stored, "row")
    assert len(row) == 16, f"row {stored.hex()} is not one long field"
    assert row[:8] == bytes(8), f"row {stored.hex()} has null bits set"
    return int.from_bytes(row[8:16], "little", signed=True)
