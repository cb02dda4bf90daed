"""Checkpoint storage in a local directory.

Writes go through `localfs.atomic_write` (fsynced temp file, rename or create-only link,
directory fsynced). Hidden names (leading dot: our temp files, Hadoop's `.X.crc`) are
never listed.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import MissingFileError, StorageError, StorageUnavailableError
from ..localfs import atomic_write
from .base import FileInfo, clean_path

__all__ = ["LocalStorage"]


class LocalStorage:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()
        self.url = str(self.root)

    def __repr__(self) -> str:
        return f"LocalStorage({self.url!r})"

    def _p(self, path: str) -> Path:
        p = clean_path(path)
        return self.root / p if p else self.root

    def display(self, path: str) -> str:
        return str(self._p(path))

    def read(self, path: str, start: int = 0, length: int | None = None) -> bytes:
        p = self._p(path)
        try:
            with open(p, "rb") as f:
                if start:
                    f.seek(start)
                return f.read() if length is None else f.read(length)
        except FileNotFoundError:
            raise MissingFileError(str(p), "file does not exist") from None
        except NotADirectoryError:  # e.g. `SSTs` is a file: then no SST exists under it
            raise MissingFileError(str(p), "file does not exist (a parent directory is not a directory)") from None
        except IsADirectoryError:
            raise StorageError(f"{p}: is a directory, expected a file") from None
        except PermissionError as e:
            raise StorageUnavailableError(f"{p}: permission denied ({e.strerror})") from None
        except OSError as e:
            raise StorageUnavailableError(f"{p}: read failed: {e.strerror or e}") from None

    def write(self, path: str, data: bytes, *, create_only: bool = False) -> None:
        atomic_write(self._p(path), data, create_only=create_only)

    def exists(self, path: str) -> bool:
        return self._p(path).is_file()

    def _scan(self, directory: str) -> builtins.list[os.DirEntry[str]]:
        d = self._p(directory)
        try:
            with os.scandir(d) as it:
                return [e for e in it if not e.name.startswith(".")]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise StorageUnavailableError(f"{d}: cannot list ({e.strerror or e})") from None

    def list(self, directory: str) -> list[FileInfo]:
        out = []
        for e in self._scan(directory):
            try:
                if e.is_file():
                    st = e.stat()
                    out.append(FileInfo(e.name, st.st_size, st.st_mtime))
            except FileNotFoundError:
                continue  # deleted while listing
            except OSError as err:  # a symlink loop, an unreadable entry: name it, never a traceback
                raise StorageError(f"{e.path}: cannot tell whether it is a file ({err.strerror or err})") from None
        return out

    def list_dirs(self, directory: str) -> builtins.list[str]:
        out = []
        for e in self._scan(directory):
            try:
                if e.is_dir():
                    out.append(e.name)
            except OSError as err:
                raise StorageError(f"{e.path}: cannot tell whether it is a directory ({err.strerror or err})") from None
        return out

    def delete(self, paths: Sequence[str]) -> None:
        for path in paths:
            p = self._p(path)
            try:
                p.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:
                raise StorageUnavailableError(f"{p}: delete failed ({e.strerror or e})") from None
