"""Spark's row checksums (`statebed_store.row_checksum`): frames verified and removed, a mismatch
named with its file and key, delete keys unwrapped. The layout is the one pyspark 4.3.0 writes
(checked on its checkpoints in tests/verify/test_row_checksums.py)."""

from __future__ import annotations

import pytest

from statebed_base.errors import UnknownFormatError
from statebed_store.changelog import DELETE, MERGE, PUT
from statebed_store.checksum import crc32c
from statebed_store.row_checksum import RowChecksumError, RowChecksums

V2 = RowChecksums(b"", "offsets/3")
V1 = RowChecksums(b",", "offsets/3")
KEY = b"\x00\x01key"


def frame(key: bytes, element: bytes, *, crc: int | None = None) -> bytes:
    value = crc32c(key + element) if crc is None else crc
    return value.to_bytes(4, "little") + len(element).to_bytes(4, "little") + element


def test_a_single_value_is_verified_and_served_without_its_frame() -> None:
    assert V2.unframe(KEY, frame(KEY, b"\x00row-bytes"), file="f") == b"\x00row-bytes"
    assert V2.unframe(KEY, frame(KEY, b""), file="f") == b""


def test_list_elements_are_joined_as_the_merge_operator_joins_them() -> None:
    a, b = b"\x05\x00\x00\x00elem1", b"\x05\x00\x00\x00elem2"
    assert V2.unframe(KEY, frame(KEY, a) + frame(KEY, b), file="f") == a + b
    assert V1.unframe(KEY, frame(KEY, b"x") + b"," + frame(KEY, b"y"), file="f") == b"x,y"


def test_a_changed_byte_is_a_mismatch_naming_the_file_and_the_key() -> None:
    good = frame(KEY, b"\x00value")
    bad = good[:-1] + bytes([good[-1] ^ 1])
    with pytest.raises(RowChecksumError, match=r"^state/0/0/3\.changelog: row checksum mismatch for key 0x00016b6579") as e:
        V2.unframe(KEY, bad, file="state/0/0/3.changelog")
    assert e.value.key == KEY and e.value.file == "state/0/0/3.changelog"
    with pytest.raises(RowChecksumError, match="mismatch"):  # the same value under another key
        V2.unframe(b"other", good, file="f")


def test_the_second_element_of_a_list_is_checked_too() -> None:
    with pytest.raises(RowChecksumError, match="frame at byte 13"):
        V2.unframe(KEY, frame(KEY, b"good!") + frame(KEY, b"bad", crc=1), file="f")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (b"\x01\x02\x03", "breaks off at byte 0"),
        (frame(KEY, b"abc")[:-1], "runs past"),
        (frame(KEY, b"abc") + b"\x01", "breaks off at byte 11"),
        (b"\x00\x00\x00\x00\xff\xff\xff\xff", "frame size -1"),
    ],
)
def test_a_value_that_is_no_whole_frames_is_refused(value: bytes, why: str) -> None:
    with pytest.raises(RowChecksumError, match=why):
        V2.unframe(KEY, value, file="f")


def test_a_v1_list_needs_its_delimiter_and_an_unknown_operator_is_named() -> None:
    with pytest.raises(RowChecksumError, match="no list delimiter"):
        V1.unframe(KEY, frame(KEY, b"x") + frame(KEY, b"y"), file="f")
    with pytest.raises(UnknownFormatError, match="offsets/3 records no known"):
        RowChecksums(None, "offsets/3").unframe(KEY, frame(KEY, b"x") + frame(KEY, b"y"), file="f")
    assert RowChecksums(None, "offsets/3").unframe(KEY, frame(KEY, b"x"), file="f") == b"x"  # one frame needs none


def test_frames_only_when_a_load_verified_the_rows_already() -> None:
    assert V2.unframe(KEY, frame(KEY, b"abc", crc=7), file="f", verify=False) == b"abc"


def test_a_delete_key_carries_the_checksum_of_the_key_alone() -> None:
    framed = crc32c(KEY).to_bytes(4, "little") + KEY
    assert V2.deleted_key(framed, file="f") == KEY
    with pytest.raises(RowChecksumError, match="delete record"):
        V2.deleted_key(framed[:-1] + b"X", file="f")
    with pytest.raises(RowChecksumError, match="no room for its checksum"):
        V2.deleted_key(b"\x01\x02", file="f")


def test_a_changelogs_columns_come_back_with_plain_delete_keys() -> None:
    ops = [PUT, DELETE, MERGE]
    keys = [KEY, crc32c(b"gone").to_bytes(4, "little") + b"gone", KEY]
    values = [frame(KEY, b"v"), None, frame(KEY, b"w")]
    assert V2.replay_columns(ops, keys, values, DELETE, file="f") == [KEY, b"gone", KEY]
    with pytest.raises(RowChecksumError, match="^f: row checksum mismatch"):
        V2.replay_columns([PUT], [KEY], [frame(KEY, b"v", crc=3)], DELETE, file="f")
