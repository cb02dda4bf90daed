"""One store directory as seen from storage: listed once, headers read on demand.

Loads, cleanup, the CLI and the verifiers all ask the same questions of a store directory
(which `(version, id)` has a snapshot or a changelog, what lineage a file records); this
class answers them with one LIST and one ranged read per header, and can share a cache
of headers across calls: V2 files are never overwritten, so a header read once stays true.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from . import lz4block
from .changelog import ChangelogHeader, parse_changelog_header, read_changelog_header
from .checksum import check_sidecar
from .errors import LineageError, MissingFileError
from .lineage import CheckpointRef, Lineage
from .naming import CHANGELOG, SNAPSHOT, SST_DIR, StateFileName, StoreId, parse_state_file, sidecar_main, sidecar_name
from .snapshot import SnapshotMetadata, read_zip
from .storage.base import FileInfo, Storage

__all__ = ["HeaderCache", "StoreFiles"]

T = TypeVar("T")


class HeaderCache:
    """A bounded LRU of parsed headers/metadata of immutable (V2) files, keyed by (kind, display path)."""

    def __init__(self, capacity: int = 20_000) -> None:
        self.capacity = capacity
        self._d: OrderedDict[tuple[str, str], object] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> object | None:
        with self._lock:
            v = self._d.get(key)
            if v is not None:
                self._d.move_to_end(key)
            return v

    def put(self, key: tuple[str, str], value: object) -> None:
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.capacity:
                self._d.popitem(last=False)

    def __len__(self) -> int:
        return len(self._d)


@dataclass(frozen=True)
class ListedFile:
    name: StateFileName
    info: FileInfo


class StoreFiles:
    def __init__(
        self,
        storage: Storage,
        store: StoreId,
        listing: Iterable[FileInfo] | None = None,
        cache: HeaderCache | None = None,
        verify_checksums: bool = True,
    ) -> None:
        self.storage = storage
        self.store = store
        self.cache = cache
        self.verify_checksums = verify_checksums
        infos = list(storage.list(store.dir) if listing is None else listing)
        self.files: dict[StateFileName, FileInfo] = {}
        self.sidecars: dict[str, FileInfo] = {}
        self.other: list[FileInfo] = []
        self._ssts: dict[str, FileInfo] | None = None
        for info in infos:
            parsed = parse_state_file(info.name)
            if parsed is not None:
                self.files[parsed] = info
            elif sidecar_main(info.name) is not None:
                self.sidecars[info.name] = info
            else:
                self.other.append(info)

    # -- presence -------------------------------------------------------------------
    def has(self, ref: CheckpointRef, kind: str) -> bool:
        return StateFileName(ref.version, ref.id, kind) in self.files  # type: ignore[arg-type]

    def has_snapshot(self, ref: CheckpointRef) -> bool:
        return self.has(ref, SNAPSHOT)

    def has_changelog(self, ref: CheckpointRef) -> bool:
        return self.has(ref, CHANGELOG)

    def path(self, ref: CheckpointRef, kind: str) -> str:
        return self.store.path(StateFileName(ref.version, ref.id, kind).name)  # type: ignore[arg-type]

    def display(self, ref: CheckpointRef, kind: str) -> str:
        return self.storage.display(self.path(ref, kind))

    def refs(self, kind: str | None = None) -> list[CheckpointRef]:
        """Every (version, id) with a file of `kind` (any kind when None), sorted."""
        return sorted({CheckpointRef(n.version, n.id) for n in self.files if kind is None or n.kind == kind})

    def has_sidecar(self, ref: CheckpointRef, kind: str) -> bool:
        return sidecar_name(StateFileName(ref.version, ref.id, kind).name) in self.sidecars  # type: ignore[arg-type]

    # -- contents ---------------------------------------------------------------------
    def read_verified(self, ref: CheckpointRef, kind: str) -> bytes:
        """Whole file, checked against its CRC32C sidecar when one is listed."""
        path = self.path(ref, kind)
        data = self.storage.read(path)
        if self.verify_checksums and self.has_sidecar(ref, kind):
            try:
                side = self.storage.read(sidecar_name(path))
            except MissingFileError:
                side = None  # deleted since listing: fall back to the container's own checks
            if side is not None:
                check_sidecar(data, side, file=self.storage.display(path))
        return data

    def _cached(self, ref: CheckpointRef, kind: str, read: Callable[[str], T], tag: str | None = None) -> T:
        """`read(display path)`, memoised for V2 files (never overwritten); V1 files always re-read.

        `tag` names what was read (default: the kind), so a cheaper read never stands in for a checked one.
        """
        key = self.display(ref, kind)
        cacheable = self.cache is not None and ref.id is not None
        if cacheable:
            hit = self.cache.get((tag or kind, key))  # type: ignore[union-attr]
            if hit is not None:
                return hit  # type: ignore[return-value]
        value = read(key)
        if cacheable:
            self.cache.put((tag or kind, key), value)  # type: ignore[union-attr]
        return value

    def changelog_header(self, ref: CheckpointRef) -> ChangelogHeader:
        path = self.path(ref, CHANGELOG)
        return self._cached(ref, CHANGELOG, lambda _: read_changelog_header(self.storage, path, version=ref.version))

    def verified_changelog_header(self, ref: CheckpointRef) -> ChangelogHeader:
        """The header, after checking the whole file: its CRC32C sidecar, else every LZ4 block.

        For verifiers: a flipped byte anywhere in the file is reported, not only in the header.
        """

        def read(shown: str) -> ChangelogHeader:
            data = self.read_verified(ref, CHANGELOG)
            checked_by_sidecar = self.verify_checksums and self.has_sidecar(ref, CHANGELOG)
            payload, _ = lz4block.decompress(data if not checked_by_sidecar else data[: 256 * 1024], file=shown, partial=checked_by_sidecar)
            return parse_changelog_header(payload, file=shown, version=ref.version)

        header = self._cached(ref, CHANGELOG, read, tag="changelog, whole file checked")
        if self.cache is not None and ref.id is not None:
            self.cache.put((CHANGELOG, self.display(ref, CHANGELOG)), header)  # also serves plain header reads
        return header

    def snapshot_metadata(self, ref: CheckpointRef) -> SnapshotMetadata:
        return self._cached(ref, SNAPSHOT, lambda shown: read_zip(self.read_verified(ref, SNAPSHOT), file=shown, version=ref.version)[0])

    def lineage_of(self, ref: CheckpointRef) -> Lineage:
        """The lineage `ref`'s changelog records (V2 changelogs always carry one)."""
        header = self.changelog_header(ref)
        if header.lineage is None:
            raise LineageError(
                self.display(ref, CHANGELOG),
                f"changelog format v{header.format_version} carries no lineage, but the file is named as a V2 checkpoint",
            )
        return header.lineage

    def sst_listing(self) -> dict[str, FileInfo]:
        """`SSTs/` of this store, listed once per StoreFiles (like the directory itself)."""
        if self._ssts is None:
            self._ssts = {i.name: i for i in self.storage.list(f"{self.store.dir}/{SST_DIR}")}
        return self._ssts
