"""Every local-disk operation of the store: the one atomic writer, instance directories and
their locks, the SST cache and linking its files into an instance, pending local checkpoints
(snapshot zips are streamed into an instance by `snapshot.read_zip`).

One writer (`atomic_write`) serves checkpoint storage in a directory, the SST cache, the
sink of a run and the cluster state: a hidden temp file in the target directory, fsynced,
published by `rename` (overwrite) or `link` (create-only: atomic, refuses an existing
name), then the directory fsynced, so a crash leaves the old file or the new one, whole.
It replaces only a regular file (or nothing): never a device, FIFO, socket or directory.

One reader (`read_regular`) serves every local file statebed expects to be a regular file
(checkpoint files, run.json, verdict.json, experiment files): it never blocks on a FIFO and
never reads a device, see its docstring.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .errors import AlreadyExistsError, NotRegularFileError, StorageUnavailableError
from .naming import (
    LOCK_FILE,
    PENDING_DIR,
    SST_CACHE_DIR,
    StoreId,
    is_sst,
    pending_name,
    pending_pid,
    private_dir_name,
    temp_name,
)

__all__ = [
    "InstanceDir",
    "atomic_write",
    "cache_file",
    "cached_file",
    "check_regular",
    "claim_instance_dir",
    "fsync_dir",
    "link_or_copy",
    "local_root",
    "move_durably",
    "new_pending_dir",
    "read_checkpoint_dir",
    "read_regular",
    "remove_dead_pending",
    "remove_tree",
    "sst_cache_dir",
]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    """What a non-regular file is, in a user's words."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"))
    return next((name for test, name in kinds if test(mode)), "a block device" if stat.S_ISBLK(mode) else "not a regular file")


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


def atomic_write(path: Path, data: bytes, *, create_only: bool = False) -> None:
    """Publish `data` at `path` whole or not at all, durably (file and directory fsynced).

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
            os.fsync(f.fileno())
        if create_only:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise AlreadyExistsError(str(path)) from None
        else:
            os.replace(tmp, path)
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


def local_root(local_dir: str | os.PathLike[str], checkpoint_url: str) -> Path:
    """Where this checkpoint's local instances and SST cache live (one directory per checkpoint)."""
    return Path(local_dir) / hashlib.sha1(checkpoint_url.encode()).hexdigest()[:16]


# -- instance directories -------------------------------------------------------------------------
@dataclass
class InstanceDir:
    """A provider's local directory: shared and locked, or private to it (removed on release)."""

    path: Path
    lock: IO[bytes] | None
    private: bool

    def release(self) -> None:
        if self.lock is not None:
            self.lock.close()
            self.lock = None
        if self.private:
            remove_tree(self.path)


def claim_instance_dir(root: Path, store: StoreId) -> InstanceDir:
    """Lock `<root>/<op>/<part>/<store>`; if another process (or provider) holds it, use a private one."""
    base = root.joinpath(*store.local_parts)
    try:
        base.mkdir(parents=True, exist_ok=True)
        f = open(base / LOCK_FILE, "ab")
    except OSError as e:
        raise StorageUnavailableError(f"{base}: cannot create the local instance directory ({e.strerror or e})") from None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        private = base.parent / private_dir_name(store.store_name, os.getpid())
        private.mkdir(parents=True)
        return InstanceDir(private, None, True)
    remove_dead_pending(base / PENDING_DIR)
    return InstanceDir(base, f, False)


def new_pending_dir(instance: Path, version: int, checkpoint_id: str | None) -> Path:
    """A fresh path for a local checkpoint queued for upload (RocksDB creates it)."""
    pending = instance / PENDING_DIR
    pending.mkdir(parents=True, exist_ok=True)
    return pending / pending_name(os.getpid(), version, checkpoint_id)


def remove_dead_pending(pending: Path) -> None:
    """Drop local checkpoints queued by processes that no longer run (named `<pid>_...`)."""
    if not pending.is_dir():
        return
    for entry in pending.iterdir():
        pid = pending_pid(entry.name)
        if pid is not None:
            if pid == os.getpid():
                continue  # ours: the process-wide uploader may still hold it
            try:
                os.kill(pid, 0)
                continue  # still alive: its uploader may be using it
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        remove_tree(entry)


def read_checkpoint_dir(path: Path) -> tuple[list[Path], dict[str, bytes]]:
    """A local RocksDB checkpoint: its SST files, and the contents of every other file but LOCK."""
    ssts: list[Path] = []
    others: dict[str, bytes] = {}
    for f in sorted(path.iterdir()):
        if not f.is_file():
            continue
        if is_sst(f.name):
            ssts.append(f)
        elif f.name != LOCK_FILE:
            others[f.name] = f.read_bytes()
    return ssts, others


# -- SST cache and unpacking ----------------------------------------------------------------------
def sst_cache_dir(root: Path, store: StoreId) -> Path:
    """Downloaded SSTs of one store, shared by every process of this host."""
    d = root.joinpath(SST_CACHE_DIR, *store.local_parts)
    d.mkdir(parents=True, exist_ok=True)
    return d


def cached_file(cache: Path, name: str, size: int) -> Path | None:
    """The cached file if present with the expected size (names are unique per content)."""
    p = cache / name
    try:
        return p if p.stat().st_size == size else None
    except FileNotFoundError:
        return None


def cache_file(cache: Path, name: str, data: bytes) -> Path:
    p = cache / name
    atomic_write(p, data)
    return p


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link an immutable file into an instance (copy across file systems)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
