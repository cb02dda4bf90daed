"""One store directory as seen from storage: listed once, headers read on demand.

Loads, cleanup, the CLI and the verifiers all ask the same questions of a store directory
(which `(version, id)` has a snapshot or a changelog, what lineage a file records); this
class answers them with one LIST and one ranged read per header, and can share a cache
of headers across calls: V2 files are never overwritten, so a header read once stays true.
Whole-file checks (what a verifier vouches for) are never answered from that cache: they
are made once per StoreFiles, so a file damaged since an earlier pass is still reported.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TypeVar

from statebed_base.errors import CorruptFileError, LineageError, MissingFileError

from .changelog import DELETE, ChangelogHeader, parse_changelog, read_changelog_header
from .checksum import check_owner, check_sidecar, crc32c
from .lineage import CheckpointRef, Lineage
from .naming import CHANGELOG, SNAPSHOT, SST_DIR, StateFileName, StoreId, parse_state_file, sidecar_main, sidecar_name
from .row_checksum import RowChecksums, checkpoint_row_checksums
from .snapshot import ImmutableFile, SnapshotMetadata, check_identity, read_zip
from .storage.base import FileInfo, Storage

__all__ = ["HeaderCache", "StoreFiles"]

T = TypeVar("T")
_UNREAD = "unread"  # row checksums not asked for yet: read from the offset log on first use


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


class StoreFiles:
    def __init__(
        self,
        storage: Storage,
        store: StoreId,
        listing: Iterable[FileInfo] | None = None,
        cache: HeaderCache | None = None,
        verify_checksums: bool = True,
        row_checksums: RowChecksums | str | None = _UNREAD,
    ) -> None:
        self.storage = storage
        self.store = store
        self.cache = cache
        self.verify_checksums = verify_checksums
        self._row_checksums = row_checksums
        infos = list(storage.list(store.dir) if listing is None else listing)
        self.files: dict[StateFileName, FileInfo] = {}
        self.sidecars: dict[str, FileInfo] = {}
        self.other: list[FileInfo] = []
        self._listings: dict[str, dict[str, FileInfo]] = {}
        self._checked: dict[tuple[str, str], object] = {}  # this pass's whole-file checks (see `_once`)
        for info in infos:
            parsed = parse_state_file(info.name)
            if parsed is not None:
                self.files[parsed] = info
            elif sidecar_main(info.name) is not None:
                self.sidecars[info.name] = info
            else:
                self.other.append(info)

    @property
    def row_checksums(self) -> RowChecksums | None:
        """How the checkpoint frames its rows (`row_checksum`): as given, else read from its offset
        log once, on first use (a load given None never reads the offset log)."""
        if isinstance(self._row_checksums, str):
            self._row_checksums = checkpoint_row_checksums(self.storage)
        return self._row_checksums

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
        refs = {CheckpointRef(n.version, n.id) for n in self.files if kind is None or n.kind == kind}
        return sorted(refs, key=lambda r: (r.version, r.id or ""))  # V1 and V2 names can share a version

    def has_sidecar(self, ref: CheckpointRef, kind: str) -> bool:
        return sidecar_name(StateFileName(ref.version, ref.id, kind).name) in self.sidecars  # type: ignore[arg-type]

    # -- contents ---------------------------------------------------------------------
    def read_verified(self, ref: CheckpointRef, kind: str) -> bytes:
        """Whole file, checked against its CRC32C sidecar when one is listed, and the sidecar's
        record of whose file it is (a file copied in from another store or attempt is a ForeignFileError)."""
        path = self.path(ref, kind)
        data = self.storage.read(path)
        if self.verify_checksums and self.has_sidecar(ref, kind):
            try:
                side = self.storage.read(sidecar_name(path))
            except MissingFileError:
                side = None  # deleted since listing: fall back to the container's own checks
            if side is not None:
                shown = self.storage.display(path)
                creator = check_sidecar(data, side, file=shown)
                s = self.store
                check_owner(
                    creator,
                    operator=s.operator,
                    partition=s.partition,
                    store_name=s.store_name,
                    version=ref.version,
                    checkpoint_id=ref.id,
                    file=shown,
                )
        return data

    def _cached(self, ref: CheckpointRef, kind: str, read: Callable[[str], T], tag: str) -> T:
        """`read(display path)`, memoised in the shared cache for V2 files (never overwritten); V1 files always re-read.

        `tag` names what was read, so a cheaper read never stands in for a checked one.
        Only readers that act on what they read (loads, cleanup, ls) use this: a verifier's
        checks go through `_once`, so a file damaged after an earlier pass is still reported.
        """
        key = (tag, self.display(ref, kind))
        cacheable = self.cache is not None and ref.id is not None
        if cacheable:
            hit = self.cache.get(key)  # type: ignore[union-attr]
            if hit is not None:
                return hit  # type: ignore[return-value]
        value = read(key[1])
        if cacheable:
            self.cache.put(key, value)  # type: ignore[union-attr]
        return value

    def _once(self, ref: CheckpointRef, kind: str, read: Callable[[str], T], tag: str) -> T:
        shown = self.display(ref, kind)
        return self.checked_once((tag, shown), lambda: read(shown))

    def changelog_header(self, ref: CheckpointRef) -> ChangelogHeader:
        """Format and lineage from a ranged read of the file's start (no checksum over the whole file)."""
        path = self.path(ref, CHANGELOG)
        return self._cached(ref, CHANGELOG, lambda _: read_changelog_header(self.storage, path, version=ref.version), "changelog header")

    def verified_changelog_header(self, ref: CheckpointRef) -> ChangelogHeader:
        """The header, after checking the whole file: CRC32C sidecar and owner, every LZ4 block, every record.

        For verifiers: a flipped byte anywhere in the file, or records cut short, is reported,
        not only a damaged header. Read once per StoreFiles, never served from the shared cache.
        """

        def read(shown: str) -> ChangelogHeader:
            cl = parse_changelog(self.read_verified(ref, CHANGELOG), file=shown, version=ref.version)
            if self.row_checksums is None:
                cl.check_records()
            else:  # every record's checksum too, as a load verifies it
                ops, keys, values = cl.columns()
                self.row_checksums.replay_columns(ops, keys, values, DELETE, file=shown)
            return cl.header

        header = self._once(ref, CHANGELOG, read, "changelog, whole file checked")
        if self.cache is not None and ref.id is not None:
            self.cache.put(("changelog header", self.display(ref, CHANGELOG)), header)  # serves later plain header reads
        return header

    def _read_snapshot_metadata(self, ref: CheckpointRef, shown: str) -> SnapshotMetadata:
        meta, _ = read_zip(self.read_verified(ref, SNAPSHOT), file=shown, version=ref.version)
        check_identity(meta, ref, self.store, file=shown)
        return meta

    def snapshot_metadata(self, ref: CheckpointRef) -> SnapshotMetadata:
        """The zip's metadata (whole zip checked against its sidecar, identity against its name); shared-cached."""
        tag = "snapshot metadata, sidecar checked" if self.verify_checksums else "snapshot metadata"
        return self._cached(ref, SNAPSHOT, lambda shown: self._read_snapshot_metadata(ref, shown), tag)

    def verified_snapshot_metadata(self, ref: CheckpointRef) -> SnapshotMetadata:
        """As `snapshot_metadata`, but read once per StoreFiles and never from the shared cache (verifiers)."""
        return self._once(ref, SNAPSHOT, lambda shown: self._read_snapshot_metadata(ref, shown), "snapshot metadata, checked")

    def lineage_of(self, ref: CheckpointRef) -> Lineage:
        """The lineage `ref`'s changelog records (V2 changelogs always carry one)."""
        header = self.changelog_header(ref)
        if header.lineage is None:
            raise LineageError(
                self.display(ref, CHANGELOG),
                f"changelog format v{header.format_version} carries no lineage, but the file is named as a V2 checkpoint",
            )
        return header.lineage

    def sst_listing(self, subdir: str = SST_DIR) -> dict[str, FileInfo]:
        """`SSTs/` (or `logs/`) of this store, listed once per StoreFiles (like the directory itself)."""
        if subdir not in self._listings:
            self._listings[subdir] = {i.name: i for i in self.storage.list(f"{self.store.dir}/{subdir}")}
        return self._listings[subdir]

    def read_immutable(self, f: ImmutableFile, subdir: str = SST_DIR) -> bytes:
        """An SST (or log file) a snapshot names, checked against the size and CRC32C the snapshot recorded."""
        path = f"{self.store.dir}/{subdir}/{f.dfs}"
        data = self.storage.read(path)
        if len(data) != f.size:
            raise CorruptFileError(self.storage.display(path), f"is {len(data)} bytes, snapshot metadata expects {f.size}")
        if f.crc32c is not None and crc32c(data) != f.crc32c:
            raise CorruptFileError(self.storage.display(path), "CRC32C does not match the one its snapshot recorded: the file is corrupt")
        return data

    def checked_once(self, key: tuple[str, str], check: Callable[[], T]) -> T:
        """`check()` at most once per StoreFiles (one verifier pass), never from the shared cache."""
        if key not in self._checked:
            self._checked[key] = check()
        return self._checked[key]  # type: ignore[return-value]
