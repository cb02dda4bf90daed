"""The store never serves a corrupt checkpoint as state: damaged SSTs, foreign files, broken records, zip bombs.

Each test damages real files written by the store (or Spark's own fixtures) and checks the
load either plans around the damage, exactly as `statebed plan` and the verifier do, or
fails naming the file: never a partial or foreign state.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest
from checkpoint_helpers import STORE, Written, load_state, write_versions
from native_fixtures import SPARK_VERSIONS

from statebed_base.errors import CorruptFileError, ForeignFileError
from statebed_store import CheckpointRef, HeaderCache, SnapshotUploader, Storage, StoreFiles, StoreId, StoreOptions, open_storage
from statebed_store.changelog import encode_changelog, parse_changelog
from statebed_store.checksum import make_sidecar
from statebed_store.engine import RocksEngine
from statebed_store.inspection import committed_ref, discover_stores, dump_state, store_index
from statebed_store.lz4block import compress
from statebed_store.plan import loadable_plan
from statebed_store.snapshot import read_zip


@pytest.fixture
def ckpt(local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader) -> Written:
    """Versions 1-5, a snapshot of version 3 (with SSTs), committed in the commit log."""
    return write_versions(local_storage, options, uploader, 5, snapshot_at=(3,), commit_log=True)


def flip(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    i = len(data) // 3 if offset is None else offset
    data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def local(storage: Storage, rel: str) -> Path:
    return Path(storage.url) / rel


def snapshot_ssts(w: Written, version: int) -> list[str]:
    meta, _ = read_zip(w.storage.read(w.path(version, "zip")), file="zip")
    return [w.store.path(f"SSTs/{f.dfs}") for f in meta.sst_files]


# -- item 2: a damaged SST is never a silently shorter state --------------------------------------


def test_scan_of_a_damaged_sst_raises_naming_it(tmp_path: Path) -> None:
    engine = RocksEngine(tmp_path / "db")
    keys = [b"k%06d" % i for i in range(20_000)]
    engine.put_many(pa.array(keys), pa.array([b"v" * 50] * len(keys)))
    engine.db.flush(True)
    engine.close()
    (sst,) = (tmp_path / "db").glob("*.sst")
    flip(sst)
    engine = RocksEngine(tmp_path / "db", {sst.name: "s3://b/ckpt/state/0/0/SSTs/x.sst"})
    try:
        with pytest.raises(CorruptFileError, match="checksum mismatch") as e:
            list(engine.items())  # RocksDB's iterator just stops; only its status says why
        assert e.value.file == "s3://b/ckpt/state/0/0/SSTs/x.sst"
        with pytest.raises(CorruptFileError):
            engine.verify()
    finally:
        engine.close()


def test_load_plans_around_a_snapshot_whose_sst_is_corrupt(ckpt: Written, options: StoreOptions, tmp_path: Path) -> None:
    (sst,) = snapshot_ssts(ckpt, 3)
    flip(local(ckpt.storage, sst))
    state, provider = load_state(ckpt.storage, options, tmp_path, 5, ckpt.ref(5).id)
    assert state == ckpt.states[5]
    assert provider.metrics.snapshot_fallbacks == 1 and provider.metrics.snapshot_loads == 0
    plan, passed_over = loadable_plan(StoreFiles(ckpt.storage, STORE), ckpt.ref(5))  # plan agrees with the load
    assert plan.snapshot is None and [str(e) for e in passed_over] == [f"{ckpt.storage.display(sst)}: " + passed_over[0].detail]
    ckpt.storage.delete([ckpt.path(2)])  # no way around the snapshot left: the load names the SST
    with pytest.raises(CorruptFileError, match="CRC32C") as e:
        load_state(ckpt.storage, options, tmp_path, 5, ckpt.ref(5).id)
    assert e.value.file == ckpt.storage.display(sst)


def test_statebed_snapshots_record_each_sst_checksum(ckpt: Written) -> None:
    meta, _ = read_zip(ckpt.storage.read(ckpt.path(3, "zip")), file="zip")
    assert meta.sst_files and all(f.crc32c is not None for f in meta.sst_files)
    assert meta.store == STORE and (meta.version, meta.checkpoint_id) == (3, ckpt.ref(3).id)


def native_store(native: dict[str, Path], tmp_path: Path, spark: str = "4.3.0") -> tuple[Storage, StoreId, CheckpointRef]:
    root = tmp_path / "agg"
    shutil.copytree(native[spark] / "agg", root)
    storage = open_storage(root)
    stores = discover_stores(storage)
    store = next(s for s in stores if s.partition == 0)
    return storage, store, committed_ref(storage, store)


def test_spark_snapshot_with_a_corrupt_sst_is_read_whole_and_planned_around(native: dict[str, Path], tmp_path: Path) -> None:
    """Spark records no SST checksum: the load opens the snapshot and reads every entry before trusting it."""
    storage, store, ref = native_store(native, tmp_path)
    before = list(dump_state(storage, store, ref))
    meta = StoreFiles(storage, store).snapshot_metadata(ref)
    assert all(f.crc32c is None for f in meta.sst_files)
    big = max(meta.sst_files, key=lambda f: f.size)
    flip(local(storage, store.path(f"SSTs/{big.dfs}")), 20)  # inside the first data block: RocksDB opens it fine
    assert list(dump_state(storage, store, ref)) == before  # rebuilt from an older snapshot and changelogs instead
    plan, passed_over = loadable_plan(StoreFiles(storage, store), ref)
    assert plan.snapshot != ref and len(passed_over) == 1 and big.dfs in str(passed_over[0])
    assert "checksum mismatch" in str(passed_over[0])  # found by reading every entry, not by opening


# -- item 3/4: files that are not what their name says ---------------------------------------------


def test_snapshot_metadata_must_name_its_own_file(ckpt: Written, options: StoreOptions, tmp_path: Path) -> None:
    """A losing attempt's zip copied over the committed one (sidecar gone): the load ignores it."""
    storage = ckpt.storage
    zip_path = ckpt.path(3, "zip")
    meta, _ = read_zip(storage.read(zip_path), file="zip")
    loser = CheckpointRef(3, "0" * 8 + "-0000-4000-8000-" + "0" * 12)
    forged = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(storage.read(zip_path))) as src, zipfile.ZipFile(forged, "w") as dst:
        for info in src.infolist():
            doc = src.read(info)
            if info.filename == "metadata":
                body = json.loads(doc.partition(b"\n")[2])
                body["checkpointUniqueId"] = loser.id
                doc = b"v1\n" + json.dumps(body).encode()
            dst.writestr(info.filename, doc)
    storage.write(zip_path, forged.getvalue())
    storage.delete([zip_path + ".crc"])
    with pytest.raises(ForeignFileError, match=re.escape(f"says it is checkpoint {loser}")):
        StoreFiles(storage, STORE).snapshot_metadata(ckpt.ref(3))
    state, provider = load_state(storage, options, tmp_path, 3, ckpt.ref(3).id)
    assert state == ckpt.states[3] and provider.metrics.snapshot_fallbacks == 1


