"""Spark's Murmur3 and the partitioners a checkpoint records, without Spark (test_partitioner_spark.py checks against it)."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from statebed_base.errors import MisplacedKeyError, UsageError
from statebed_model.partitioning import run_partitioner
from statebed_store import StoreId, open_storage
from statebed_store.murmur3 import hash_bytes, hash_int, hash_long, hash_longs, hash_value, hash_values, parse_type
from statebed_store.partitioner import Partitioner, check_keys, checkpoint_partitioning, record_partitioner, row_values


def test_spark_documented_value() -> None:
    """Spark's own doc example: `SELECT hash('Spark', array(123), 2)` is -1321691492 (an array chains its elements)."""
    h = hash_bytes(b"Spark", 42)
    h = hash_int(123, h)
    assert hash_int(2, h) == -1321691492


def test_tail_bytes_are_mixed_one_by_one_sign_extended() -> None:
    """Spark's hashUnsafeBytes, not standard Murmur3: "é" (c3 a9) mixes 0xffffffc3 then 0xffffffa9."""
    from statebed_store.murmur3 import _fmix, _mix_h1, _mix_k1

    expected = _fmix(_mix_h1(_mix_h1(42, _mix_k1(0xFFFFFFC3)), _mix_k1(0xFFFFFFA9)), 2)
    assert hash_bytes("é".encode(), 42) == expected
    assert hash_value("é", "string", 42) == hash_value("é".encode(), "binary", 42) == expected


def test_vectorised_longs_equal_the_scalar_hash() -> None:
    values = np.random.default_rng(7).integers(-(2**63), 2**63 - 1, size=2000, dtype=np.int64)
    values[:4] = [0, -1, 2**63 - 1, -(2**63)]
    assert hash_longs(values).tolist() == [hash_long(int(v)) for v in values]


def test_values_chain_and_nulls_leave_the_seed() -> None:
    assert hash_values([None, 5], ["string", "long"]) == hash_long(5)
    assert hash_values(["a", 5], ["string", "long"]) == hash_long(5, hash_bytes(b"a"))
    assert hash_value(("a", 5), ("string", "long"), 42) == hash_values(["a", 5], ["string", "long"])
    assert hash_value(-0.0, "double", 42) == hash_value(0.0, "double", 42) == hash_long(0)
    assert hash_value(-128, "decimal(20,0)", 42) == hash_bytes(b"\x80")  # BigInteger.toByteArray: one byte
    assert hash_value(128, "decimal(20,0)", 42) == hash_bytes(b"\x00\x80")
    assert hash_value(12345, "decimal(10,2)", 42) == hash_long(12345)


def test_parse_type() -> None:
    doc = {"type": "struct", "fields": [{"type": "string"}, {"type": {"type": "struct", "fields": [{"type": "long"}]}}]}
    assert parse_type(doc) == ("string", ("long",))
    for bad in ({"type": "array", "elementType": "long"}, "string collate UTF8_LCASE", "map", None):
        with pytest.raises(ValueError, match="not supported"):
            parse_type(bad)


def unsafe_row(values: list[object], types: list[object]) -> bytes:
    """A minimal UnsafeRow encoder (longs, strings, structs) for the decoder's tests."""
    bits = (len(types) + 63) // 64 * 8
    fixed, var, nulls = bytearray(), bytearray(), 0
    for i, (v, t) in enumerate(zip(values, types)):
        if v is None:
            nulls |= 1 << i
            fixed += bytes(8)
        elif t == "long":
            fixed += struct.pack("<q", v)
        else:
            data = unsafe_row(list(v), list(t))[1:] if isinstance(t, tuple) else v.encode()  # type: ignore[attr-defined]
            data += bytes(-len(data) % 8)
            size = len(data) if isinstance(t, tuple) else len(v.encode())  # type: ignore[attr-defined]
            fixed += struct.pack("<Q", (bits + 8 * len(types) + len(var)) << 32 | size)
            var += data
    return b"\x00" + nulls.to_bytes(bits, "little") + bytes(fixed) + bytes(var)


def test_unsaferow_keys_decode_and_hash_their_leading_fields() -> None:
    types = ["string", ("long", "string"), "long"]
    key = unsafe_row(["k1", (7, "é"), 3], types)
    assert row_values(key, types, 3) == [b"k1", [7, "é".encode()], 3]
    assert row_values(unsafe_row([None, (1, "x"), 2], types), types, 3)[0] is None
    p = Partitioner("spark-murmur3", 5, "unsaferow", ("string", ("long", "string")), 3)  # a join's index column not hashed
    want = hash_values([b"k1", [7, "é".encode()]], ["string", ("long", "string")]) % 5
    assert p.partitions_of([key]).tolist() == [want]
    assert p.describe(key) == ["k1", [7, b"\xc3\xa9"]]
    assert p.partitions_of([b"\x01garbage", b""]).tolist() == [-1, -1]  # undecodable: belongs nowhere


