"""Every S3 request a process makes, one JSON line each, when `STATEBED_S3_REQUEST_LOG` names a
directory: `{"start", "end"` (epoch seconds), `"op"` (read, write, list, ...), `"file"`,
`"bytes"` (the body sent or received, when known), `"retries"` (requests urllib3 sent again
meanwhile, in this process), `"error"` (its class, or null)`}`, in `s3-requests-<pid>.jsonl`.

It is what a storage fault's evidence is read from: a toxic proves it acted only by what it did
to statebed's own requests inside its window (slowed, held, cut), never by being scheduled. A
line that cannot be written is a warning, never a failed request.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from statebed_base.errors import NotRegularFileError
from statebed_base.jsonsafe import loads_strict
from statebed_base.localfs import append_line, read_regular
from statebed_base.log import get_logger, kv

__all__ = ["REQUEST_LOG_ENV", "log_request", "read_requests"]

REQUEST_LOG_ENV = "STATEBED_S3_REQUEST_LOG"
PREFIX = "s3-requests-"
log = get_logger("s3.requests")


def log_request(op: str, file: str, start: float, end: float, *, nbytes: int | None, retries: int, error: str | None) -> None:
    """Append one request to this process's log, if a directory is named."""
    directory = os.environ.get(REQUEST_LOG_ENV)
    if not directory:
        return
    rec = {"start": round(start, 6), "end": round(end, 6), "op": op, "file": file, "bytes": nbytes, "retries": retries, "error": error}
    path = Path(directory) / f"{PREFIX}{os.getpid()}.jsonl"
    try:
        append_line(path, json.dumps(rec).encode())
    except (OSError, NotRegularFileError) as e:
        log.warning("cannot log an S3 request", extra=kv(file=str(path), error=str(e)))


def read_requests(directory: Path) -> list[dict[str, Any]]:
    """Every request logged under `directory`, by start time; a line cut by a killed process is skipped."""
    out: list[dict[str, Any]] = []
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob(f"{PREFIX}*.jsonl")):
        for line in read_regular(path).splitlines():
            try:
                rec = loads_strict(line, file=str(path))
            except Exception:  # the last line of a process killed mid-write
                continue
            if isinstance(rec, dict) and isinstance(rec.get("start"), (int, float)) and isinstance(rec.get("end"), (int, float)):
                out.append(rec)
    return sorted(out, key=lambda r: float(r["start"]))
