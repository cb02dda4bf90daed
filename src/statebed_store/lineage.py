"""Checkpoint references and lineages (SPARK-49374).

A lineage, as written in a V2 changelog header or snapshot metadata, lists the
`(version, checkpointUniqueId)` pairs from the writer's presumed last snapshot up to
`version - 1`, ascending; version 1's changelog has `[]`. It is how a single store
directory stays self-contained: the files alone say which history a version belongs to.
"""

from __future__ import annotations

import itertools
import json
import reprlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from statebed_base.errors import LineageError
from statebed_base.jsonsafe import loads_strict

from .naming import is_valid_id

__all__ = ["CheckpointRef", "Lineage", "lineage_from_json", "lineage_from_list", "lineage_to_json", "validate_lineage"]


@dataclass(frozen=True, order=True)
class CheckpointRef:
    """One checkpoint: a version and, in V2, the unique id of the attempt that wrote it."""

    version: int
    id: str | None = None

    def __str__(self) -> str:
        return f"({self.version}, {self.id})" if self.id is not None else f"({self.version})"


Lineage = tuple[CheckpointRef, ...]


def lineage_to_json(lineage: Iterable[CheckpointRef]) -> str:
    """Spark's json4s rendering: `[{"version":1,"checkpointUniqueId":"..."}]`, no spaces."""
    return json.dumps([{"version": r.version, "checkpointUniqueId": r.id} for r in lineage], separators=(",", ":"))


def lineage_from_json(text: str, *, file: str) -> Lineage:
    """Parse a lineage; text that is not JSON is CorruptFileError, a wrong structure LineageError; both name the file."""
    return lineage_from_list(loads_strict(text, file=file, what="lineage"), file=file)


def lineage_from_list(raw: object, *, file: str) -> Lineage:
    """A lineage from already-parsed JSON (snapshot metadata embeds it); LineageError naming the file."""
    if not isinstance(raw, list):
        raise LineageError(file, f"lineage must be a JSON array, got {type(raw).__name__}")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise LineageError(file, f"lineage item {i} is not an object: {reprlib.repr(item)}")
        version, cid = item.get("version"), item.get("checkpointUniqueId")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise LineageError(file, f"lineage item {i} has a bad version {version!r}")
        if not isinstance(cid, str) or not is_valid_id(cid):
            raise LineageError(file, f"lineage item {i} (version {version}) has a malformed id {cid!r}")
        out.append(CheckpointRef(version, cid))
    return tuple(out)


def validate_lineage(lineage: Sequence[CheckpointRef], *, version: int | None, file: str) -> None:
    """Versions strictly increasing by one, no duplicates, ending at `version - 1`."""
    for prev, cur in itertools.pairwise(lineage):
        if cur.version != prev.version + 1:
            raise LineageError(
                file,
                f"lineage versions are not increasing by one: {prev.version} then {cur.version}",
            )
    ids = [r.id for r in lineage]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise LineageError(file, f"lineage lists id {dup} more than once")
    if version is not None and lineage and lineage[-1].version != version - 1:
        raise LineageError(
            file,
            f"lineage of version {version} must end at version {version - 1}, ends at {lineage[-1].version}",
        )
