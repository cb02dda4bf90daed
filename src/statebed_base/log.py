"""Structured, quiet-by-default logging for every statebed component.

Library code logs `log.warning("snapshot upload failed", extra=kv(version=23, id=...))`;
`setup_logging()` (called by the CLI and jobs, never on import) renders records as
`key=value` text or JSON lines on stderr at STATEBED_LOG_LEVEL (default WARNING).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

__all__ = ["get_logger", "kv", "setup_logging"]

_FIELDS = "statebed_fields"


def kv(**fields: Any) -> dict[str, Any]:
    """`extra=` payload carrying structured fields."""
    return {_FIELDS: fields}


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"statebed.{name}")


def _ts(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, _FIELDS, {})
        extra = "".join(f" {k}={v}" for k, v in fields.items())
        line = f"{_ts(record)} {record.levelname} {record.name} {record.getMessage()}{extra}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {"ts": _ts(record), "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        doc.update(getattr(record, _FIELDS, {}))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def setup_logging(level: str | None = None, fmt: str | None = None) -> None:
    """Install one stderr handler on the `statebed` logger (idempotent)."""
    level = (level or os.environ.get("STATEBED_LOG_LEVEL", "WARNING")).upper()
    fmt = (fmt or os.environ.get("STATEBED_LOG_FORMAT", "text")).lower()
    root = logging.getLogger("statebed")
    for h in list(root.handlers):
        if getattr(h, "_statebed", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    handler._statebed = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(getattr(logging, level, logging.WARNING))
    root.propagate = False
