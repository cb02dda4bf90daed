"""Checkpoint storage: one interface, a local-directory and an S3 implementation."""

from __future__ import annotations

import os

from ..config import S3Settings
from ..location import Location, parse_location
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


def open_storage(location: str | os.PathLike[str] | Location, *, create_bucket: bool = False) -> Storage:
    """A storage root given as a Location (a remote one with its endpoint and keys), or as a path or
    `s3://bucket/prefix` URL reached with the environment's settings (any spelling `parse_location` reads)."""
    loc = parse_location(location)
    if loc.remote:
        return S3Storage(loc.url, loc.s3 or S3Settings.from_env(), create_bucket=create_bucket)
    return LocalStorage(loc.url)
