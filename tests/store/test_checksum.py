"""CRC32C sidecars: Spark's JSON, signed Java ints, damage naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statebed_base.errors import CorruptFileError
from statebed_store.checksum import check_sidecar, crc32c, make_sidecar

FILE = "/ckpt/state/0/0/2_b.changelog"


def test_crc32c_known_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(memoryview(b"123456789")) == 0xE3069283


def test_make_sidecar_writes_a_signed_java_int() -> None:
    data = b"123456789"  # CRC32C 0xE3069283 has the top bit set
    doc = json.loads(make_sidecar(data, {"executorId": "1", "taskInfo": "Task= 2.0"}))
    assert doc["algorithm"] == "CRC32C"
    assert doc["value"] == 0xE3069283 - (1 << 32) < 0
    assert doc["mainFileSize"] == 9 and isinstance(doc["timestampMs"], int)
    assert doc["creator"] == {"executorId": "1", "taskInfo": "Task= 2.0"}
    check_sidecar(data, make_sidecar(data), file=FILE)


def spark_sidecars(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/state/**/*.crc") if not p.name.startswith("."))


@pytest.mark.parametrize("spark", ["4.1.4", "4.3.0"])
def test_every_spark_sidecar_matches_its_file(native: dict[str, Path], spark: str) -> None:
    sidecars = spark_sidecars(native[spark])
    assert len(sidecars) > 200
    signs = set()
    for side in sidecars:
        main = side.with_name(side.name[: -len(".crc")])
        data, raw = main.read_bytes(), side.read_bytes()
        doc = json.loads(raw)
        assert doc["algorithm"] == "CRC32C" and doc["mainFileSize"] == len(data)
        signs.add(doc["value"] < 0)
        check_sidecar(data, raw, file=str(main))
        # a flipped byte, or one byte less, is caught and the message names the file
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x01
        with pytest.raises(CorruptFileError, match="CRC32C does not match") as e:
            check_sidecar(bytes(flipped), raw, file=str(main))
        assert e.value.file == str(main)
        with pytest.raises(CorruptFileError, match="truncated or replaced") as e:
            check_sidecar(data[:-1], raw, file=str(main))
        assert str(main) in str(e.value)
    assert signs == {True, False}, "the fixtures should hold negative (signed int) and positive values"


@pytest.mark.parametrize(
    "sidecar, match",
    [
        (b"", "not valid JSON"),
        (b"\x00\x00\x00\x01binary", "not valid JSON"),
        (b'{"algorithm":"CRC32C","mainFileSize":3}', "not valid JSON with algorithm/value/mainFileSize"),
        (b'{"algorithm":"CRC32C","value":"x","mainFileSize":3}', "not valid JSON"),
        (b'{"algorithm":"MD5","value":1,"mainFileSize":3}', "unsupported checksum algorithm 'MD5'"),
    ],
)
def test_unreadable_sidecars_name_the_sidecar(sidecar: bytes, match: str) -> None:
    with pytest.raises(CorruptFileError, match=match) as e:
        check_sidecar(b"abc", sidecar, file=FILE)
    assert e.value.file == FILE + ".crc"
