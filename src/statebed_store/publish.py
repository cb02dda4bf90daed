"""Publishing one state file with its CRC32C sidecar: the single write path for changelogs and zips."""

from __future__ import annotations

from typing import Any

from .checksum import make_sidecar
from .naming import sidecar_name
from .storage.base import Storage

__all__ = ["publish_state_file"]


def publish_state_file(
    storage: Storage,
    path: str,
    data: bytes,
    *,
    create_only: bool,
    checksums: bool,
    creator: dict[str, Any] | None = None,
) -> None:
    """Write `path` (whole or not at all), then its `.crc` sidecar.

    V2 files are create-only: a name is never reused, so a sidecar always describes the
    file next to it. V1 files are overwritten (that is V1): the old sidecar is removed
    first, so a crash between the two writes leaves a file without a sidecar (checked by
    its LZ4 block checksums instead), never a file with a stale one.
    """
    side = sidecar_name(path)
    if checksums and not create_only:
        storage.delete([side])
    storage.write(path, data, create_only=create_only)
    if checksums:
        storage.write(side, make_sidecar(data, creator), create_only=create_only)
