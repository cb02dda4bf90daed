"""Lineage JSON and its validation: every error names the file."""

from __future__ import annotations

import pytest

from statebed_base.errors import CorruptFileError, LineageError
from statebed_store.lineage import CheckpointRef, lineage_from_json, lineage_to_json, validate_lineage

FILE = "/ckpt/state/0/0/5_e.changelog"
R = CheckpointRef


def test_spark_json_rendering_round_trips() -> None:
    lineage = (R(3, "c"), R(4, "d-4"))
    text = lineage_to_json(lineage)
    assert text == '[{"version":3,"checkpointUniqueId":"c"},{"version":4,"checkpointUniqueId":"d-4"}]'
    assert lineage_from_json(text, file=FILE) == lineage
    assert lineage_to_json(()) == "[]" and lineage_from_json("[]", file=FILE) == ()


def test_unknown_fields_in_items_are_ignored() -> None:
    assert lineage_from_json('[{"version":2,"checkpointUniqueId":"b","extra":1}]', file=FILE) == (R(2, "b"),)


def test_valid_lineages_pass() -> None:
    validate_lineage((R(1, "a"), R(2, "b"), R(3, "c")), version=4, file=FILE)
    validate_lineage((), version=1, file=FILE)
    validate_lineage((R(7, "g"),), version=None, file=FILE)


def check(lineage: tuple[CheckpointRef, ...], version: int | None, match: str) -> None:
    with pytest.raises(LineageError, match=match) as e:
        validate_lineage(lineage, version=version, file=FILE)
    assert e.value.file == FILE and str(e.value).startswith(FILE + ": ")


def test_versions_not_increasing_by_one() -> None:
    check((R(1, "a"), R(3, "c")), 4, "not increasing by one: 1 then 3")
    check((R(2, "b"), R(1, "a")), 3, "not increasing by one: 2 then 1")
    check((R(2, "b"), R(2, "b2")), 3, "not increasing by one: 2 then 2")


def test_duplicate_ids() -> None:
    check((R(1, "same"), R(2, "same")), 3, "lists id same more than once")


def test_wrong_end_version() -> None:
    check((R(1, "a"), R(2, "b")), 4, "must end at version 3, ends at 2")
    check((R(1, "a"), R(2, "b")), 2, "must end at version 1, ends at 2")


@pytest.mark.parametrize(
    "text, match",
    [
        ('{"version":1}', "must be a JSON array, got dict"),
        ("[1]", "item 0 is not an object"),
        ('[{"version":1,"checkpointUniqueId":"a"}, "x"]', "item 1 is not an object"),
        ('[{"version":0,"checkpointUniqueId":"a"}]', "bad version 0"),
        ('[{"version":"1","checkpointUniqueId":"a"}]', "bad version '1'"),
        ('[{"version":true,"checkpointUniqueId":"a"}]', "bad version True"),
        ('[{"version":1.5,"checkpointUniqueId":"a"}]', "bad version 1.5"),
        ('[{"checkpointUniqueId":"a"}]', "bad version None"),
        ('[{"version":1,"checkpointUniqueId":"../x"}]', "malformed id '../x'"),
        ('[{"version":1,"checkpointUniqueId":""}]', "malformed id ''"),
        ('[{"version":1,"checkpointUniqueId":5}]', "malformed id 5"),
        ('[{"version":1}]', "malformed id None"),
    ],
)
def test_malformed_lineage_json(text: str, match: str) -> None:
    with pytest.raises(LineageError, match=match) as e:
        lineage_from_json(text, file=FILE)
    assert e.value.file == FILE and FILE in str(e.value)


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "lineage is not valid JSON"),
        ("[{", "lineage is not valid JSON"),
        ("1:abc 2:def", "lineage is not valid JSON"),  # a pre-release Spark rendering
        ('[{"version":1e400,"checkpointUniqueId":"a"}]', "number 1e400 is out of range"),
        ("[NaN]", "non-finite number NaN"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_lineage_that_is_not_json_is_a_corrupt_file(text: str, match: str) -> None:
    """Unparseable bytes are damage (unreadable-file), not a lineage that breaks the history."""
    with pytest.raises(CorruptFileError, match=match) as e:
        lineage_from_json(text, file=FILE)
    assert e.value.file == FILE


def test_a_deep_non_object_item_is_shown_short() -> None:
    with pytest.raises(LineageError, match=r"item 0 is not an object: \[\[\[\[\[\[\[\.\.\.") as e:
        lineage_from_json("[" * 500 + "]" * 500, file=FILE)
    assert len(str(e.value)) < 200
