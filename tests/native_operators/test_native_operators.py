"""Every stateful operator's native checkpoint, written by the installed pyspark (4.3) in one session:
`ls`, `ls --rebuildable`, `verify lineage`, `dump` equal to Spark's state data source, `diff`, `rewind`.

Run under the Spark lock: `flock /tmp/statebed-spark.lock .venv/bin/pytest tests/native_operators -m slow`.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import operator_checks as checks
import operator_rows as rows
import pytest
import spark_checkpoints as sc
from checkpoint_helpers import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
Capsys = pytest.CaptureFixture[str]
JOIN_VALUES = "keyWithIndexToValue"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, dict[str, sc.Checkpoint]]]:
    """One Spark session: every checkpoint is written, then read back with Spark's reader, in it."""
    scratch = Path(tempfile.mkdtemp(prefix="statebed-native-ops-"))
    cwd = os.getcwd()
    os.chdir(scratch)  # Spark writes spark-warehouse / metastore_db into the working directory
    spark = sc.session(scratch)
    try:
        yield spark, sc.generate(spark, tmp_path_factory.mktemp("native-ops"))
    finally:
        spark.stop()
        os.chdir(cwd)
        shutil.rmtree(scratch, ignore_errors=True)


def _bytes(d: dict[str, Any], name: str) -> bytes:
    return d[name].encode() if name in d else base64.b64decode(d[f"{name}_b64"])


def _dump(capsys: Capsys, ckpt: Path, *args: str) -> list[dict[str, Any]]:
    code, out, err = run_cli(capsys, "dump", str(ckpt), *args)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def _statebed_records(capsys: Capsys, ckpt: sc.Checkpoint, label: str, spark_schema: Any, batch: int | None) -> Counter[Any]:
    """statebed's dump of one part, decoded into the records Spark's reader shows for it."""
    at = [] if batch is None else ["--batch", str(batch)]
    kind, _, name = label.partition(":")
    key_t = spark_schema["key"].dataType
    out: Counter[Any] = Counter()
    if kind == "side":
        value_t = spark_schema["value"].dataType
        for d in _dump(capsys, ckpt.path, *at):
            if d["store"] == f"{name}-{JOIN_VALUES}":
                out[(rows.plain(_bytes(d, "key"), key_t), rows.plain(_bytes(d, "value"), value_t))] += 1
        return out
    if kind == "var":
        return _var_records(capsys, ckpt, name, spark_schema, at)
    op = label.removeprefix("op")
    value_t = spark_schema["value"].dataType
    for d in _dump(capsys, ckpt.path, *at):
        if str(d["operator"]) != op:
            continue
        key = _bytes(d, "key")
        if key[:1] == b"\x00":
            decoded = rows.plain(key, key_t)
        else:  # prefix-scan key (session window): the grouping key, then the rest of the key's fields
            head, rest = rows.prefixed(key)
            decoded = _split_key(head, rest, key_t)
        out[(decoded, rows.plain(_bytes(d, "value"), value_t))] += 1
    return out


def _split_key(head: bytes, rest: bytes, key_t: Any) -> tuple[Any, ...]:
    """A prefix-scan key's fields: the prefix row holds the first fields of `key_t`, the rest row the others."""
    from pyspark.sql.types import StructType

    for cut in range(1, len(key_t.fields)):
        try:
            first = rows.plain(head, StructType(key_t.fields[:cut]))
            second = rows.plain(rest, StructType(key_t.fields[cut:]))
        except (AssertionError, UnicodeDecodeError):
            continue
        return first + second
    raise AssertionError(f"cannot split key {head.hex()} | {rest.hex()} into {key_t.simpleString()}")