def test_statebed_partitioners_route_as_the_job_does() -> None:
    keys = np.arange(-50, 50, dtype=np.int64)
    blobs = [int(k).to_bytes(8, "big", signed=True) + b"\x00suffix" for k in keys]
    count = run_partitioner("count", 7)
    assert count.partitions_of(blobs).tolist() == [hash_long(int(k)) % 7 for k in keys]
    assert run_partitioner("bucket-collect", 7).partitions_of(blobs[50:]).tolist() == [int(k) % 7 for k in keys[50:]]
    assert count.partitions_of([b"short"]).tolist() == [-1]
    assert count.describe(blobs[0]) == -50
    with pytest.raises(UsageError, match="no partitioner is known"):
        run_partitioner("nope", 3)


def test_the_demo_partitioner_is_the_demos_routing() -> None:
    from statebed_cli.commands.demo import batch_keys, partition_of

    keys = batch_keys(3, 500)
    demo = Partitioner("blake2b32", 4, "bytes")
    assert demo.partitions_of(keys).tolist() == [partition_of(k, 4) for k in keys]
    assert partition_of(b"x", 4) == int.from_bytes(hashlib.blake2b(b"x", digest_size=4).digest(), "big") % 4


def test_check_keys_names_the_misplaced_ones() -> None:
    p = run_partitioner("count", 3)
    mine = [k for k in range(100) if hash_long(k) % 3 == 1][:4]
    other = [k for k in range(100) if hash_long(k) % 3 == 2][:7]
    blobs = [k.to_bytes(8, "big") for k in mine + other]
    check_keys(p, StoreId(0, 1), [k.to_bytes(8, "big") for k in mine], where="f", version=3)
    with pytest.raises(MisplacedKeyError) as e:
        check_keys(p, StoreId(0, 1), blobs, where="the-file", version=3)
    assert e.value.file == "the-file" and e.value.keys == other[:5]
    assert "7 of 11 key(s) at version 3 of operator 0 partition 1 belong to partition(s) 2" in e.value.detail


def test_record_partitioner_writes_once_and_refuses_another(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    record_partitioner(storage, run_partitioner("count", 3))
    record_partitioner(storage, run_partitioner("count", 3))  # a resumed run: the same
    assert json.loads((tmp_path / "partitioner.json").read_text())["operators"]["0"] == {
        "scheme": "spark-murmur3",
        "partitions": 3,
        "key": "i64be",
    }
    with pytest.raises(UsageError, match="partitioner.json records"):
        record_partitioner(storage, run_partitioner("bucket-collect", 3))
    assert checkpoint_partitioning(storage).get(StoreId(0, 2)) == run_partitioner("count", 3)


@pytest.mark.parametrize(
    ("name", "text", "why"),
    [
        (None, None, "records no partitioner (no partitioner.json, demo.json or Spark operator metadata)"),
        ("partitioner.json", "{not json", "cannot be read"),
        ("partitioner.json", '{"operators": {"0": {"scheme": "md5", "partitions": 3, "key": "bytes"}}}', "scheme/key"),
        ("partitioner.json", '{"operators": {"0": {"scheme": "modulo", "partitions": 0, "key": "i64be"}}}', "1..1000000"),
        ("demo.json", '{"partitions": 3, "rows": 10}', "older statebed demo"),
    ],
)
def test_an_unknown_partitioner_says_why(tmp_path: Path, name: str | None, text: str | None, why: str) -> None:
    if name is not None:
        (tmp_path / name).write_text(text or "")
    parts = checkpoint_partitioning(open_storage(tmp_path))
    store = StoreId(0, 0)
    assert parts.get(store) is None and why in parts.reason(store)
    assert parts.unchecked_notes([store, StoreId(0, 1)]) == [f"partition check not made: {parts.reason(store)}"]


def test_a_spark_operator_whose_key_is_unknown(tmp_path: Path) -> None:
    meta = tmp_path / "state" / "0" / "_metadata"
    meta.mkdir(parents=True)
    info = {"operatorInfo": {"operatorId": 0, "operatorName": "transformWithStateExec"}, "stateStoreInfo": []}
    (meta / "metadata").write_text("v1\n" + json.dumps(info))
    parts = checkpoint_partitioning(open_storage(tmp_path))
    assert parts.get(StoreId(0, 0)) is None and "'transformWithStateExec'" in parts.reason(StoreId(0, 0))