def test_a_changelog_copied_from_another_partition_is_foreign(local_storage: Storage, options: StoreOptions, tmp_path: Path) -> None:
    up = SnapshotUploader()
    p0 = write_versions(local_storage, options.with_(local_dir=tmp_path / "a"), up, 1, store=StoreId(0, 0))
    p1 = write_versions(local_storage, options.with_(local_dir=tmp_path / "b"), up, 1, store=StoreId(0, 1))
    for suffix in ("", ".crc"):  # version 1 has an empty lineage: only the sidecar can tell
        local_storage.write(p0.path(1) + suffix, local_storage.read(p1.path(1) + suffix))
    with pytest.raises(ForeignFileError, match="operator 0 partition 1 store 'default'"):
        StoreFiles(local_storage, StoreId(0, 0)).read_verified(p0.ref(1), "changelog")


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_every_spark_file_passes_the_owner_and_identity_checks(native: dict[str, Path], spark: str) -> None:
    """Spark's sidecars name the task (= partition) for changelogs, nobody for snapshots; its zips carry no identity."""
    checked = 0
    for query in ("agg", "dedup_agg", "join"):
        storage = open_storage(native[spark] / query)
        for store in discover_stores(storage):
            files = StoreFiles(storage, store)
            for name in files.files:
                ref = CheckpointRef(name.version, name.id)
                if name.kind == "zip":
                    files.verified_snapshot_metadata(ref)
                else:
                    files.verified_changelog_header(ref)  # whole file, sidecar owner, every record
                checked += 1
    assert checked == 279  # every changelog and zip of the fixture (186 changelogs carry a Spark taskInfo)


def test_a_spark_changelog_of_another_partition_is_foreign(native: dict[str, Path], tmp_path: Path) -> None:
    storage, store, _ = native_store(native, tmp_path)
    other = next(s for s in discover_stores(storage) if s.partition == 1)
    mine = next(n for n in StoreFiles(storage, store).files if n.version == 1 and n.kind == "changelog")
    theirs = next(n for n in StoreFiles(storage, other).files if n.version == 1 and n.kind == "changelog")
    for suffix in ("", ".crc"):
        storage.write(store.path(mine.name) + suffix, storage.read(other.path(theirs.name) + suffix))
    with pytest.raises(ForeignFileError, match="Spark task 1 wrote it"):
        StoreFiles(storage, store).verified_changelog_header(CheckpointRef(1, mine.id))
    assert store_index(store, [store.store_name]) == 0


