"""Fault-free baselines by `baseline_key`: one per key in a process, and, given a directory, one
per key across processes (a test session, a nightly that resumes), so each key's baseline runs once.

    <dir>/<digest>/baseline.json   {"key": repr(key), "verdicts": {...}}, written last
    <dir>/<digest>/run/            a copy of the baseline's run directory

Only local-storage baselines go to disk: an S3 baseline's checkpoint lives in its experiment's
S3 server, gone when the experiment ends. A cached run is read again on use (its final state's
view); one that no longer reads, or whose recorded key differs, is a miss, never a verdict. The
directory is trusted to hold baselines of the statebed that wrote it: give each code version its
own (`make test` uses one per session).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from statebed_base.errors import StatebedError
from statebed_model.experimentdir import read_object, write_json
from statebed_model.rundir import RunDir

from .baseline import Baseline, state_view

__all__ = ["Baselines"]

ENTRY = "baseline.json"


class Baselines:
    """Baselines by key: `get` a finished one, `put` a new one (`durable`: also into the directory)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = None if directory is None else directory.absolute()
        self._memory: dict[Any, Baseline] = {}

    def get(self, key: tuple[Any, ...]) -> Baseline | None:
        """The key's baseline: this process's, else the directory's (read again), else None."""
        if key in self._memory:
            return self._memory[key]
        found = self._read(key)
        if found is not None:
            self._memory[key] = found
        return found

    def put(self, key: tuple[Any, ...], base: Baseline, *, durable: bool) -> None:
        """Keep a baseline that finished without error; `durable`: copy its run into the directory."""
        if base.error is not None:
            return
        self._memory[key] = base
        if durable and self.directory is not None:
            self._write(key, base)

    def run_dirs(self) -> list[str]:
        """Every baseline run directory this process used (a matrix keeps the cells that hold one)."""
        return [b.run_dir for b in self._memory.values()]

    def _entry(self, key: tuple[Any, ...]) -> Path:
        assert self.directory is not None
        return self.directory / hashlib.sha256(repr(key).encode()).hexdigest()[:24]

    def _read(self, key: tuple[Any, ...]) -> Baseline | None:
        if self.directory is None:
            return None
        entry = self._entry(key)
        try:
            doc = read_object(entry / ENTRY)
            if doc.get("key") != repr(key) or not isinstance(doc.get("verdicts"), dict):
                return None
            view = state_view(RunDir(entry / "run"))
        except StatebedError:
            return None
        return Baseline(str(entry / "run"), view, doc["verdicts"])

    def _write(self, key: tuple[Any, ...], base: Baseline) -> None:
        entry = self._entry(key)
        if (entry / ENTRY).exists():
            return
        partial = entry.with_name(entry.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(base.run_dir, partial / "run", symlinks=True)
        write_json(partial / ENTRY, {"key": repr(key), "verdicts": json.loads(json.dumps(base.verdicts, default=str))})
        shutil.rmtree(entry, ignore_errors=True)
        partial.rename(entry)
