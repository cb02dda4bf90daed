"""Checkpoint storage in a local directory.

Every write goes to a hidden temp file in the target directory, is fsynced, then published
by `rename` (overwrite) or `link` (create-only: atomic and refuses an existing name), and
the directory is fsynced. Hidden names (leading dot: our temp files, Hadoop's `.X.crc`)
are never listed.
"""

from __future__ import annotations

import builtins
import errno
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

from ..errors import AlreadyExistsError, MissingFileError, StorageError, StorageUnavailableError
from .base import FileInfo, clean_path

__all__ = ["LocalStorage"]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        except IsADirectoryError:
            raise StorageError(f"{p}: is a directory, expected a file") from None
        except PermissionError as e:
            raise StorageUnavailableError(f"{p}: permission denied ({e.strerror})") from None
        except OSError as e:
            raise StorageUnavailableError(f"{p}: read failed: {e.strerror or e}") from None

    def write(self, path: str, data: bytes, *, create_only: bool = False) -> None:
        p = self._p(path)
        tmp = p.parent / f".{p.name}.{uuid.uuid4().hex}.tmp"
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if create_only:
                try:
                    os.link(tmp, p)
                except FileExistsError:
                    raise AlreadyExistsError(str(p)) from None
            else:
                os.replace(tmp, p)
            _fsync_dir(p.parent)
        except AlreadyExistsError:
            raise
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise StorageUnavailableError(f"{p}: no space left on device; nothing was published") from None
            raise StorageUnavailableError(f"{p}: write failed ({e.strerror or e}); nothing was published") from None
        finally:
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                pass

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
        return out

    def list_dirs(self, directory: str) -> builtins.list[str]:
        return [e.name for e in self._scan(directory) if e.is_dir()]

    def delete(self, paths: Sequence[str]) -> None:
        for path in paths:
            p = self._p(path)
            try:
                p.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:
                raise StorageUnavailableError(f"{p}: delete failed ({e.strerror or e})") from None
