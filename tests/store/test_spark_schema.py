"""Spark's state schema files (v2 of an aggregation, v3 of transformWithState) parsed whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from native_fixtures import extract_native, extract_one

from statebed_store.spark_schema import DEFAULT_FAMILY, parse_schema_file, type_problem


@pytest.fixture(scope="module")
def agg_schema(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    root = extract_native(tmp_path_factory.mktemp("native"))["4.3.0"]
    return (root / "agg" / "state" / "0" / "0" / "_metadata" / "schema").read_bytes()


def test_a_v2_schema_file_as_spark_wrote_it(agg_schema: bytes) -> None:
    schema = parse_schema_file(agg_schema)
    assert schema.version == "v2" and list(schema.families) == [DEFAULT_FAMILY]
    key, value = schema.families[DEFAULT_FAMILY]
    assert key["type"] == "struct" and value["fields"][0]["type"] == "long"


def test_a_v3_schema_file_names_every_column_family(tmp_path: Path) -> None:
    root = extract_one("spark-4.3.0-repartitioned-tws", tmp_path) / "tws" / "state" / "0" / "_stateSchema" / "default"
    [path] = [p for p in root.iterdir() if not p.name.startswith(".")]
    schema = parse_schema_file(path.read_bytes())
    assert schema.version == "v3" and {"total", "items", "seen", "$eventTimers_keyToTimestamp"} <= set(schema.families)


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda d: d[: len(d) // 2], "cut short"),
        (lambda d: d + b"\x00", "bytes after"),
        (lambda d: d.replace(b'"long"', b'"lonq"'), "unknown type"),
        (lambda d: d.replace(b'"nullable":true', b'"nullable":"tr"', 1), "nullable"),  # same length: the framing holds
        (lambda d: b"\x00\x02v9" + d[4:], "version"),
    ],
    ids=["cut", "trailing-bytes", "type-name", "nullable-not-boolean", "unknown-version"],
)
def test_a_damaged_schema_file_says_what_is_wrong(agg_schema: bytes, damage: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_schema_file(damage(agg_schema))  # type: ignore[operator]


def test_a_renamed_field_is_a_schema_still() -> None:
    """Spark compares schemas ignoring names: a renamed field is no damage to the file."""
    assert type_problem({"type": "struct", "fields": [{"name": "kez", "type": "string", "nullable": True, "metadata": {}}]}) is None
    assert type_problem("decimal(38,18)") is None and type_problem("string collate UTF8_LCASE") is None
    assert type_problem("int ") is not None
