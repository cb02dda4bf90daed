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
file `<store dir>.lenders/<pid>` holding that name; a borrower tries each one, and removes a
file whose socket is gone.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import uuid
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from statebed_base.errors import StatebedError
from statebed_base.localfs import atomic_write, check_regular, read_regular
from statebed_base.log import get_logger, kv

from .lineage import CheckpointRef
from .naming import LOAN_PREFIX, is_private_dir_of
from .snapshot import ImmutableFile

__all__ = ["Lender", "Loan", "advertise", "borrow", "withdraw"]

log = get_logger("lending")

LENDERS_SUFFIX = ".lenders"
# A lender's work is one memtable flush and hard links; past this a borrower rebuilds instead
# (a loan that lands later is a leftover `loan-*` directory, removed with its instance directory).
REPLY_TIMEOUT_S = 10.0
MAX_MESSAGE = 1 << 20


@dataclass(frozen=True)
class Loan:
    """What the lender's instance held when it was copied: the borrower goes on from it as from its own."""

    loaded: CheckpointRef
    lineage: tuple[CheckpointRef, ...]
    last_snapshot_version: int
    ssts: tuple[ImmutableFile, ...]  # its local SSTs that already live in DFS (a snapshot need not upload them again)

    def to_json(self) -> dict[str, Any]:
        return {
            "loaded": [self.loaded.version, self.loaded.id],
            "lineage": [[r.version, r.id] for r in self.lineage],
            "last_snapshot_version": self.last_snapshot_version,
            "ssts": [asdict(f) for f in self.ssts],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Loan:
        """Raises KeyError, TypeError or ValueError on anything malformed (the borrower then rebuilds)."""

        def ref(pair: list[Any]) -> CheckpointRef:
            version, rid = pair
            if not isinstance(version, int) or not (rid is None or isinstance(rid, str)):
                raise ValueError(f"bad checkpoint reference {pair!r}")
            return CheckpointRef(version, rid)

        last = d["last_snapshot_version"]
        if not isinstance(last, int):
            raise ValueError(f"bad last_snapshot_version {last!r}")
        return cls(ref(d["loaded"]), tuple(ref(p) for p in d["lineage"]), last, tuple(ImmutableFile(**f) for f in d["ssts"]))


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
        self.name = f"statebed-lend-{self.pid}-{secrets.token_hex(8)}"
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
                    conn.sendall(self._answer(_receive(conn)))
                except Exception as e:  # one bad request must not stop the desk
                    log.info("loan request failed", extra=kv(error=str(e)))

    def _answer(self, request: dict[str, Any]) -> bytes:
        store_dir, dest = Path(request["store"]), Path(request["dest"])
        with self._lock:
            lenders = list(self._lenders.get(str(store_dir), ()))
        loan = None
        if _is_loan_path(dest, store_dir):
            for lender in lenders:
                loan = lender.lend(dest)
                if loan is not None:
                    break
        return json.dumps({"loan": None if loan is None else loan.to_json()}).encode() + b"\n"


def _receive(conn: socket.socket) -> dict[str, Any]:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise ValueError("connection closed before a whole message")
        buf += chunk
        if len(buf) > MAX_MESSAGE:
            raise ValueError("message too long")
    msg = json.loads(buf)
    if not isinstance(msg, dict):
        raise ValueError("message is not an object")
    return msg


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
    atomic_write(d / str(server.pid), server.name.encode(), durable=False)  # meaningful only while this process lives


def withdraw(store_dir: Path, lender: Lender) -> None:
    """Stop offering `lender` (its provider closes); the file goes with this process's last lender of the store."""
    server = _server()
    if server.remove(store_dir, lender):
        _remove_regular(_lenders_dir(store_dir) / str(server.pid))


def borrow(store_dir: Path, instance_dir: Path) -> tuple[Loan, Path] | None:
    """A copy of some other holder's instance of the store, made in a new `loan-*` directory of
    `instance_dir`, and what it holds; None if no lender of this host has one to give now."""
    d = _lenders_dir(store_dir)
    try:
        entries = sorted(e for e in d.iterdir() if e.name.isdigit())
    except FileNotFoundError:
        return None
    for entry in entries:
        try:
            name = read_regular(entry, max_bytes=256).decode()
        except (OSError, StatebedError, UnicodeDecodeError):
            continue  # being replaced, or gone
        dest = instance_dir / f"{LOAN_PREFIX}{uuid.uuid4().hex[:12]}"
        try:
            loan = _ask(name, store_dir, dest)
        except (ConnectionRefusedError, FileNotFoundError):
            _remove_regular(entry)  # its process is gone: the socket went with it
            continue
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.info("a lender did not answer; trying the next", extra=kv(lender=name, error=str(e)))
            continue
        if loan is not None and dest.is_dir():
            log.info("borrowed an instance", extra=kv(store_dir=str(store_dir), lender=name, loaded=str(loan.loaded)))
            return loan, dest
    return None


def _ask(name: str, store_dir: Path, dest: Path) -> Loan | None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(REPLY_TIMEOUT_S)
        s.connect("\0" + name)
        s.sendall(json.dumps({"store": str(store_dir), "dest": str(dest)}).encode() + b"\n")
        reply = _receive(s)
    loan = reply["loan"]
    return None if loan is None else Loan.from_json(loan)


def _remove_regular(path: Path) -> None:
    try:
        check_regular(path)
        path.unlink()
    except (OSError, StatebedError):
        pass  # already gone, or not a file to remove
