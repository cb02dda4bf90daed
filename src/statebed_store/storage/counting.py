"""A storage wrapper that counts requests: how cleanup and loads are shown to stay cheap."""

from __future__ import annotations

import builtins
from collections import Counter
from collections.abc import Sequence

from .base import FileInfo, Storage

__all__ = ["CountingStorage"]


class CountingStorage:
    """Delegates to `inner`; `counts` holds requests per kind (a batched delete is one)."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.url = inner.url
        self.counts: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def reset(self) -> None:
        self.counts.clear()

    def display(self, path: str) -> str:
        return self.inner.display(path)

    def read(self, path: str, start: int = 0, length: int | None = None) -> bytes:
        self.counts["read"] += 1
        return self.inner.read(path, start, length)

    def write(self, path: str, data: bytes, *, create_only: bool = False) -> None:
        self.counts["write"] += 1
        self.inner.write(path, data, create_only=create_only)

    def exists(self, path: str) -> bool:
        self.counts["exists"] += 1
        return self.inner.exists(path)

    def list(self, directory: str) -> list[FileInfo]:
        self.counts["list"] += 1
        return self.inner.list(directory)

    def list_dirs(self, directory: str) -> builtins.list[str]:
        self.counts["list"] += 1
        return self.inner.list_dirs(directory)

    def delete(self, paths: Sequence[str]) -> None:
        if paths:
            self.counts["delete"] += (len(paths) + 999) // 1000
        self.inner.delete(paths)
