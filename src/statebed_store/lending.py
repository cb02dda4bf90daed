"""Lending an open instance to another process of the same host (issue 41).

Spark hands a state task whichever Python worker is idle, so a partition's first task in a
worker finds no instance of it there while another worker of the host holds one open (and
holds the shared instance directory's lock). Rather than rebuild from storage (a snapshot and
up to `snapshot_interval` changelogs), the new worker asks the holder for a copy. The holder,
if no transaction runs on that store, takes a RocksDB checkpoint (its memtable flushed, the SSTs
hard-linked) into a `loan-*` directory inside the borrower's instance directory, and answers
with the `(version, id)`, lineage, last snapshot and uploaded SSTs of what it holds. It keeps
its own instance open. The borrower opens the copy and goes on as with its own instance: a hit
when it is at the task's base, else a catch-up or a rebuild, each checked as any load is.

Asking costs one memtable flush in the lender, and happens only when the borrower has nothing
usable: closing every instance after each commit so that any process could reopen it instead
measured 45 ms a commit plus 40% slower batches after each reopen (a cold block cache, more
L0 files), on 250k keys and 125k updates a batch.

Each process serves loans on one abstract Unix socket, named with its PID and a random token:
it exists only while the process does, and leaves nothing on disk. A lender is advertised by a
file `<store dir>.lenders/<pid>-<token>`; a borrower tries each one, and removes a file whose
socket is gone or held by another process (the token is never reused, so a live process that
got a dead one's PID keeps its own advertisement).

The trust boundary (issue 62) is the host's uid: an abstract socket has no file permissions, so
anyone on the host can connect to a desk or bind a dead lender's name. Both sides therefore check
the other's `SO_PEERCRED`: a desk answers only peers of its own uid, and a borrower talks only to
the process its advertisement names (its PID, the borrower's uid). A desk copies only into a new
`loan-*` directory of one of that store's instance directories, matched exactly, that exists
already (a loan never recreates a directory its borrower removed). A borrower gives up on any
malformed, oversized or late answer (a rebuild follows), takes the copy by renaming it into its
own instance directory and acknowledges; a copy nobody acknowledged is removed by its lender.
Whatever a peer says, the copy proves what it holds from its own identity record (`identity`),
checked by the borrower before anything is served from it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import struct
import threading
import uuid
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from statebed_base.errors import StatebedError
from statebed_base.localfs import atomic_write, check_regular, remove_tree
from statebed_base.log import get_logger, kv

from . import failpoints
from .identity import Identity
from .lineage import CheckpointRef
from .naming import LOAN_PREFIX, is_private_dir_of
from .snapshot import ImmutableFile

__all__ = ["Lender", "Loan", "advertise", "borrow", "withdraw"]

log = get_logger("lending")

LENDERS_SUFFIX = ".lenders"
# A lender's work is one memtable flush and hard links; past this a borrower rebuilds instead
# (a loan that lands later is not acknowledged, and its lender removes it).
REPLY_TIMEOUT_S = 10.0
MAX_MESSAGE = 1 << 20
_PREFIX = "statebed-lend-"
_ADVERT = re.compile(r"([0-9]+)-[0-9a-f]{16}")  # `<pid>-<token>`: the desk's name after the prefix
_TAKEN = b"taken\n"


@dataclass(frozen=True)
class Loan:
    """What the lender's instance held when it was copied: the borrower goes on from it as from its own."""

    loaded: CheckpointRef
    lineage: tuple[CheckpointRef, ...]
    last_snapshot_version: int
    ssts: tuple[ImmutableFile, ...]  # its local SSTs that already live in DFS (a snapshot need not upload them again)

    @property
    def identity(self) -> Identity:
        """What the lender says the copy holds; the copy's own record must say the same."""
        return Identity(self.loaded, self.lineage, self.last_snapshot_version)

    def to_json(self) -> dict[str, Any]:
        return {**self.identity.to_dict(), "ssts": [asdict(f) for f in self.ssts]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Loan:
        """Raises KeyError, TypeError or ValueError on anything malformed (the borrower then rebuilds)."""
        if not isinstance(d, dict) or not isinstance(d.get("ssts"), list):
            raise ValueError("malformed loan")
        ident = Identity.from_dict(d)
        ssts = tuple(ImmutableFile(**f) for f in d["ssts"])
        for f in ssts:
            if not (isinstance(f.local, str) and isinstance(f.dfs, str) and isinstance(f.size, int)):
                raise ValueError(f"bad SST entry {f!r}")
        return cls(ident.loaded, ident.lineage, ident.last_snapshot_version, ssts)


class Lender(Protocol):
    def lend(self, dest: Path) -> Loan | None:
        """A copy of the open instance in `dest` (which it creates), or None if it has none or is busy."""


def _lenders_dir(store_dir: Path) -> Path:
    return store_dir.with_name(store_dir.name + LENDERS_SUFFIX)


def _is_loan_path(dest: Path, store_dir: Path) -> bool:
    """`dest` is a new `loan-*` directory in one of this store's instance directories (the
    shared one, or a private `<store>.<pid>.<token>` beside it): a lender writes nowhere else."""
    if not dest.name.startswith(LOAN_PREFIX) or os.path.lexists(dest):
        return False
    parent, base = dest.parent.resolve(), store_dir.resolve()
    return parent == base or (parent.parent == base.parent and is_private_dir_of(parent.name, base.name))


class _Server:
    """This process's loan desk: one abstract socket and one daemon thread answering on it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.advert = f"{self.pid}-{secrets.token_hex(8)}"
        self.name = _PREFIX + self.advert
        self._lenders: dict[str, weakref.WeakSet[Lender]] = {}
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind("\0" + self.name)
        self._sock.listen(16)
        threading.Thread(target=self._serve, name="statebed-lending", daemon=True).start()

    def add(self, store_dir: Path, lender: Lender) -> None:
        with self._lock:
            self._lenders.setdefault(str(store_dir), weakref.WeakSet()).add(lender)

    def remove(self, store_dir: Path, lender: Lender) -> bool:
        """Drop `lender`; True if no lender of `store_dir` is left in this process."""
        with self._lock:
            held = self._lenders.get(str(store_dir))
            if held is not None:
                held.discard(lender)
                if held:
                    return False
                del self._lenders[str(store_dir)]
            return True

    def _serve(self) -> None:
        while True:
            conn, _ = self._sock.accept()
            with conn:
                try:
                    conn.settimeout(REPLY_TIMEOUT_S)
                    pid, uid = _peer(conn)
                    if uid != os.getuid():
                        log.warning("loan request from another uid refused", extra=kv(pid=pid, uid=uid))
                        continue
                    self._serve_one(conn)
                except Exception as e:  # one bad request must not stop the desk
                    log.info("loan request failed", extra=kv(error=str(e)))

    def _serve_one(self, conn: socket.socket) -> None:
        request = _receive(conn)
        store, where = request.get("store"), request.get("dest")
        if not isinstance(store, str) or not isinstance(where, str):
            raise ValueError("request names no store or destination")
        store_dir, dest = Path(store), Path(where)
        with self._lock:
            lenders = list(self._lenders.get(str(store_dir), ()))
        loan = None
        if lenders and _is_loan_path(dest, store_dir):
            failpoints.hit("lend.copy.before")
            for lender in lenders:
                loan = lender.lend(dest)
                if loan is not None:
                    break
        if loan is None:
            conn.sendall(b'{"loan": null}\n')
            return
        taken = False
        try:
            failpoints.hit("lend.reply.before")
            conn.sendall(json.dumps({"loan": loan.to_json()}).encode() + b"\n")
            taken = _read_line(conn, len(_TAKEN)) == _TAKEN
        finally:
            if not taken:  # the borrower gave up (late, or it found the copy unusable): nobody else removes it
                _remove_copy(dest)


def _peer(conn: socket.socket) -> tuple[int, int]:
    """The other end's (pid, uid), from the kernel (`SO_PEERCRED`), not from anything it says."""
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid


def _read_line(conn: socket.socket, limit: int) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(min(65536, limit + 1 - len(buf)))
        if not chunk:
            raise ValueError("connection closed before a whole message")
        buf += chunk
        if len(buf) > limit:
            raise ValueError("message too long")
    return buf


def _receive(conn: socket.socket) -> dict[str, Any]:
    """One JSON object on one line; ValueError on anything else (RecursionError included)."""
    buf = _read_line(conn, MAX_MESSAGE)
    try:
        msg = json.loads(buf)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"malformed message ({type(e).__name__})") from None
    if not isinstance(msg, dict):
        raise ValueError("message is not an object")
    return msg


