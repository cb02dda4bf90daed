"""Where a checkpoint, run directory or landing area lives: the one owner of location schemes.

A location comes as text from the outside world (argv, YAML, run.json, the environment): a
local path, `file://path`, `s3://bucket/prefix`, or `s3a://bucket/prefix` (Hadoop's name for
the same object, as Spark's own store writes it). `parse_location` reads it once into a
`Location`; whether it is remote, its bucket and prefix, and the name Spark's Hadoop file
systems give it are properties of that value, never string tests at the caller. A remote
location carries its endpoint and credentials (`s3`, hidden from its repr), so where a
checkpoint is and how to reach it travel as one value to `open_storage`. A new scheme is one
entry in `_REMOTE`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from statebed_base.errors import UsageError

from .config import S3Settings

__all__ = ["Location", "is_remote", "parse_location"]

Scheme = Literal["local", "s3"]

# URL prefix -> scheme; the first prefix of a scheme is its canonical spelling
_REMOTE: dict[str, Scheme] = {"s3://": "s3", "s3a://": "s3"}
_CANONICAL: dict[Scheme, str] = {"s3": "s3://"}
_HADOOP: dict[Scheme, str] = {"s3": "s3a://"}  # how Spark's Hadoop file systems name an object store's scheme


@dataclass(frozen=True)
class Location:
    """A parsed location. `url`: the canonical text (`s3://bucket/prefix`, or the local path as given)."""

    scheme: Scheme
    url: str
    s3: S3Settings | None = field(default=None, compare=False, repr=False)  # a remote one's endpoint and keys; None: the environment's

    @property
    def remote(self) -> bool:
        """On an object store (every I/O a request), not the local file system."""
        return self.scheme != "local"

    @property
    def hadoop_url(self) -> str:
        """The name Spark's Hadoop file systems give it (`s3://b/p` -> `s3a://b/p`; a path stays a path)."""
        if not self.remote:
            return self.url
        return _HADOOP[self.scheme] + self.url.removeprefix(_CANONICAL[self.scheme])

    def bucket_and_prefix(self) -> tuple[str, str]:
        """`s3://bucket/some/prefix` -> ("bucket", "some/prefix"); a UsageError for a local path or no bucket."""
        if not self.remote:
            raise UsageError(f"not an s3:// URL: {self.url!r}")
        bucket, _, prefix = self.url.removeprefix(_CANONICAL[self.scheme]).partition("/")
        if not bucket:
            raise UsageError(f"S3 URL {self.url!r} has no bucket")
        return bucket, prefix.strip("/")


def parse_location(text: str | os.PathLike[str] | Location, s3: S3Settings | None = None) -> Location:
    """`text` as a Location: a remote URL in its canonical spelling (reached with `s3`, else the
    environment's settings), `file://` dropped from a path. A Location is returned as it is, given
    `s3` when it has none."""
    if isinstance(text, Location):
        return text if text.s3 is not None or s3 is None or not text.remote else Location(text.scheme, text.url, s3)
    loc = os.fspath(text)
    for prefix, scheme in _REMOTE.items():
        if loc.startswith(prefix):
            return Location(scheme, _CANONICAL[scheme] + loc.removeprefix(prefix), s3)
    return Location("local", loc.removeprefix("file://"))


def is_remote(text: str | os.PathLike[str]) -> bool:
    """Whether `text` names an object-store location (any spelling of a remote scheme)."""
    return parse_location(text).remote