def _var_records(capsys: Capsys, ckpt: sc.Checkpoint, var: str, schema: Any, at: list[str]) -> Counter[Any]:
    """A transformWithState variable: `--state-var` per partition, decoded by its kind with the value
    type Spark's reader reports (with a TTL: `(value, ttlExpirationMs)`, as the stored row holds it)."""
    from pyspark.sql.types import StructField, StructType

    key_t = schema["key"].dataType
    names = schema.fieldNames()
    out: Counter[Any] = Counter()
    for part in (0, 1):
        for d in _dump(capsys, ckpt.path, "--operator", "0", "--partition", str(part), "--state-var", var, *at):
            key, value = _bytes(d, "key"), _bytes(d, "value")
            if "list_element" in names:
                elem_t = schema["list_element"].dataType
                for e in rows.elements(value):
                    out[(rows.plain(key, key_t), rows.plain(e, elem_t))] += 1
            elif "user_map_key" in names:
                head, rest = rows.prefixed(key)
                wrap = StructType([StructField("k", key_t)])
                user = StructType([StructField("u", schema["user_map_key"].dataType)])
                rec = (rows.plain(head, wrap)[0], rows.plain(rest, user)[0], rows.plain(value, schema["user_map_value"].dataType))
                out[rec] += 1
            else:
                out[(rows.plain(key, key_t), rows.plain(value, schema["value"].dataType))] += 1
    return out


def _spark_records(spark: Any, ckpt: sc.Checkpoint, label: str, opts: dict[str, str], batch: int | None) -> tuple[Any, Counter[Any]]:
    df = sc.read_state(spark, ckpt, opts, batch)
    cols = [c for c in df.columns if c != "partition_id"]
    return df.schema, Counter(tuple(rows.norm(r[c]) for c in cols) for r in df.collect())


def test_dump_equals_sparks_state_reader(made: tuple[Any, dict[str, sc.Checkpoint]], capsys: Capsys) -> None:
    """Per operator and state variable: statebed's dump, decoded, is exactly what Spark's reader returns."""
    spark, ckpts = made
    compared: dict[str, int] = {}
    wrong = []
    for ckpt in ckpts.values():
        for label, opts in ckpt.reads:
            schema, want = _spark_records(spark, ckpt, label, opts, None)
            try:
                got = _statebed_records(capsys, ckpt, label, schema, None)
            except AssertionError as e:
                wrong.append(f"{ckpt.name} {label}: cannot decode ({e}); Spark {schema.simpleString()} {sorted(want)[:3]}")
                continue
            if got != want or not want:
                wrong.append(f"{ckpt.name} {label}: statebed {sorted(got)[:3]} != Spark {schema.simpleString()} {sorted(want)[:3]}")
            compared[f"{ckpt.name} {label}"] = sum(want.values())
    assert not wrong, "\n".join(wrong)
    print("records compared:", json.dumps(compared))


STORES_PER_PARTITION = {"join": 4, "multi": 2}