def _remove_copy(dest: Path) -> None:
    """Remove a copy made for a borrower that did not take it (a real directory only, never through a link)."""
    if dest.is_dir() and not dest.is_symlink():
        remove_tree(dest)


_SERVER: _Server | None = None
_SERVER_LOCK = threading.Lock()


def _server() -> _Server:
    """This process's desk, started on first use (again in a forked child: threads do not survive a fork)."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None or _SERVER.pid != os.getpid():
            _SERVER = _Server()
        return _SERVER


def advertise(store_dir: Path, lender: Lender) -> None:
    """Offer `lender`'s instance of the store at `store_dir` to the other processes of this host."""
    server = _server()
    server.add(store_dir, lender)
    d = _lenders_dir(store_dir)
    d.mkdir(parents=True, exist_ok=True)
    atomic_write(d / server.advert, server.name.encode(), durable=False)  # meaningful only while this process lives


def withdraw(store_dir: Path, lender: Lender) -> None:
    """Stop offering `lender` (its provider closes); the file goes with this process's last lender of the store."""
    server = _server()
    if server.remove(store_dir, lender):
        _remove_regular(_lenders_dir(store_dir) / server.advert)


class _Stale(Exception):
    """The advertised desk is not there: its socket is gone or another process holds its name."""


def borrow(store_dir: Path, instance_dir: Path, target: Path) -> Loan | None:
    """A copy of some other holder's instance of the store, made in a new `loan-*` directory of
    `instance_dir` and renamed to `target` (which must not exist), and what its lender says it
    holds; None if no lender of this host has one to give now. The claim is only a claim: the
    caller checks it against the copy's own identity record."""
    d = _lenders_dir(store_dir)
    try:
        entries = sorted(e for e in d.iterdir() if _ADVERT.fullmatch(e.name))
    except FileNotFoundError:
        return None
    for entry in entries:
        dest = instance_dir / f"{LOAN_PREFIX}{uuid.uuid4().hex[:12]}"
        try:
            loan = _ask(entry.name, store_dir, dest, target)
        except _Stale as e:
            log.info("removed a stale lender advertisement", extra=kv(lender=entry.name, why=str(e)))
            _remove_regular(entry)
            continue
        except Exception as e:  # malformed, oversized, late: this lender is no use now; a rebuild is never wrong
            log.info("a lender did not answer usably; trying the next", extra=kv(lender=entry.name, error=f"{type(e).__name__}: {e}"))
            continue
        if loan is not None:
            log.info("borrowed an instance", extra=kv(store_dir=str(store_dir), lender=entry.name, loaded=str(loan.loaded)))
            return loan
    return None


