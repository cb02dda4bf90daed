"""The proxy's fault evidence: one JSON line each time a toxic acts on a connection."""

from __future__ import annotations

import collections
import json
import threading
import time
from pathlib import Path

__all__ = ["Recorder"]


class Recorder:
    """Appends {time, proxy, toxic, type, stream, conn, bytes, fresh} to a JSONL file (or nowhere).

    `bytes`: the data the toxic held, delayed, throttled or cut in that act (0: an idle connection);
    `fresh`: the connection was opened while the toxic existed (a client was trying to reach S3)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._counts: collections.Counter[tuple[str, str, str]] = collections.Counter()  # (proxy, type, stream) -> acts
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()

    def counts(self) -> dict[tuple[str, str, str], int]:
        """(proxy, type, stream) -> how many times a toxic acted (for /metrics)."""
        with self._lock:
            return dict(self._counts)

    def act(self, proxy: str, toxic: str, kind: str, stream: str, conn: int, nbytes: int, fresh: bool) -> None:
        with self._lock:
            self._counts[(proxy, kind, stream)] += 1
        if self.path is None:
            return
        rec = {
            "time": time.time(),
            "proxy": proxy,
            "toxic": toxic,
            "type": kind,
            "stream": stream,
            "conn": conn,
            "bytes": nbytes,
            "fresh": fresh,
        }
        line = json.dumps(rec, separators=(",", ":")) + "\n"
        with self._lock, open(self.path, "a") as f:
            f.write(line)
