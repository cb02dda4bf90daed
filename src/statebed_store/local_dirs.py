"""The store's local directories: one per checkpoint (`local_root`), an instance directory per
store and its lock, pending local checkpoints queued for upload, and the SST cache. Every read,
write and link goes through `statebed_base.localfs` (snapshot zips are streamed into an
instance by `snapshot.read_zip`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from statebed_base.errors import StorageUnavailableError
from statebed_base.localfs import atomic_write, remove_tree

from .naming import LOAN_PREFIX, LOCK_FILE, PENDING_DIR, SST_CACHE_DIR, StoreId, is_sst, pending_name, pending_pid, private_dir_name

__all__ = [
    "InstanceDir",
    "cache_file",
    "cached_file",
    "claim_instance_dir",
    "local_root",
    "new_pending_dir",
    "read_checkpoint_dir",
    "remove_dead_pending",
    "sst_cache_dir",
    "store_dir",
]


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


def store_dir(root: Path, store: StoreId) -> Path:
    """The store's shared instance directory; private ones and its lenders (`lending`) are beside it."""
    return root.joinpath(*store.local_parts)


def claim_instance_dir(root: Path, store: StoreId) -> InstanceDir:
    """Lock `<root>/<op>/<part>/<store>`; if another process (or provider) holds it, use a private one."""
    base = store_dir(root, store)
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
    for loan in base.glob(f"{LOAN_PREFIX}*"):  # copies another process lent a holder that gave up waiting
        remove_tree(loan)
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
