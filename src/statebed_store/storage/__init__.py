"""Checkpoint storage: one interface, a local-directory and an S3 implementation."""

from __future__ import annotations

import os

from ..config import S3Settings
from ..location import parse_location
from .base import FileInfo, Storage, clean_path
from .counting import CountingStorage
from .hedge import HedgedStorage, HedgeState, hedged
from .local import LocalStorage
from .s3 import S3Storage, parse_s3_url

__all__ = [
    "CountingStorage",
    "FileInfo",
    "HedgeState",
    "HedgedStorage",
    "LocalStorage",
    "S3Storage",
    "Storage",
    "clean_path",
    "hedged",
    "open_storage",
    "parse_s3_url",
]


def open_storage(location: str | os.PathLike[str], s3: S3Settings | None = None, *, create_bucket: bool = False) -> Storage:
    """A checkpoint root given as a path or an `s3://bucket/prefix` URL (any spelling `location` parses)."""
    loc = parse_location(location)
    if loc.remote:
        return S3Storage(loc.url, s3 or S3Settings.from_env(), create_bucket=create_bucket)
    return LocalStorage(loc.url)
