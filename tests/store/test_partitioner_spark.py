"""statebed's Murmur3 against real Spark: `hash(...)` and `spark_partition_id()` after `repartition(P, col)`.

One short local[1] session (run under `flock /tmp/statebed-spark.lock`). Strings cover every
tail length (0-3 bytes past a 4-byte block), non-ASCII UTF-8 (whose tail bytes are >= 0x80:
Spark mixes them sign-extended, unlike standard Murmur3), nulls; ints and longs cover signs
and extremes; several columns and a struct chain their hashes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from statebed_job.jvm_startup import java_options
from statebed_store.murmur3 import hash_longs, hash_value, hash_values

pytestmark = pytest.mark.slow

STRINGS = ["", "a", "ab", "abc", "abcd", "abcde", "key-042", "k0", "é", "é1", "日本", "日本語", "ß€𝄞", "\x00\x01", "x" * 37, None]
INTS = [0, 1, -1, 42, 2**31 - 1, -(2**31), 123456, -987654, None]
LONGS = [0, 1, -1, 2**63 - 1, -(2**63), 2**32, 2**32 + 7, -(2**40) + 3, 999_999_937, None]
P = 7


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from pyspark.sql import SparkSession

    tmp = tmp_path_factory.mktemp("spark")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[1]")
        .appName("statebed-murmur3")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.local.dir", str(tmp / "local"))
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={Path(tmp) / 'derby'} {java_options()}")
        .getOrCreate()
    )
    yield session
    session.stop()


def _rows() -> list[tuple[Any, Any, Any]]:
    n = max(len(STRINGS), len(INTS), len(LONGS))
    rows = [(STRINGS[i % len(STRINGS)], INTS[i % len(INTS)], LONGS[i % len(LONGS)]) for i in range(n * 3)]
    return rows + [(f"key-{i}-é" * (i % 5), i * 7919 - 40_000, i * 104_729 - 2**35) for i in range(300)]


def test_hash_and_partition_ids_match_spark(spark: Any) -> None:
    from pyspark.sql import functions as F

    rows = _rows()
    df = spark.createDataFrame(rows, "s string, i int, l long")
    got = df.select(
        "s",
        "i",
        "l",
        F.hash("s").alias("hs"),
        F.hash("i").alias("hi"),
        F.hash("l").alias("hl"),
        F.hash("s", "i", "l").alias("hsil"),
        F.hash(F.struct("l", "s", "i")).alias("hstruct"),
    ).collect()
    assert len(got) == len(rows)
    mismatches = []
    for r in got:
        want = {
            "hs": hash_value(r.s, "string", 42),
            "hi": hash_value(r.i, "integer", 42),
            "hl": hash_value(r.l, "long", 42),
            "hsil": hash_values([r.s, r.i, r.l], ["string", "integer", "long"]),
            "hstruct": hash_value((r.l, r.s, r.i), ("long", "string", "integer"), 42),
        }
        mismatches += [(name, r.s, r.i, r.l, r[name], h) for name, h in want.items() if r[name] != h]
    assert not mismatches, f"{len(mismatches)} hashes differ from Spark's, e.g. {mismatches[:5]}"

    longs = [r.l for r in got if r.l is not None]
    assert hash_longs(longs).tolist() == [r.hl for r in got if r.l is not None]

    for col, typ in (("s", "string"), ("l", "long"), ("i", "integer")):
        parts = df.repartition(P, col).select(col, F.spark_partition_id().alias("p")).collect()
        wrong = [(r[col], r.p) for r in parts if r.p != hash_value(r[col], typ, 42) % P]
        assert len(parts) == len(rows) and not wrong, f"repartition({P}, {col}): {wrong[:5]}"
    multi = df.repartition(P, "s", "i", "l").select("s", "i", "l", F.spark_partition_id().alias("p")).collect()
    wrong = [r for r in multi if r.p != hash_values([r.s, r.i, r.l], ["string", "integer", "long"]) % P]
    assert not wrong, f"repartition({P}, s, i, l): {wrong[:5]}"


def test_other_key_types_match_spark(spark: Any) -> None:
    """The types a native state key can hold: Spark's hash of each column equals ours on its raw value."""
    import datetime as dt
    from decimal import Decimal

    from pyspark.sql import functions as F

    rows = [
        (
            True,
            1,
            -3,
            dt.date(2024, 2, 29),
            dt.datetime(2024, 1, 1, 12, 30, tzinfo=dt.UTC),
            1.5,
            -0.0,
            Decimal("12.34"),
            Decimal("-123456789012345678901.123"),
            b"\x00\xff\x80x",
        ),
        (
            False,
            -128,
            32767,
            dt.date(1969, 12, 31),
            dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
            float("nan"),
            2.5e300,
            Decimal("-0.01"),
            Decimal("128"),
            b"",
        ),
        (None, None, None, None, None, None, None, None, None, None),
    ]
    schema = "bo boolean, by byte, sh short, d date, ts timestamp, f float, db double, dec decimal(10,2), big decimal(30,3), bin binary"
    df = spark.createDataFrame(rows, schema)
    cols = ["bo", "by", "sh", "d", "ts", "f", "db", "dec", "big", "bin"]
    raw_cols = [F.col(c).alias(f"v_{c}") for c in cols if c not in ("d", "ts")]  # dates, timestamps: as Spark stores them
    got = df.select(
        *[F.hash(c).alias(c) for c in cols], *raw_cols, F.unix_date("d").alias("v_d"), F.unix_micros("ts").alias("v_ts")
    ).collect()
    for r in got:
        raw = {
            "bo": (r.v_bo, "boolean"),
            "by": (r.v_by, "byte"),
            "sh": (r.v_sh, "short"),
            "d": (r.v_d, "date"),
            "ts": (r.v_ts, "timestamp"),
            "f": (r.v_f, "float"),
            "db": (r.v_db, "double"),
            "dec": (None if r.v_dec is None else int(r.v_dec.scaleb(2)), "decimal(10,2)"),
            "big": (None if r.v_big is None else int(r.v_big.scaleb(3)), "decimal(30,3)"),
            "bin": (r.v_bin, "binary"),
        }
        wrong = {c: (r[c], hash_value(v, t, 42)) for c, (v, t) in raw.items() if r[c] != hash_value(v, t, 42)}
        assert not wrong, wrong
