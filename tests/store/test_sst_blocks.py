"""The SST blocks a scan never reads (src/statebed_store/sst_blocks.py): the bloom filter that
only Spark's point lookups read, the properties, the metaindex; checked against their trailers."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
import rocksdict

from statebed_base.errors import CorruptFileError, UnknownFormatError
from statebed_store import open_storage
from statebed_store.sst_blocks import check_sst_blocks
from statebed_verify import verify_lineage

NATIVE = Path(__file__).parents[1] / "fixtures" / "native"


def _sst(tmp_path: Path, checksum: str = "xxh3", format_version: int = 5) -> Path:
    """An SST with a full bloom filter, written by RocksDB itself."""
    opts, table = rocksdict.Options(), rocksdict.BlockBasedOptions()
    table.set_checksum_type(getattr(rocksdict.ChecksumType, checksum)())
    table.set_format_version(format_version)
    table.set_bloom_filter(10, False)
    opts.set_block_based_table_factory(table)
    db = rocksdict.Rdict(str(tmp_path / "db"), opts)
    for i in range(500):
        db[f"key-{i}".encode()] = b"value" * 4
    db.flush()
    db.close()
    [sst] = (tmp_path / "db").glob("*.sst")
    return sst


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


def test_every_sst_of_sparks_fixtures_checks(tmp_path: Path) -> None:
    for tarball in sorted(NATIVE.glob("spark-*.tar.gz")):
        with tarfile.open(tarball) as tar:
            tar.extractall(tmp_path, filter="data")
    ssts = sorted(tmp_path.rglob("*.sst"))
    assert len(ssts) > 100
    assert {check_sst_blocks(p, p.name) for p in ssts} == {3}  # metaindex, bloom filter, properties


@pytest.mark.parametrize("checksum", ["crc32c", "xxhash", "xxhash64", "xxh3"])
@pytest.mark.parametrize("format_version", [2, 4, 5])
def test_each_checksum_type_and_format_version_rocksdb_writes(tmp_path: Path, checksum: str, format_version: int) -> None:
    assert check_sst_blocks(_sst(tmp_path, checksum, format_version), "x.sst") == 3


def test_a_flipped_byte_in_the_filter_or_properties_is_named(tmp_path: Path) -> None:
    sst = _sst(tmp_path)
    pristine = sst.read_bytes()
    named: set[str] = set()
    for at in range(len(pristine) - 60, 0, -37):  # every region but the footer, coarsely (data blocks: the scan's job)
        _flip(sst, at)
        try:
            check_sst_blocks(sst, "x.sst")
        except CorruptFileError as e:
            named.add(str(e).split(" in the ")[1].split(" block")[0])
        sst.write_bytes(pristine)
    assert named == {"fullfilter.rocksdb.BuiltinBloomFilter", "rocksdb.properties", "metaindex"}, named
    filter_at = pristine.index(b"fullfilter.rocksdb.BuiltinBloomFilter")  # the name in the metaindex
    _flip(sst, filter_at + 3)
    with pytest.raises(CorruptFileError, match="checksum mismatch in the metaindex block"):
        check_sst_blocks(sst, "x.sst")


def test_what_this_reader_cannot_vouch_for_is_unknown_not_valid(tmp_path: Path) -> None:
    with pytest.raises(UnknownFormatError, match="SST format version 6"):
        check_sst_blocks(_sst(tmp_path / "v6", format_version=6), "x.sst")
    junk = tmp_path / "junk.sst"
    junk.write_bytes(b"\0" * 100)
    with pytest.raises(CorruptFileError, match="no SST footer"):
        check_sst_blocks(junk, "junk.sst")
    sst = _sst(tmp_path / "cut")
    sst.write_bytes(sst.read_bytes()[-200:])
    with pytest.raises(CorruptFileError, match="runs past the end of the file"):
        check_sst_blocks(sst, "cut.sst")


def test_a_damaged_bloom_filter_in_sparks_snapshot_is_an_anomaly(tmp_path: Path) -> None:
    """Found by the mutation benchmark on the cleanup-race fixture: the scan passed, the judge said valid."""
    with tarfile.open(NATIVE / "spark-4.3.0-cleanup-race.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    root = tmp_path / "spark-4.3.0-cleanup-race" / "count"
    [sst] = (root / "state" / "0" / "1" / "SSTs").glob("000012-*.sst")
    data = sst.read_bytes()
    _flip(sst, len(data) // 2)  # the benchmark's flip: it lands in this small file's bloom filter
    with pytest.raises(CorruptFileError, match="in the fullfilter.rocksdb.BuiltinBloomFilter block"):
        check_sst_blocks(sst, sst.name)
    report = verify_lineage(open_storage(root))
    assert report.valid is False
    assert any(str(sst) in f or sst.name in f for a in report.anomalies for f in a.files), report.to_json()["anomalies"]


def test_the_blocks_are_read_before_rocksdb_opens_the_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once RocksDB has a directory open, a background compaction may replace and delete the SSTs
    being read: the verifier said unknown (FileNotFoundError) on a valid Spark fixture. Every
    block check of a snapshot happens before its engine opens."""
    import statebed_store.unpack as unpack

    events: list[str] = []
    real_engine, real_check = unpack.RocksEngine, unpack.check_sst_blocks

    def engine(*args: object, **kwargs: object) -> object:
        events.append("open")
        return real_engine(*args, **kwargs)  # type: ignore[arg-type]

    def check(*args: object, **kwargs: object) -> None:
        events.append("blocks")
        real_check(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(unpack, "RocksEngine", engine)
    monkeypatch.setattr(unpack, "check_sst_blocks", check)
    with tarfile.open(NATIVE / "spark-4.3.0-cleanup-race.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    report = verify_lineage(open_storage(tmp_path / "spark-4.3.0-cleanup-race" / "count"))
    assert report.valid is True, report.to_json()
    opens = [i for i, e in enumerate(events) if e == "open"]
    assert opens and "blocks" in events
    # between two opens (one snapshot each), every block check precedes its snapshot's open
    assert all(events[i - 1] == "blocks" or events[i - 1] == "open" for i in opens[1:]) and events[0] == "blocks", events
