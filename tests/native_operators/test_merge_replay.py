"""ListState merges in a native checkpoint, without Spark: the replay folds merge records as RocksDB would.

A V1-layout checkpoint (`state/0/0/<v>.changelog`, changelog format v2 with typed records)
is written here in Spark's byte layout; the offset log's conf names the merge operator
version, as Spark records it. A merge replayed as a put keeps only the last append.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from checkpoint_helpers import run_cli

from statebed_store.changelog import DELETE, MERGE, PUT, Chunk, as_binary_array, encode_changelog

Capsys = pytest.CaptureFixture[str]
KEY = b"\x03\x00\x00key"


def _element(n: int) -> bytes:
    """One list element in mergeOperatorVersion 2's framing: int32 LE size, then the bytes."""
    body = bytes([0]) + n.to_bytes(16, "little")
    return len(body).to_bytes(4, "little") + body


def _checkpoint(root: Path, records: list[list[tuple[int, bytes, bytes | None]]], merge_version: str | None = "2") -> Path:
    conf = {"spark.sql.streaming.stateStore.providerClass": "RocksDBStateStoreProvider"}
    if merge_version is not None:
        conf["spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion"] = merge_version
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    state = root / "state" / "0" / "0"
    state.mkdir(parents=True)
    for batch, recs in enumerate(records):
        (root / "offsets" / str(batch)).write_text("v1\n" + json.dumps({"batchWatermarkMs": 0, "conf": conf}) + "\n{}\n")
        (root / "commits" / str(batch)).write_text("v1\n" + json.dumps({"nextBatchWatermarkMs": 0}) + "\n")
        chunks = [
            Chunk(op, as_binary_array([k]), None if op == DELETE else as_binary_array([v or b""]))
            for op, k, v in recs  # one chunk per record keeps the write order
        ]
        (state / f"{batch + 1}.changelog").write_bytes(encode_changelog(2, None, chunks))
    return root


def _field(d: dict[str, str], name: str) -> bytes:
    return d[name].encode() if name in d else base64.b64decode(d[f"{name}_b64"])


def _dump(capsys: Capsys, root: Path) -> tuple[int, dict[bytes, bytes], str]:
    code, out, err = run_cli(capsys, "dump", str(root), "--operator", "0", "--partition", "0")
    lines = [json.loads(line) for line in out.splitlines()]
    return code, {_field(d, "key"): _field(d, "value") for d in lines}, err


def _list_value(capsys: Capsys, root: Path) -> bytes:
    code, got, err = _dump(capsys, root)
    assert code == 0, err
    assert list(got) == [KEY], got
    return got[KEY]


def test_merges_append_across_changelogs(tmp_path: Path, capsys: Capsys) -> None:
    """put [1], merge [2], then merge [3, 4] in the next changelog: the list holds 1, 2, 3, 4."""
    root = _checkpoint(
        tmp_path / "ck",
        [
            [(PUT, KEY, _element(1)), (MERGE, KEY, _element(2))],
            [(MERGE, KEY, _element(3) + _element(4))],
        ],
    )
    assert _list_value(capsys, root) == b"".join(_element(i) for i in (1, 2, 3, 4))


def test_merge_after_delete_starts_a_new_list(tmp_path: Path, capsys: Capsys) -> None:
    root = _checkpoint(
        tmp_path / "ck",
        [
            [(MERGE, KEY, _element(1))],
            [(DELETE, KEY, None), (MERGE, KEY, _element(7))],
        ],
    )
    assert _list_value(capsys, root) == _element(7)


def test_version_1_joins_operands_with_a_comma(tmp_path: Path, capsys: Capsys) -> None:
    root = _checkpoint(tmp_path / "ck", [[(MERGE, KEY, b"a")], [(MERGE, KEY, b"b")]], merge_version="1")
    assert _list_value(capsys, root) == b"a,b"


def test_unknown_merge_operator_is_not_guessed(tmp_path: Path, capsys: Capsys) -> None:
    """No mergeOperatorVersion in the offset log: one error line, exit 2, nothing served."""
    root = _checkpoint(tmp_path / "ck", [[(MERGE, KEY, _element(1))], [(MERGE, KEY, _element(2))]], merge_version=None)
    code, got, err = _dump(capsys, root)
    assert code == 2 and got == {}
    assert len(err.strip().splitlines()) == 1 and "mergeOperatorVersion" in err, err


def test_a_list_that_does_not_frame_is_not_served(tmp_path: Path, capsys: Capsys) -> None:
    """A merged version-2 value whose element sizes run past its end is damage, not state."""
    root = _checkpoint(tmp_path / "ck", [[(MERGE, KEY, _element(1))], [(MERGE, KEY, b"\x40\x00\x00\x00xx")]])
    code, got, err = _dump(capsys, root)
    assert code == 2 and got == {}
    assert len(err.strip().splitlines()) == 1 and "2.changelog" in err, err
