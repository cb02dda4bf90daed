"""Checkpoint storage in a local directory.

Writes go through `localfs.atomic_write` (fsynced temp file, rename or create-only link,
directory fsynced), reads through `localfs.read_regular` (never a blocking open). Hidden names (leading dot: our temp files, Hadoop's `.X.crc`) are
never listed.
"""

from __future__ import annotations

import builtins
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from statebed_base.errors import MissingFileError, StorageUnavailableError
from statebed_base.localfs import atomic_write, read_regular

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
        """Through `localfs.read_regular`: a FIFO, socket, device, directory or symlink loop is a
        NotRegularFileError naming it, never a blocking open."""
        p = self._p(path)
        try:
            return read_regular(p, start=start, length=length)
        except FileNotFoundError:
            raise MissingFileError(str(p), "file does not exist") from None
        except NotADirectoryError:  # e.g. `SSTs` is a file: then no SST exists under it
            raise MissingFileError(str(p), "file does not exist (a parent directory is not a directory)") from None
        except PermissionError as e:
            raise StorageUnavailableError(f"{p}: permission denied ({e.strerror})") from None
        except OSError as e:
            raise StorageUnavailableError(f"{p}: read failed: {e.strerror or e}") from None

    def write(self, path: str, data: bytes, *, create_only: bool = False) -> None:
        atomic_write(self._p(path), data, create_only=create_only)

    def exists(self, path: str) -> bool:
        """Whether something that is not a directory has this name (a FIFO or a symlink loop does:
        its read then names it, rather than the file passing for absent)."""
        try:
            return not stat.S_ISDIR(os.stat(self._p(path)).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError:
            return os.path.lexists(self._p(path))

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
        """Every visible entry that is not a directory: regular files with their size, and FIFOs,
        sockets, devices and symlink loops with size 0, so a reader finds them and names them."""
        out = []
        for e in self._scan(directory):
            try:
                if e.is_dir():
                    continue
                st = e.stat()
                out.append(FileInfo(e.name, st.st_size if stat.S_ISREG(st.st_mode) else 0, st.st_mtime))
            except FileNotFoundError:
                continue  # deleted while listing, or a dangling symlink: absent either way
            except OSError:  # a symlink loop: listed, and its read says what it is
                out.append(FileInfo(e.name, 0, e.stat(follow_symlinks=False).st_mtime))
        return out

    def list_dirs(self, directory: str) -> builtins.list[str]:
        out = []
        for e in self._scan(directory):
            try:
                if e.is_dir():
                    out.append(e.name)
            except OSError:
                continue  # a symlink loop: `list` reports it as an entry whose read names it
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
