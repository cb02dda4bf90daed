"""Snapshot zips: metadata round trip, Spark's own zips, damage naming the file."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from statebed_base.errors import CorruptFileError, LineageError, UnknownFormatError
from statebed_store.lineage import CheckpointRef
from statebed_store.snapshot import ImmutableFile, SnapshotMetadata, build_zip, parse_metadata, read_zip

FILE = "/ckpt/state/0/0/3_c.zip"
META = SnapshotMetadata(
    sst_files=(ImmutableFile("000017.sst", "000017-u1.sst", 1228), ImmutableFile("000018.sst", "000018-u2.sst", 99)),
    log_files=(ImmutableFile("000019.log", "000019-u3.log", 7),),
    num_keys=2,
    lineage=(CheckpointRef(1, "a"), CheckpointRef(2, "b")),
    checkpoint_id="c",
    version=3,
    extra={"writer": "statebed", "columnFamilyMapping": {"x": 1}},
)


def test_metadata_round_trip_keeps_every_field() -> None:
    raw = META.to_bytes()
    first, _, body = raw.partition(b"\n")
    assert first == b"v1"
    doc = json.loads(body)
    assert doc["sstFiles"][0] == {"localFileName": "000017.sst", "dfsSstFileName": "000017-u1.sst", "sizeBytes": 1228}
    assert doc["logFiles"] == [{"localFileName": "000019.log", "dfsLogFileName": "000019-u3.log", "sizeBytes": 7}]
    assert doc["lineage"] == [{"version": 1, "checkpointUniqueId": "a"}, {"version": 2, "checkpointUniqueId": "b"}]
    assert (doc["checkpointUniqueId"], doc["version"], doc["writer"]) == ("c", 3, "statebed")
    back = parse_metadata(raw, file=FILE, version=3)
    assert back == META
    assert back.extra == META.extra


def test_zip_round_trip(tmp_path: Path) -> None:
    members = {"CURRENT": b"MANIFEST-000005\n", "MANIFEST-000005": bytes(range(256)), "OPTIONS-000007": b"opts"}
    meta, got = read_zip(build_zip(members, META), file=FILE, version=3, extract_to=tmp_path)
    assert meta == META and got == sorted(members)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == members


def test_metadata_lineage_is_checked_against_the_version() -> None:
    with pytest.raises(LineageError, match="must end at version 4") as e:
        parse_metadata(META.to_bytes(), file=FILE, version=5)
    assert e.value.file == FILE


def spark_zips(root: Path) -> list[Path]:
    zips = sorted(p for p in root.glob("*/state/**/*.zip") if not p.name.startswith("."))
    assert len(zips) > 20
    return zips


@pytest.mark.parametrize("spark", ["4.1.4", "4.3.0"])
def test_spark_zip_metadata(native: dict[str, Path], spark: str) -> None:
    for path in spark_zips(native[spark]):
        meta, members = read_zip(path.read_bytes(), file=str(path), version=int(path.name.split("_")[0]))
        assert "CURRENT" in members and any(m.startswith("MANIFEST-") for m in members)
        assert meta.lineage is None and meta.checkpoint_id is None and meta.version is None  # not in Spark's zips
        # Fields statebed does not model are kept, not dropped.
        assert {"numInternalKeys", "columnFamilyMapping", "columnFamilyTypeMap", "maxColumnFamilyId"} <= set(meta.extra)
        sst_dir = path.parent / "SSTs"
        for f in meta.sst_files:
            assert f.local.endswith(".sst") and f.dfs.startswith(f.local[:-4] + "-")
            assert (sst_dir / f.dfs).stat().st_size == f.size
        # Re-rendering keeps Spark's fields and values.
        with zipfile.ZipFile(path) as z:
            original = json.loads(z.read("metadata").partition(b"\n")[2])
        rendered = json.loads(meta.to_bytes().partition(b"\n")[2])
        assert {k: v for k, v in rendered.items() if k != "logFiles"} == original
        assert parse_metadata(meta.to_bytes(), file=str(path)) == meta


def test_one_spark_4_1_zip_exactly(native: dict[str, Path]) -> None:
    path = next((native["4.1.4"] / "agg/state/0/1").glob("10_*.zip"))
    meta, _ = read_zip(path.read_bytes(), file=str(path), version=10)
    assert meta.num_keys == 3
    assert [(f.local, f.size) for f in meta.sst_files] == [("000013.sst", 1264), ("000012.sst", 1251)]
    assert meta.extra == {"numInternalKeys": 0, "columnFamilyMapping": {}, "columnFamilyTypeMap": {}, "maxColumnFamilyId": 0}


# -- damage -------------------------------------------------------------------------------


def zip_of(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def corrupt(data: bytes, match: str, error: type[Exception] = CorruptFileError) -> None:
    with pytest.raises(error, match=match) as e:
        read_zip(data, file=FILE)
    assert e.value.file == FILE and FILE in str(e.value)


def test_damaged_zips_name_the_file() -> None:
    good = build_zip({"CURRENT": b"x" * 1000}, META)
    corrupt(b"", "empty")
    corrupt(b"not a zip at all", "unreadable")
    corrupt(good[: len(good) // 2], "unreadable")
    member_damaged = bytearray(good)
    start = good.index(b"CURRENT") + len(b"CURRENT")  # inside the first member's compressed data
    for i in range(start, start + 5):
        member_damaged[i] ^= 0xFF
    corrupt(bytes(member_damaged), "damaged|unreadable")


def test_zip_contents_that_are_refused() -> None:
    corrupt(zip_of({"CURRENT": b"x"}), "no 'metadata' member")
    corrupt(zip_of({"../evil": b"x", "metadata": META.to_bytes()}), "unsafe member name '../evil'")
    corrupt(zip_of({"sub/x": b"x", "metadata": META.to_bytes()}), "unsafe member name")
    corrupt(zip_of({"metadata": b"v2\n{}"}), "snapshot metadata version 'v2' is unknown", UnknownFormatError)
    corrupt(zip_of({"metadata": b"v1\n{not json"}), "not valid JSON")
    corrupt(zip_of({"metadata": b"v1\n[1,2]"}), "not an object")
    corrupt(zip_of({"metadata": b'v1\n{"sstFiles":[{"localFileName":"1.sst"}]}'}), r"sstFiles\[0\] lacks")
    bad_name = b'v1\n{"sstFiles":[{"localFileName":"1.sst","dfsSstFileName":"../../x.sst","sizeBytes":1}]}'
    corrupt(zip_of({"metadata": bad_name}), "bad file name '../../x.sst'")


@pytest.mark.parametrize(
    "body, match",
    [
        (b'{"numKeys":"abc"}', "numKeys 'abc' is not a number"),
        (b'{"numKeys":[1]}', "numKeys \\[1\\] is not a number"),
        (b'{"numKeys":1e400}', "number 1e400 is out of range"),
        (b'{"sstFiles":5}', "sstFiles is not a list"),
        (b'{"sstFiles":["x"]}', r"sstFiles\[0\] lacks"),
        (b'{"sstFiles":[{"localFileName":"a.sst","dfsSstFileName":"a-1.sst","sizeBytes":1e400}]}', "number 1e400 is out of range"),
        (b'{"logFiles":{"a":1}}', "logFiles is not a list"),
        (b'{"lineage":{"a":1}}', "lineage is not a list"),
        (b'{"checkpointUniqueId":5}', "checkpointUniqueId 5 is malformed"),
        (b'{"checkpointUniqueId":"../x"}', "checkpointUniqueId '../x' is malformed"),
        (b'{"version":"x"}', "version 'x' is not a version number"),
        (b'{"version":-1}', "version -1 is not a version number"),
    ],
)
def test_garbage_metadata_fields_are_corrupt_files(body: bytes, match: str) -> None:
    """Wrong types in metadata are a CorruptFileError naming the zip, never a TypeError/ValueError."""
    corrupt(zip_of({"metadata": b"v1\n" + body}), match)