def _ask(advert: str, store_dir: Path, dest: Path, target: Path) -> Loan | None:
    pid = int(advert.split("-", 1)[0])
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(REPLY_TIMEOUT_S)
        try:
            s.connect("\0" + _PREFIX + advert)
        except (ConnectionRefusedError, FileNotFoundError):
            raise _Stale("its socket is gone") from None
        peer_pid, peer_uid = _peer(s)
        if peer_pid != pid or peer_uid != os.getuid():  # its name outlived it and someone else bound it
            raise _Stale(f"its socket is held by pid {peer_pid}, uid {peer_uid}")
        s.sendall(json.dumps({"store": str(store_dir), "dest": str(dest)}).encode() + b"\n")
        raw = _receive(s).get("loan")
        if raw is None:
            return None
        loan = Loan.from_json(raw)
        if dest.is_symlink() or not dest.is_dir():
            raise ValueError(f"{dest}: the lender made no copy")
        dest.rename(target)  # ours from here; the lender removes a copy nobody acknowledged
        try:
            s.sendall(_TAKEN)
        except OSError:
            pass  # the lender is gone: the copy was renamed away from what it would remove
        return loan


def _remove_regular(path: Path) -> None:
    try:
        check_regular(path)
        path.unlink()
    except (OSError, StatebedError):
        pass  # already gone, or not a file to remove