def test_ls_lineage_diff_rewind_every_operator(made: tuple[Any, dict[str, sc.Checkpoint]], capsys: Capsys, tmp_path: Path) -> None:
    """Every checkpoint lists, rebuilds at every committed batch, has one linear history (V2), diffs
    consistently with its dumps and rewinds to a middle batch with that batch's state."""
    _, ckpts = made
    diffs = {}
    for ckpt in ckpts.values():
        checks.check_ls(capsys, ckpt.path, 2 * STORES_PER_PARTITION.get(ckpt.name, 1))
        checks.check_lineage(capsys, ckpt.path, ckpt.fmt)
        batches = checks.committed_batches(ckpt.path)
        diffs[ckpt.name] = checks.check_diff(capsys, ckpt.path, batches[1], batches[-1])
        checks.check_rewind(capsys, ckpt.path, tmp_path, batches[len(batches) // 2])
    print("keys differing between the second and the last batch:", json.dumps(diffs))


def test_list_lengths_match_their_row_counters(made: tuple[Any, dict[str, sc.Checkpoint]], capsys: Capsys) -> None:
    """Spark keeps each list's length in `$rowCounter_<list>`: the dumped lists must have exactly that many elements."""
    _, ckpts = made
    lists = 0
    # a list with a TTL keeps its length in `$count_<list>` instead (Spark's OneToManyTTLState)
    for name, counter in (("tws", "$rowCounter_items"), ("tws_v1", "$rowCounter_items"), *((n, "$count_items") for n in TTL_CKPTS)):
        var = "items"
        for part in (0, 1):
            at = ["--operator", "0", "--partition", str(part)]
            counters = {_bytes(d, "key"): _bytes(d, "value") for d in _dump(capsys, ckpts[name].path, *at, "--state-var", counter)}
            values = {_bytes(d, "key"): _bytes(d, "value") for d in _dump(capsys, ckpts[name].path, *at, "--state-var", var)}
            assert set(counters) == set(values), name
            for key, value in values.items():
                assert len(rows.elements(value)) == int.from_bytes(counters[key][9:17], "little"), (name, key)
                lists += 1
    assert lists >= 20, lists


TTL_CKPTS = ("tws_ttl", "tws_ttl_v1")
TTL_FAMILIES = ("$ttl_total", "$ttl_items", "$ttl_seen", "$min_items", "$count_items")


def _family_entries(capsys: Capsys, ckpt: sc.Checkpoint, family: str) -> list[tuple[bytes, bytes]]:
    return [
        (_bytes(d, "key"), _bytes(d, "value"))
        for part in (0, 1)
        for d in _dump(capsys, ckpt.path, "--operator", "0", "--partition", str(part), "--state-var", family)
    ]


def _spark_expirations(spark: Any, ckpt: sc.Checkpoint) -> dict[str, Counter[Any]]:
    """Spark's reader on each TTL'd variable: its value column must be `(value, ttlExpirationMs)`;
    {var: Counter of (element key, expiration ms)} (a list: every element's)."""
    out: dict[str, Counter[Any]] = {}
    for label, opts in ckpt.reads:
        schema, recs = _spark_records(spark, ckpt, label, opts, None)
        value_col = schema.fieldNames()[-2]  # value / list_element / user_map_value, before partition_id
        assert schema[value_col].dataType.fieldNames() == ["value", "ttlExpirationMs"], schema.simpleString()
        out[opts["stateVarName"]] = Counter((rec[0] if len(rec) == 2 else rec[:2], rec[-1][1]) for rec in recs.elements())
    return out


def test_ttl_indexes_agree_with_sparks_expirations(made: tuple[Any, dict[str, sc.Checkpoint]], capsys: Capsys) -> None:
    """State with a TTL (ValueState, ListState, MapState; processing time, V2 and V1): Spark's reader
    shows every value as `(value, ttlExpirationMs)` (the dump equals it: `test_dump_equals_sparks_state_reader`),
    and Spark's own TTL indexes, which `dump --state-var` lists and reads by name, hold the same
    expirations: `$ttl_<var>` one (expiration, element key) per value (a list: its earliest),
    `$min_items` each list's earliest expiration."""
    from pyspark.sql.types import LongType, StructField, StructType

    spark, ckpts = made
    compared = {}
    for name in TTL_CKPTS:
        ckpt = ckpts[name]
        code, _, err = run_cli(capsys, "dump", str(ckpt.path), "--operator", "0", "--partition", "0", "--state-var", "no-such-var")
        assert code == 2 and all(f in err for f in TTL_FAMILIES), err
        want = _spark_expirations(spark, ckpt)
        schema = sc.read_state(spark, ckpt, {"stateVarName": "seen"}).schema
        key_t = schema["key"].dataType
        composite = StructType([StructField("key", key_t), StructField("userKey", schema["user_map_key"].dataType)])
        earliest: dict[Any, int] = {}
        for key, exp in want["items"].elements():
            earliest[key] = min(exp, earliest.get(key, exp))
        got = {
            var: Counter(tuple(reversed(rows.ttl_index_key(k, elem_t))) for k, _ in _family_entries(capsys, ckpt, f"$ttl_{var}"))
            for var, elem_t in (("total", key_t), ("seen", composite), ("items", key_t))
        }
        assert got["total"] == want["total"], name
        assert got["seen"] == want["seen"], name
        assert got["items"] == Counter(earliest.items()), name
        mins = {
            rows.plain(k, key_t): rows.plain(v, StructType([StructField("e", LongType())]))[0]
            for k, v in _family_entries(capsys, ckpt, "$min_items")
        }
        assert mins == earliest, name
        assert want["total"] and want["seen"] and earliest, f"{name}: no state with a TTL to check"
        compared[name] = sum(want["total"].values()) + sum(want["seen"].values()) + sum(want["items"].values())
    print("TTL'd values whose expirations were checked against the indexes:", json.dumps(compared))
