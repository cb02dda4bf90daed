"""The proxy's fault evidence: one JSON line each time a toxic acts on a connection."""

from __future__ import annotations

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
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()

    def act(self, proxy: str, toxic: str, kind: str, stream: str, conn: int, nbytes: int, fresh: bool) -> None:
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
