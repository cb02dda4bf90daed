"""Changelog files, formats v1-v4: exact byte layout, round trips, lineage, damage."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from statebed_base.errors import CorruptFileError, LineageError, UnknownFormatError
from statebed_store import lz4block
from statebed_store.changelog import (
    DELETE,
    MERGE,
    PUT,
    Chunk,
    as_binary_array,
    encode_changelog,
    parse_changelog,
    parse_changelog_header,
    read_changelog_header,
)
from statebed_store.lineage import CheckpointRef
from statebed_store.storage.base import Storage

FILE = "/ckpt/state/0/0/4_abc.changelog"
LINEAGE = (CheckpointRef(1, "id-1"), CheckpointRef(2, "id-2"), CheckpointRef(3, "id-3"))
LINEAGE_JSON = (
    b'[{"version":1,"checkpointUniqueId":"id-1"},{"version":2,"checkpointUniqueId":"id-2"},{"version":3,"checkpointUniqueId":"id-3"}]'
)


def pa_bin(values: list[bytes]) -> pa.Array:
    return pa.array(values, type=pa.binary())


# put a=1, put b="" (empty value, not a delete), delete a, put a=2, put c=3
CHUNKS = [
    Chunk(PUT, pa_bin([b"a", b"b"]), pa_bin([b"1", b""])),
    Chunk(DELETE, pa_bin([b"a"])),
    Chunk(PUT, pa_bin([b"a", b"c"]), pa_bin([b"2", b"3"])),
]
OPS = [(PUT, b"a", b"1"), (PUT, b"b", b""), (DELETE, b"a", None), (PUT, b"a", b"2"), (PUT, b"c", b"3")]


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def utf(s: bytes) -> bytes:
    return struct.pack(">H", len(s)) + s


def untyped_records() -> bytes:
    put = lambda k, v: i32(len(k)) + k + i32(len(v)) + v  # noqa: E731
    return put(b"a", b"1") + put(b"b", b"") + i32(1) + b"a" + i32(-1) + put(b"a", b"2") + put(b"c", b"3") + i32(-1)


def typed_records() -> bytes:
    put = lambda k, v: b"\x01" + i32(len(k)) + k + i32(len(v)) + v  # noqa: E731
    return put(b"a", b"1") + put(b"b", b"") + b"\x10" + i32(1) + b"a" + i32(-1) + put(b"a", b"2") + put(b"c", b"3") + b"\x00"


EXPECTED_PAYLOAD = {
    1: untyped_records(),
    2: utf(b"v2") + typed_records(),
    3: utf(b"v3") + utf(LINEAGE_JSON) + untyped_records(),
    4: utf(b"v4") + utf(LINEAGE_JSON) + typed_records(),
}


@pytest.mark.parametrize("fmt", [1, 2, 3, 4])
def test_exact_payload_layout(fmt: int) -> None:
    data = encode_changelog(fmt, LINEAGE if fmt >= 3 else None, CHUNKS)
    payload, complete = lz4block.decompress(data, file=FILE)
    assert complete
    assert payload == EXPECTED_PAYLOAD[fmt]


@pytest.mark.parametrize("fmt", [1, 2, 3, 4])
def test_round_trip_keeps_order_puts_and_deletes(fmt: int) -> None:
    lineage = LINEAGE if fmt >= 3 else None
    cl = parse_changelog(encode_changelog(fmt, lineage, CHUNKS), file=FILE, version=4)
    assert cl.format_version == fmt
    assert cl.lineage == lineage
    assert list(cl.records()) == OPS


@pytest.mark.parametrize("fmt", [1, 2, 3, 4])
def test_parses_hand_built_payloads(fmt: int) -> None:
    """The reader accepts the layout as Spark writes it, not only what our encoder writes."""
    cl = parse_changelog(lz4block.compress(EXPECTED_PAYLOAD[fmt]), file=FILE, version=4)
    assert (cl.format_version, list(cl.records())) == (fmt, OPS)
    assert cl.lineage == (LINEAGE if fmt >= 3 else None)


@pytest.mark.parametrize("fmt", [3, 4])
def test_version_one_has_an_empty_lineage(fmt: int) -> None:
    data = encode_changelog(fmt, (), [Chunk(PUT, pa_bin([b"k"]), pa_bin([b"v"]))])
    payload, _ = lz4block.decompress(data, file=FILE)
    assert payload.startswith(utf(b"v%d" % fmt) + utf(b"[]"))
    cl = parse_changelog(data, file=FILE, version=1)
    assert cl.lineage == () and list(cl.records()) == [(PUT, b"k", b"v")]


@pytest.mark.parametrize("fmt", [2, 4])
def test_merge_records_in_typed_formats(fmt: int) -> None:
    chunks = [Chunk(MERGE, pa_bin([b"m"]), pa_bin([b"x"])), Chunk(PUT, pa_bin([b"p"]), pa_bin([b"y"]))]
    data = encode_changelog(fmt, () if fmt == 4 else None, chunks)
    payload, _ = lz4block.decompress(data, file=FILE)
    assert b"\x11" + i32(1) + b"m" + i32(1) + b"x" in payload
    assert list(parse_changelog(data, file=FILE).records()) == [(MERGE, b"m", b"x"), (PUT, b"p", b"y")]


@pytest.mark.parametrize("fmt", [1, 3])
def test_untyped_formats_refuse_merges(fmt: int) -> None:
    with pytest.raises(ValueError, match="no merge records"):
        encode_changelog(fmt, None, [Chunk(MERGE, pa_bin([b"m"]), pa_bin([b"x"]))])


@pytest.mark.parametrize("fmt", [1, 2])
def test_formats_without_lineage_refuse_one(fmt: int) -> None:
    with pytest.raises(ValueError, match="cannot carry a lineage"):
        encode_changelog(fmt, LINEAGE, CHUNKS)


@pytest.mark.parametrize("fmt", [0, 5, 9])
def test_unknown_formats_cannot_be_written(fmt: int) -> None:
    with pytest.raises(ValueError, match=f"v{fmt}"):
        encode_changelog(fmt, None, CHUNKS)


@pytest.mark.parametrize("fmt", [1, 2, 3, 4])
def test_many_records_across_many_blocks(fmt: int) -> None:
    rng = random.Random(fmt)
    keys = [b"key-%06d" % i for i in range(20_000)]
    values = [rng.randbytes(rng.randrange(0, 40)) for _ in keys]
    deleted = keys[::7]
    chunks = [Chunk(PUT, pa_bin(keys), pa_bin(values)), Chunk(DELETE, pa_bin(deleted))]
    data = encode_changelog(fmt, () if fmt >= 3 else None, chunks)
    assert data.count(b"LZ4Block") > 5
    records = list(parse_changelog(data, file=FILE).records())
    assert records == [(PUT, k, v) for k, v in zip(keys, values)] + [(DELETE, k, None) for k in deleted]


def test_python_lists_and_sliced_arrow_arrays_encode_the_same() -> None:
    arr_k = pa_bin([b"skip", b"k1", b"k2"]).slice(1)
    arr_v = pa_bin([b"skip", b"v1", b""]).slice(1)
    from statebed_store.changelog import as_binary_array

    a = encode_changelog(3, (), [Chunk(PUT, as_binary_array(arr_k), as_binary_array(arr_v))])
    b = encode_changelog(3, (), [Chunk(PUT, as_binary_array([b"k1", b"k2"]), as_binary_array([b"v1", b""]))])
    assert a == b
    assert list(parse_changelog(a, file=FILE).records()) == [(PUT, b"k1", b"v1"), (PUT, b"k2", b"")]


# -- damage and unknown formats ---------------------------------------------------------


def test_header_v9_is_an_unknown_format_naming_the_file() -> None:
    data = lz4block.compress(utf(b"v9") + utf(b"[]") + i32(-1))
    with pytest.raises(UnknownFormatError) as e:
        parse_changelog(data, file=FILE)
    assert e.value.file == FILE and FILE in str(e.value) and "v9" in str(e.value)


@pytest.mark.parametrize("fmt", [1, 2, 3, 4])
def test_payload_truncated_inside_records(fmt: int) -> None:
    payload = EXPECTED_PAYLOAD[fmt]
    header_len = {1: 0, 2: 4, 3: 6 + len(LINEAGE_JSON), 4: 6 + len(LINEAGE_JSON)}[fmt]
    for cut in range(header_len + 1, len(payload)):
        cl = parse_changelog(lz4block.compress(payload[:cut]), file=FILE)
        with pytest.raises(CorruptFileError) as e:
            list(cl.records())
        assert FILE in str(e.value) and "truncated" in str(e.value), cut


def test_truncated_lineage_header() -> None:
    payload = EXPECTED_PAYLOAD[3][:20]
    with pytest.raises(CorruptFileError, match="no complete lineage") as e:
        parse_changelog(lz4block.compress(payload), file=FILE)
    assert e.value.file == FILE


def test_unknown_record_type_and_bad_sizes() -> None:
    bad_type = utf(b"v2") + b"\x07" + i32(1) + b"a" + i32(1) + b"b" + b"\x00"
    with pytest.raises(CorruptFileError, match="unknown record type 0x07"):
        list(parse_changelog(lz4block.compress(bad_type), file=FILE).records())
    bad_key = i32(-5) + b"xxxx"
    with pytest.raises(CorruptFileError, match="bad key size -5"):
        list(parse_changelog(lz4block.compress(bad_key), file=FILE).records())
    delete_with_value = utf(b"v2") + b"\x10" + i32(1) + b"a" + i32(1) + b"b" + b"\x00"
    with pytest.raises(CorruptFileError, match="delete record with value size 1"):
        list(parse_changelog(lz4block.compress(delete_with_value), file=FILE).records())
    put_without_value = utf(b"v4") + utf(b"[]") + b"\x01" + i32(1) + b"a" + i32(-1) + b"\x00"
    with pytest.raises(CorruptFileError, match="record type 0x01 with value size -1"):
        list(parse_changelog(lz4block.compress(put_without_value), file=FILE).records())


def test_lineage_is_validated_against_the_version() -> None:
    data = encode_changelog(3, LINEAGE, CHUNKS)
    assert parse_changelog(data, file=FILE, version=4).lineage == LINEAGE
    with pytest.raises(LineageError, match="must end at version 4, ends at 3") as e:
        parse_changelog(data, file=FILE, version=5)
    assert e.value.file == FILE


def test_lineage_that_skips_a_version_in_a_header() -> None:
    skipping = (CheckpointRef(1, "id-1"), CheckpointRef(3, "id-3"))
    data = encode_changelog(3, skipping, CHUNKS)
    with pytest.raises(LineageError, match="not increasing by one: 1 then 3") as e:
        parse_changelog(data, file=FILE, version=4)
    assert FILE in str(e.value)


def test_non_ascii_digits_in_the_version_string_are_not_a_version() -> None:
    """`v²` is not `v<n>`: read as v1 records (here: garbage), never an int() crash."""
    data = lz4block.compress(utf("v\u00b2".encode()) + utf(b"[]") + i32(-1))
    cl = parse_changelog(data, file=FILE)
    assert cl.format_version == 1
    with pytest.raises(CorruptFileError) as e:
        list(cl.records())
    assert e.value.file == FILE


def test_header_without_version_string_is_v1() -> None:
    header = parse_changelog_header(untyped_records(), file=FILE)
    assert (header.format_version, header.lineage, header.records_offset) == (1, None, 0)


# -- ranged header reads through storage ------------------------------------------------


def test_header_is_read_from_a_prefix_of_a_large_file(storage: Storage) -> None:
    rng = random.Random(5)
    keys = [b"k%07d" % i for i in range(4000)]
    values = [rng.randbytes(100) for _ in keys]  # ~420 KB, incompressible
    data = encode_changelog(3, LINEAGE, [Chunk(PUT, pa_bin(keys), pa_bin(values))])
    assert len(data) > 4 * 64 * 1024
    storage.write("state/0/0/4_abc.changelog", data)
    header = read_changelog_header(storage, "state/0/0/4_abc.changelog", version=4)
    assert (header.format_version, header.lineage) == (3, LINEAGE)
    with pytest.raises(LineageError) as e:
        read_changelog_header(storage, "state/0/0/4_abc.changelog", version=6)
    assert e.value.file == storage.display("state/0/0/4_abc.changelog")


def test_header_of_a_truncated_small_file_names_it(storage: Storage) -> None:
    data = encode_changelog(3, LINEAGE, CHUNKS)
    storage.write("state/0/0/4_abc.changelog", data[:30])
    with pytest.raises(CorruptFileError) as e:
        read_changelog_header(storage, "state/0/0/4_abc.changelog", version=4)
    assert e.value.file == storage.display("state/0/0/4_abc.changelog")
    assert storage.display("state/0/0/4_abc.changelog") in str(e.value)


# -- Spark's own changelogs ---------------------------------------------------------------


@pytest.mark.parametrize("spark", ["4.1.4", "4.3.0"])
def test_spark_changelogs_parse_with_their_lineage(native: dict[str, Path], spark: str) -> None:
    store_dir = native[spark] / "agg" / "state" / "0" / "0"
    by_version = {int(p.name.split("_")[0]): p for p in store_dir.glob("*.changelog")}
    assert sorted(by_version) == list(range(1, 11))
    total = 0
    for v, path in sorted(by_version.items()):
        cl = parse_changelog(path.read_bytes(), file=str(path), version=v)
        assert cl.format_version == 3
        assert cl.lineage is not None and (cl.lineage == () if v == 1 else cl.lineage[-1].version == v - 1)
        if v > 1:
            # the lineage's last entry is the changelog of version v-1 that exists here
            assert by_version[v - 1].name == f"{v - 1}_{cl.lineage[-1].id}.changelog"
        recs = list(cl.records())
        assert all(op == PUT and len(k) == 25 and len(val) == 17 for op, k, val in recs)
        total += len(recs)
    assert total >= 1


@pytest.mark.parametrize("typed", [False, True])
def test_encoding_with_64_bit_offsets_matches(monkeypatch: pytest.MonkeyPatch, typed: bool) -> None:
    """Batches over 2 GiB are concatenated as large_binary; same bytes (threshold lowered here)."""
    from statebed_store import changelog as cl

    keys = as_binary_array([b"k%d" % i for i in range(100)])
    values = as_binary_array([b"v" * (i % 7) for i in range(100)])
    chunks = [Chunk(PUT, keys, values), Chunk(DELETE, keys[:10])]
    fmt = 4 if typed else 3
    normal = encode_changelog(fmt, (), chunks)
    monkeypatch.setattr(cl, "_LARGE", 16)
    assert encode_changelog(fmt, (), chunks) == normal
    assert list(parse_changelog(normal, file="x", version=1).records())[-1] == (DELETE, b"k9", None)
