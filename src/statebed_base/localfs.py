"""Every local-disk operation of statebed: the one atomic writer, the one reader of regular
files, durable moves, tree removal, hard links (the store's instance directories, SST cache and
pending checkpoints are laid out by `statebed_store.local_dirs` on these).

One writer (`atomic_write`) serves checkpoint storage in a directory, the SST cache, the
sink of a run and the cluster state: a hidden temp file in the target directory (`temp_name`),
fsynced, published by `rename` (overwrite) or `link` (create-only: atomic, refuses an existing
name), then the directory fsynced, so a crash leaves the old file or the new one, whole.
It replaces only a regular file (or nothing): never a device, FIFO, socket or directory.

One appender (`append_line`) serves the per-process logs that many processes add to at once
(failpoint firings, S3 requests): one write(2) on an O_APPEND file, so lines never interleave.

One reader (`read_regular`) serves every local file statebed expects to be a regular file
(checkpoint files, run.json, verdict.json, experiment files): it never blocks on a FIFO and
never reads a device, see its docstring.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import uuid
from pathlib import Path

from .errors import AlreadyExistsError, NotRegularFileError, StorageUnavailableError

__all__ = [
    "TMP_SUFFIX",
    "append_line",
    "atomic_write",
    "check_regular",
    "fsync_dir",
    "link_or_copy",
    "move_durably",
    "read_regular",
    "remove_tree",
    "temp_name",
]

TMP_SUFFIX = ".tmp"


def temp_name(name: str) -> str:
    """A hidden temp name next to `name`: never listed, never a state file."""
    return f".{name}.{uuid.uuid4().hex}{TMP_SUFFIX}"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _kind(st_mode: int) -> str:
    """What a non-regular file is, in a user's words."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"))
    return next((name for test, name in kinds if test(st_mode)), "a block device" if stat.S_ISBLK(st_mode) else "not a regular file")


def _regular_stat(path: Path, *, missing_ok: bool) -> os.stat_result | None:
    """`path`'s status (symlinks followed) if it is a regular file; None if absent and `missing_ok`.

    NotRegularFileError for anything else, a symlink loop included; FileNotFoundError (when
    not `missing_ok`), PermissionError and other OSErrors as raised, for callers to name."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENAMETOOLONG):
            raise NotRegularFileError(str(path), f"cannot be resolved ({e.strerror})") from None
        raise
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFileError(str(path), f"is {_kind(st.st_mode)}, expected a regular file")
    return st


def check_regular(path: Path) -> None:
    """NotRegularFileError naming `path` unless it is a regular file (symlinks followed) or absent:
    before replacing it (a device, FIFO, socket or directory is left alone), and before handing
    it to a library that opens it itself (a FIFO would block it)."""
    _regular_stat(path, missing_ok=True)


def read_regular(path: Path, *, max_bytes: int | None = None, start: int = 0, length: int | None = None) -> bytes:
    """A regular file's bytes (from `start`, at most `length`), never blocking and never reading a device.

    Symlinks are followed (a user's experiment file or a checkpoint may legitimately be one);
    what they resolve to must be a regular file. The type is checked before the open (opening
    a device can have effects) and again on the open descriptor (O_NONBLOCK: a FIFO swapped in
    between cannot block). NotRegularFileError naming `path` for a FIFO, socket, device,
    directory, symlink loop, or a file over `max_bytes`; other OSErrors (FileNotFoundError,
    PermissionError) as raised, for the caller to name.
    """
    _regular_stat(path, missing_ok=False)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(str(path), f"is {_kind(st.st_mode)}, expected a regular file")
        if start:
            f.seek(start)
        if max_bytes is None:
            return f.read() if length is None else f.read(length)
        data = f.read(max_bytes + 1 if length is None else min(length, max_bytes + 1))
        if max(st.st_size, len(data)) > max_bytes:  # (a /proc file says 0 bytes: the read tells)
            raise NotRegularFileError(str(path), f"is larger than the {max_bytes} bytes allowed")
        return data


def atomic_write(path: Path, data: bytes, *, create_only: bool = False, durable: bool = True) -> None:
    """Publish `data` at `path` whole or not at all, durably (file and directory fsynced; with
    `durable=False` whole or not at all only, which outlives the process but not the host).

    Raises AlreadyExistsError when `create_only` finds the name taken (the existing file is
    kept), NotRegularFileError when `path` is a device, FIFO, socket or directory (or a
    symlink to one; nothing is replaced), StorageUnavailableError naming the file for any
    other failure.
    """
    tmp = path.parent / temp_name(path.name)
    if not create_only:
        try:
            check_regular(path)
        except OSError as e:
            raise StorageUnavailableError(f"{path}: cannot check what it is ({e.strerror or e}); nothing was published") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        if create_only:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise AlreadyExistsError(str(path)) from None
        else:
            os.replace(tmp, path)
        if durable:
            fsync_dir(path.parent)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise StorageUnavailableError(f"{path}: no space left on device; nothing was published") from None
        raise StorageUnavailableError(f"{path}: write failed ({e.strerror or e}); nothing was published") from None
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass


def move_durably(src: Path, dst: Path) -> None:
    """Rename `src` to `dst` (same file system), both directories fsynced, so a crash after
    the return cannot bring the old name back. `dst` must not exist; OSError as raised."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        raise FileExistsError(errno.EEXIST, "already exists", str(dst))
    os.rename(src, dst)
    fsync_dir(dst.parent)
    fsync_dir(src.parent)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link an immutable file into an instance (copy across file systems)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def append_line(path: Path, line: bytes) -> None:
    """Append `line` (newline added) in one write(2) on an O_APPEND file, creating it (and its
    directory); never follows a symlink at `path`, never blocks on a FIFO, never writes a device:
    NotRegularFileError. OSErrors as raised, for the caller to name or ignore."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(str(path), f"is {_kind(mode)}, expected a regular file")
        os.write(fd, line + b"\n")
    finally:
        os.close(fd)
