"""The checkpoint storage interface: the only I/O the store does outside local RocksDB.

Paths are relative to the checkpoint root, `/`-separated (see `naming` for the tree).
Implementations guarantee that a file becomes visible whole or not at all (no reader ever
sees half a changelog), and that `create_only` writes never replace an existing file.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from statebed_base.errors import UsageError

__all__ = ["FileInfo", "Storage", "clean_path"]


@dataclass(frozen=True)
class FileInfo:
    name: str  # base name within the listed directory
    size: int
    mtime: float  # seconds since the epoch


@runtime_checkable
class Storage(Protocol):
    url: str

    def display(self, path: str) -> str:
        """The path as a user should see it in messages (absolute path or s3:// URL)."""

    def read(self, path: str, start: int = 0, length: int | None = None) -> bytes:
        """Bytes of a file (a range when `length` is given). MissingFileError if absent."""

    def write(self, path: str, data: bytes, *, create_only: bool = False) -> None:
        """Atomically publish `data`; AlreadyExistsError if `create_only` and the file exists."""

    def exists(self, path: str) -> bool: ...

    def list(self, directory: str) -> list[FileInfo]:
        """Visible files directly in `directory` (not recursive); [] if it does not exist."""

    def list_dirs(self, directory: str) -> builtins.list[str]:
        """Names of the subdirectories of `directory`."""

    def delete(self, paths: Sequence[str]) -> None:
        """Delete files; already-missing files are fine."""


def clean_path(path: str) -> str:
    """Refuse absolute paths and `..` so a corrupt name can never escape the root."""
    if path.startswith("/"):
        raise UsageError(f"bad checkpoint-relative path {path!r}: absolute")
    p = path.rstrip("/")
    if p and any(part in ("", ".", "..") for part in p.split("/")):
        raise UsageError(f"bad checkpoint-relative path {path!r}")
    return p
