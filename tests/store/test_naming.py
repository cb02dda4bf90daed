"""File and directory names: exact matches only, malformed ids rejected."""

from __future__ import annotations

import uuid

import pytest

from statebed_base.errors import UsageError
from statebed_store.naming import (
    StateFileName,
    StoreId,
    check_id,
    is_valid_id,
    new_checkpoint_id,
    parse_state_file,
    sidecar_main,
    sidecar_name,
)

UID = "49a2bdfc-d8d5-4e30-9e5c-e28baa77ba33"


@pytest.mark.parametrize(
    "name, parsed",
    [
        (f"5_{UID}.changelog", StateFileName(5, UID, "changelog")),
        (f"10_{UID}.zip", StateFileName(10, UID, "zip")),
        ("0_a.zip", StateFileName(0, "a", "zip")),
        ("5.changelog", StateFileName(5, None, "changelog")),
        ("17.zip", StateFileName(17, None, "zip")),
        ("1_deadbeef.changelog", StateFileName(1, "deadbeef", "changelog")),
        (f"{2**62}_x.zip", StateFileName(2**62, "x", "zip")),
        (f"3_{'a' * 64}.zip", StateFileName(3, "a" * 64, "zip")),
    ],
)
def test_parse_and_format_round_trip(name: str, parsed: StateFileName) -> None:
    assert parse_state_file(name) == parsed
    assert parsed.name == name


@pytest.mark.parametrize(
    "name",
    [
        f"5_{UID}.changelog.crc",  # a sidecar, not a changelog
        f".5_{UID}.zip.crc",  # Hadoop's hidden checksum file
        f".5_{UID}.changelog",
        f"5_{UID}.changelog.tmp",
        f"5_{UID}.zip.crc.crc",
        "5_x.changelog ",
        "5_x.changelog\n",  # `$` would match before a trailing newline
        "5_x\n.changelog",
        " 5_x.changelog",
        "5_x.CHANGELOG",
        "5_x.snapshot",
        "5_x",
        "5_.changelog",  # empty id
        "_x.changelog",  # no version
        "05_x.changelog",  # leading zero
        "-1_x.changelog",
        "5__x.changelog",
        "5_x_y.changelog",  # underscore in the id
        "5_-x.changelog",  # id starting with a dash
        "5_x.y.changelog",
        "5_x/y.changelog",
        "5_../x.changelog",
        f"3_{'a' * 65}.zip",  # id too long
        "5_é.changelog",
        "metadata",
        "SSTs",
        "schema",
        "5.changelog.crc",
    ],
)
def test_names_that_are_not_state_files(name: str) -> None:
    assert parse_state_file(name) is None


def test_sidecars_map_to_their_main_file_exactly() -> None:
    assert sidecar_name(f"5_{UID}.changelog") == f"5_{UID}.changelog.crc"
    assert sidecar_main(f"5_{UID}.changelog.crc") == f"5_{UID}.changelog"
    assert sidecar_main(f"5_{UID}.zip.crc") == f"5_{UID}.zip"
    assert sidecar_main("5.zip.crc") == "5.zip"
    for not_a_sidecar in (f".5_{UID}.zip.crc", f"5_{UID}.changelog.crc.crc", f"5_{UID}.changelog", "metadata.crc", ".crc", "5_x.tmp.crc"):
        assert sidecar_main(not_a_sidecar) is None, not_a_sidecar


@pytest.mark.parametrize("good", [UID, "a", "deadbeef", "A-b-9", "a" * 64, "new"])
def test_valid_ids(good: str) -> None:
    good = new_checkpoint_id() if good == "new" else good  # a fresh id, drawn at run time (ids stable across collections)
    assert is_valid_id(good)
    assert check_id(good) == good


@pytest.mark.parametrize("bad", ["", "-abc", "a_b", "a/b", "../x", "a.b", "a b", "a" * 65, "é", "x\n", "."])
def test_malformed_ids_are_rejected_naming_them(bad: str) -> None:
    assert not is_valid_id(bad)
    with pytest.raises(UsageError) as e:
        check_id(bad, "--id")
    assert repr(bad) in str(e.value) and "--id" in str(e.value)


def test_new_ids_are_uuids_and_unique() -> None:
    ids = {new_checkpoint_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(str(uuid.UUID(i)) == i for i in ids)


def test_store_directories() -> None:
    assert StoreId(0, 3).dir == "state/0/3"
    assert StoreId(2, 1, "left-keyToNumValues").dir == "state/2/1/left-keyToNumValues"
    assert StoreId(0, 3).path("1_a.changelog") == "state/0/3/1_a.changelog"
    assert str(StoreId(1, 2, "s")) == "operator 1 partition 2 store s"


@pytest.mark.parametrize("args", [(-1, 0), (0, -1)])
def test_negative_operator_or_partition(args: tuple[int, int]) -> None:
    with pytest.raises(UsageError, match="must be >= 0"):
        StoreId(*args)


@pytest.mark.parametrize("name", ["../x", "a/b", "", ".hidden", "_x y", "left\n"])
def test_malformed_store_names(name: str) -> None:
    with pytest.raises(UsageError) as e:
        StoreId(0, 0, name)
    assert repr(name) in str(e.value)
