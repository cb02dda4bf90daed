"""One maintenance command at a time per checkpoint: an exclusive lock file in the checkpoint.

    <root>/.statebed-lock   {"pid", "start_time", "host", "purpose", "since"} of its holder

`statebed rewind` (and `--undo`) hold it from before they finish an interrupted journal until
their last move; `statebed cleanup` is to take the same lock. The lock itself is flock(2) on
that file, non-blocking, as the store already locks its instance directories: the kernel
drops it when the holder exits, however it exits, so a lock left by a SIGKILLed holder is
taken over by the next command (which then finishes the holder's journal) and a PID reused
since can never keep a checkpoint locked. The record in the file only names the holder: to
the command it refuses (exit 2), and in the note of the one that takes over. The holder
removes the file while it still holds the lock; a taker checks after locking that the path
still names the file it locked, so a release racing an acquire never yields two holders.

Local directories only: rewind moves files by rename and refuses `s3://`. For an s3://
checkpoint (cleanup), the plan is a create-only object `.statebed-lock` carrying the same
record (`If-None-Match: *`), released by deleting it; as no kernel releases it, taking over
needs the holder's host to say its PID and start time are gone, or the user to remove it.
Nothing takes a lock on S3 yet.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statebed_base import procfs
from statebed_base.errors import CheckpointLockedError, NotRegularFileError, StatebedError, StorageUnavailableError
from statebed_base.jsonsafe import loads_strict

__all__ = ["LOCK_NAME", "CheckpointLock", "Holder", "lock_checkpoint"]

LOCK_NAME = ".statebed-lock"
_MAX_RECORD = 64 * 1024
_ATTEMPTS = 20  # a release removes the file between our open and our flock: open again


@dataclass(frozen=True)
class Holder:
    pid: int
    start_time: int | None  # clock ticks since boot (/proc/PID/stat field 22): with the PID, one process
    host: str
    purpose: str
    since: str

    @classmethod
    def me(cls, purpose: str) -> Holder:
        st = procfs.stat(os.getpid())
        return cls(
            os.getpid(), None if st is None else st[2], socket.gethostname(), purpose, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        )

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        """The record, or None when it is empty (being written) or not one."""
        try:
            doc = loads_strict(data, file=LOCK_NAME, what="lock record")
            start = doc.get("start_time")
            return cls(int(doc["pid"]), None if start is None else int(start), str(doc["host"]), str(doc["purpose"]), str(doc["since"]))
        except (StatebedError, KeyError, TypeError, ValueError, AttributeError):
            return None

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_time": self.start_time, "host": self.host, "purpose": self.purpose, "since": self.since}

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host!r} (start time {self.start_time}, {self.purpose!r} since {self.since})"

    def running(self) -> bool:
        """This host's process `pid` is still the recorded one (same start time)."""
        st = procfs.stat(self.pid)
        return self.host == socket.gethostname() and st is not None and st[0] not in ("Z", "X") and st[2] == self.start_time


class CheckpointLock:
    """A held lock; `previous` is the record a holder that died left behind (taken over)."""

    def __init__(self, path: Path, fd: int, previous: Holder | None) -> None:
        self.path = path
        self.previous = previous
        self._fd: int | None = fd

    def release(self) -> None:
        """Remove the file (still locked, and only if it is still ours), then unlock."""
        if self._fd is None:
            return
        try:
            if _same_file(self.path, self._fd):
                self.path.unlink()
        except OSError:
            pass  # a lock file left behind names a dead holder: the next taker takes it over
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> CheckpointLock:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


def lock_checkpoint(root: Path, purpose: str) -> CheckpointLock:
    """Take `root`'s lock for `purpose` (e.g. "rewind --to-batch 3"), or raise CheckpointLockedError naming
    its holder; NotRegularFileError when something other than a regular file sits at the lock's path."""
    path = root / LOCK_NAME
    for _ in range(_ATTEMPTS):
        fd = _open(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = Holder.parse(_read(fd))
            os.close(fd)
            who = holder.describe() if holder is not None else "another process (its record is not written yet)"
            raise CheckpointLockedError(
                f"{path}: held by {who}; another rewind or cleanup is changing this checkpoint: wait for it, or stop it"
            ) from None
        if not _same_file(path, fd):  # released (removed) between our open and our lock: not the lock any more
            os.close(fd)
            continue
        try:
            previous = Holder.parse(_read(fd))
            data = json.dumps(Holder.me(purpose).to_json()).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)  # not fsynced: the flock is the lock, the record only names its holder
        except OSError as e:
            os.close(fd)
            raise StorageUnavailableError(f"{path}: cannot write the lock record ({e.strerror or e})") from None
        return CheckpointLock(path, fd, previous)
    raise StorageUnavailableError(f"{path}: the lock file kept being replaced; is something removing it?")


def _open(path: Path) -> int:
    """The lock file, created if absent; never a FIFO, device, directory or symlink (never blocking)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(str(path), "is not a regular file; a lock file is expected here")
    except FileNotFoundError:
        pass
    except OSError as e:
        raise StorageUnavailableError(f"{path}: cannot check the lock file ({e.strerror or e})") from None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise NotRegularFileError(str(path), "is not a regular file; a lock file is expected here") from None
        raise StorageUnavailableError(f"{path}: cannot open the lock file ({e.strerror or e})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegularFileError(str(path), "is not a regular file; a lock file is expected here")
    return fd


def _read(fd: int) -> bytes:
    try:
        return os.pread(fd, _MAX_RECORD, 0)
    except OSError:
        return b""


def _same_file(path: Path, fd: int) -> bool:
    try:
        a, b = os.stat(path, follow_symlinks=False), os.fstat(fd)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