# -- item 5: records, not only headers ------------------------------------------------------------


def records_payload(w: Written, version: int) -> tuple[bytes, int]:
    cl = parse_changelog(w.storage.read(w.path(version)), file="x")
    return cl.payload, cl.header.records_offset


@pytest.mark.parametrize(
    "damage, match",
    [
        (lambda p, o: p[: o + 6], "truncated"),  # cut inside the first record
        (lambda p, o: p[:-4], "truncated"),  # no end marker
        (lambda p, o: p[:o] + (2**31 - 1).to_bytes(4, "big") + p[o + 4 :], "truncated"),  # absurd key size
        (lambda p, o: p[:o] + (-5).to_bytes(4, "big", signed=True) + p[o + 4 :], "bad key size -5"),
        (lambda p, o: p + b"\x00\x00\x00\x01k", "follow the end-of-file record"),
    ],
    ids=["cut-mid-record", "no-end-marker", "absurd-length", "negative-length", "trailing-bytes"],
)
def test_broken_records_with_intact_container_and_sidecar(ckpt: Written, damage, match: str) -> None:  # type: ignore[no-untyped-def]
    payload, offset = records_payload(ckpt, 4)
    data = compress(damage(payload, offset))
    ckpt.storage.write(ckpt.path(4), data)
    ckpt.storage.write(ckpt.path(4) + ".crc", make_sidecar(data))
    files = StoreFiles(ckpt.storage, STORE)
    assert files.changelog_header(ckpt.ref(4)).lineage  # the header alone still reads
    with pytest.raises(CorruptFileError, match=match) as e:
        files.verified_changelog_header(ckpt.ref(4))
    assert e.value.file == ckpt.display(4)


def test_record_check_accepts_every_format() -> None:
    from statebed_store.changelog import DELETE, PUT, Chunk

    chunks = [Chunk(PUT, pa.array([b"a", b"b"]), pa.array([b"1", b""])), Chunk(DELETE, pa.array([b"a"]))]
    for fmt in (1, 2, 3, 4):
        cl = parse_changelog(encode_changelog(fmt, None, chunks), file="x")
        assert cl.check_records() == 3 and len(cl.columns()[0]) == 3


# -- item 1: a warmed cache never stands in for a check -------------------------------------------


def test_whole_file_checks_are_made_once_per_pass_not_served_from_the_shared_cache(ckpt: Written) -> None:
    cache = HeaderCache()
    StoreFiles(ckpt.storage, STORE, cache=cache).verified_changelog_header(ckpt.ref(4))
    StoreFiles(ckpt.storage, STORE, cache=cache).verified_snapshot_metadata(ckpt.ref(3))
    flip(local(ckpt.storage, ckpt.path(4)), -3)  # in the records, far from the header
    flip(local(ckpt.storage, ckpt.path(3, "zip")))
    files = StoreFiles(ckpt.storage, STORE, cache=cache)
    assert files.changelog_header(ckpt.ref(4)).lineage  # plain header reads may come from the cache
    with pytest.raises(CorruptFileError, match="CRC32C"):
        files.verified_changelog_header(ckpt.ref(4))
    with pytest.raises(CorruptFileError, match="CRC32C"):
        files.verified_snapshot_metadata(ckpt.ref(3))


def test_an_empty_cache_passed_to_a_provider_is_shared(local_storage: Storage, options: StoreOptions) -> None:
    from statebed_store import StateStoreProvider

    cache = HeaderCache()
    with StateStoreProvider(local_storage, STORE, options, cache=cache) as p:
        assert p.cache is cache


# -- item 6: zip bombs ----------------------------------------------------------------------------


def bomb_zip(original: bytes, member_mb: int) -> bytes:
    """`original`'s members plus `member_mb` MiB of zeros, written streaming (the test never holds them)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(original)) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
        with dst.open("OPTIONS-999999", "w", force_zip64=True) as w:
            for _ in range(member_mb):
                w.write(bytes(1 << 20))
    return buf.getvalue()


def test_a_zip_bomb_member_is_refused_before_it_is_inflated(ckpt: Written, options: StoreOptions, tmp_path: Path) -> None:
    data = bomb_zip(ckpt.storage.read(ckpt.path(3, "zip")), 64)
    assert len(data) < 1 << 20
    with pytest.raises(CorruptFileError, match="'OPTIONS-999999' declares 67108864 bytes") as e:
        read_zip(data, file="the.zip")
    assert e.value.file == "the.zip"
    ckpt.storage.write(ckpt.path(3, "zip"), data)
    ckpt.storage.write(ckpt.path(3, "zip") + ".crc", make_sidecar(data))
    state, provider = load_state(ckpt.storage, options, tmp_path, 4, ckpt.ref(4).id)
    assert state == ckpt.states[4] and provider.metrics.snapshot_fallbacks == 1
