"""The cross-partition key check itself (`statebed_verify.cross_partition`), the one both verifiers call."""

from __future__ import annotations

import numpy as np

from statebed_store import CheckpointRef, StoreId
from statebed_verify.cross_partition import KIND, CrossPartitionKeys, PartitionKeys, cross_partition_anomaly, key_hashes


def keys_at(version: int, parts: dict[int, list[bytes]], store: str = "default") -> CrossPartitionKeys:
    found = CrossPartitionKeys()
    for p, keys in parts.items():
        found.add_keys(StoreId(0, p, store), CheckpointRef(version, f"id{p}"), f"state/0/{p}", keys)
    return found


def test_a_key_in_two_partitions_names_both_and_the_key() -> None:
    [a] = keys_at(4, {0: [b"a", b"b"], 1: [b"c"], 2: [b"b", b"d"]}).anomalies()
    assert (a.kind, a.operator, a.partition, a.version) == (KIND, 0, 0, 4)
    assert a.keys == [b"b".hex()] and a.ids == ["id0", "id2"] and a.files == ["state/0/0", "state/0/2"]
    assert "1 key(s) are in the state of partitions 0, 2 of operator 0 at version 4" in a.detail


def test_every_key_in_one_partition_is_no_anomaly() -> None:
    assert keys_at(4, {0: [b"a", b"a"], 1: [b"b"]}).anomalies() == []  # a changelog's put, then delete, of one key


def test_only_partitions_of_one_store_at_one_version_are_compared() -> None:
    found = keys_at(1, {0: [b"a"]})
    found.add_keys(StoreId(0, 1), CheckpointRef(2, "x"), "state/0/1", [b"a"])  # another version: repartitioned, say
    found.add_keys(StoreId(0, 2, "right"), CheckpointRef(1, "y"), "state/0/2/right", [b"a"])  # another store
    assert found.anomalies() == []
    [a] = keys_at(1, {0: [b"k"], 1: [b"k"]}, store="left").anomalies()
    assert a.detail.startswith("[store left] ")


def test_a_hash_collision_alone_is_no_anomaly() -> None:
    """Hashes that meet send the check back to the keys: different keys under one hash are not reported."""
    forged = np.array([7], dtype=np.int64)
    parts = {p: PartitionKeys(CheckpointRef(1, None), f"p{p}", forged, lambda p=p: [b"key-%d" % p]) for p in (0, 1)}
    assert cross_partition_anomaly(0, "default", 1, parts) is None


def test_array_keys_hash_as_the_same_bytes_in_a_list() -> None:
    """A changelog's equal-width keys (an (n, width) array) and a snapshot's (a list) meet on the same key."""
    rows = np.frombuffer(b"\x00\x01ab\x00\x00", dtype=np.uint8).reshape(-1, 2)  # trailing NULs are key bytes too
    listed = [b"\x00\x01", b"ab", b"\x00\x00"]
    assert key_hashes(rows).tolist() == key_hashes(listed).tolist()
    found = CrossPartitionKeys()
    found.add_keys(StoreId(0, 0), CheckpointRef(3, "a"), "changelog", rows)
    found.add_keys(StoreId(0, 1), CheckpointRef(3, "b"), "snapshot", [b"zz", b"\x00\x00"])
    [a] = found.anomalies()
    assert a.keys == ["0000"] and a.files == ["changelog", "snapshot"]
