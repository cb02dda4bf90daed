"""The rewind journal: a list of file moves written before the first move, so an interrupted
rewind (or undo) is finished by the next rewind command instead of being left half-done.

    <root>/_rewind/<UTC stamp>/journal.json   {"schema", "toBatch", "latestBatch", "created",
                                               "status", "moves": [{"from", "to"}, ...]}
    <root>/_rewind/<UTC stamp>/files/...      the moved files, at their root-relative paths

Status: `moving` (written before the first move) -> `done`; `--undo` writes `undoing`
(before the first move back) -> `undone`. Each move is a rename within one filesystem,
and redoing one is a no-op when its source is gone and its destination there, so finishing
a journal after a crash anywhere is safe. Nothing is ever deleted.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statebed_base.errors import CorruptFileError, StatebedError, UsageError
from statebed_base.jsonsafe import loads_strict
from statebed_base.localfs import atomic_write, move_durably
from statebed_store import failpoints

__all__ = ["BACKUP_DIR", "JOURNAL_SCHEMA", "Journal", "Move", "last_journal", "new_journal", "pending_journal"]

BACKUP_DIR = "_rewind"
JOURNAL_SCHEMA = 1
_FORWARD, _BACKWARD = ("moving", "done"), ("undoing", "undone")

failpoints.register("rewind.move.after", "rewind: after each file move of a rewind or undo (exit: an interrupted rewind)")


@dataclass(frozen=True)
class Move:
    src: str  # root-relative
    dst: str

    def to_json(self) -> dict[str, str]:
        return {"from": self.src, "to": self.dst}


@dataclass
class Journal:
    root: Path
    name: str  # the stamp directory under _rewind/
    to_batch: int
    latest_batch: int
    moves: list[Move]
    status: str
    created: str

    @property
    def dir(self) -> str:
        return f"{BACKUP_DIR}/{self.name}"

    @property
    def path(self) -> Path:
        return self.root / self.dir / "journal.json"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": JOURNAL_SCHEMA,
            "toBatch": self.to_batch,
            "latestBatch": self.latest_batch,
            "created": self.created,
            "status": self.status,
            "moves": [m.to_json() for m in self.moves],
        }

    def save(self, status: str) -> None:
        self.status = status
        atomic_write(self.path, json.dumps(self.to_json(), indent=2).encode() + b"\n")

    def run_forward(self) -> None:
        """Do (or finish) every move, then mark the journal done."""
        if self.status != _FORWARD[0]:
            self.save(_FORWARD[0])
        for m in self.moves:
            _move(self.root, m.src, m.dst)
        self.save(_FORWARD[1])

    def conflicts(self) -> list[str]:
        """Files written at a moved path since the rewind (a reprocess ran): an undo would overwrite them."""
        return [m.src for m in self.moves if (self.root / m.src).exists() and (self.root / m.dst).exists()]

    def run_backward(self) -> None:
        """Move every file back (newest move last undone first), then mark the journal undone."""
        if self.status != _BACKWARD[0]:
            clash = self.conflicts()
            if clash:
                raise UsageError(
                    f"cannot undo the rewind in {self.root / self.dir}: {self.root / clash[0]} was written after it "
                    f"({len(clash)} file(s) in all; a reprocess ran); move them aside first"
                )
            self.save(_BACKWARD[0])
        for m in reversed(self.moves):
            _move(self.root, m.dst, m.src)
        self.save(_BACKWARD[1])


def _move(root: Path, src: str, dst: str) -> None:
    """Rename `src` to `dst` (root-relative); already done is fine, a clash or a vanished file is an error."""
    s, d = root / src, root / dst
    if not s.exists():
        if d.exists():
            return  # done before an interruption
        raise StatebedError(f"rewind journal: neither {s} nor {d} exists; the checkpoint changed under the rewind")
    if d.exists():
        raise StatebedError(f"rewind journal: both {s} and {d} exist; refusing to overwrite either")
    try:
        move_durably(s, d)
    except OSError as e:
        raise StatebedError(f"{s}: cannot move to {d} ({e.strerror or e})") from None
    failpoints.hit("rewind.move.after")


def new_journal(root: Path, to_batch: int, latest_batch: int, moves: list[tuple[str, str]]) -> Journal:
    """A journal in a fresh dated directory; `moves` are (src, path under files/), not yet saved."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name, n = stamp, 1
    while (root / BACKUP_DIR / name).exists():
        n += 1
        name = f"{stamp}-{n}"
    files = f"{BACKUP_DIR}/{name}/files"
    return Journal(
        root,
        name,
        to_batch,
        latest_batch,
        [Move(s, f"{files}/{d}") for s, d in moves],
        "planned",
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def _journals(root: Path) -> list[Journal]:
    base = root / BACKUP_DIR
    if not base.is_dir():
        return []
    return [_read(root, d.name) for d in sorted(base.iterdir()) if (d / "journal.json").is_file()]


def _read(root: Path, name: str) -> Journal:
    path = root / BACKUP_DIR / name / "journal.json"
    doc = loads_strict(path.read_bytes(), file=str(path), what="rewind journal")
    try:
        if not isinstance(doc, dict) or doc.get("schema") != JOURNAL_SCHEMA:
            raise ValueError(f"unknown schema {doc.get('schema') if isinstance(doc, dict) else None!r}")
        moves = [Move(str(m["from"]), str(m["to"])) for m in doc["moves"]]
        if any(os.path.isabs(p) or ".." in p.split("/") for m in moves for p in (m.src, m.dst)):
            raise ValueError("a move names a path outside the checkpoint")
        status = str(doc["status"])
        if status not in _FORWARD + _BACKWARD:
            raise ValueError(f"unknown status {status!r}")
        return Journal(root, name, int(doc["toBatch"]), int(doc["latestBatch"]), moves, status, str(doc["created"]))
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptFileError(str(path), f"not a usable rewind journal ({e})") from None


def pending_journal(root: Path) -> Journal | None:
    """The journal of a rewind or undo that was interrupted (at most one: each command finishes it first)."""
    return next((j for j in _journals(root) if j.status in ("moving", "undoing")), None)


def last_journal(root: Path) -> Journal | None:
    """The newest rewind that is done (what `--undo` restores)."""
    done = [j for j in _journals(root) if j.status == "done"]
    return done[-1] if done else None
