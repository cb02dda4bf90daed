"""What an open RocksDB instance holds, recorded inside the instance itself (issue 62).

An instance is served (a cache hit, a catch-up, a loan, a takeover) only if it proves from
itself that it holds the committed `(version, id)` it is claimed to: a record in its own column
family (`engine.IDENTITY_CF`), written after the commit's last changes and deleted before the
instance changes again. RocksDB's WAL is one ordered log, so an instance reopened after a crash
(its WAL replayed up to the first torn record) that still holds a record holds every write made
before it, and none after a later deletion: the record names exactly what the rows are, or is
absent. `held.json` and a lender's answer are claims; this record is the proof they are checked
against, and on any mismatch the instance is dropped and rebuilt from the checkpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .lineage import CheckpointRef

__all__ = ["Identity"]

_MAX_BYTES = 1 << 20  # a lineage is capped at 64 KiB by writeUTF; anything this large is not ours


@dataclass(frozen=True)
class Identity:
    """The committed checkpoint an instance is at, its lineage (the head last) and last snapshot."""

    loaded: CheckpointRef
    lineage: tuple[CheckpointRef, ...]
    last_snapshot_version: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape, shared by the record, a loan's answer and `held.json`."""
        return {
            "loaded": [self.loaded.version, self.loaded.id],
            "lineage": [[r.version, r.id] for r in self.lineage],
            "last_snapshot_version": self.last_snapshot_version,
        }

    @classmethod
    def from_dict(cls, d: Any) -> Identity:
        """Raises ValueError on anything but the shape `to_dict` writes."""
        try:
            loaded, lineage, last = d["loaded"], d["lineage"], d["last_snapshot_version"]
        except (KeyError, TypeError) as e:
            raise ValueError(f"malformed identity record ({e})") from None
        if not isinstance(last, int) or isinstance(last, bool) or not isinstance(lineage, list):
            raise ValueError("malformed identity record")
        return cls(_ref(loaded), tuple(_ref(p) for p in lineage), last)

    def encode(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Identity:
        """Raises ValueError on anything that is not a record this module wrote."""
        if len(data) > _MAX_BYTES:
            raise ValueError(f"identity record of {len(data)} bytes")
        try:
            d: Any = json.loads(data)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"malformed identity record ({type(e).__name__})") from None
        return cls.from_dict(d)


def _ref(pair: Any) -> CheckpointRef:
    if not isinstance(pair, list) or len(pair) != 2:
        raise ValueError(f"bad checkpoint reference {pair!r}")
    version, rid = pair
    if not isinstance(version, int) or isinstance(version, bool) or version < 0 or not (rid is None or isinstance(rid, str)):
        raise ValueError(f"bad checkpoint reference {pair!r}")
    return CheckpointRef(version, rid)
