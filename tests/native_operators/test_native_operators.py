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

pytestmark = pytest.mark.slow
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
    """A transformWithState variable: `--state-var` per partition, decoded by its kind."""
    from pyspark.sql.types import LongType, StructField, StructType

    key_t = schema["key"].dataType
    names = schema.fieldNames()
    out: Counter[Any] = Counter()
    for part in (0, 1):
        for d in _dump(capsys, ckpt.path, "--operator", "0", "--partition", str(part), "--state-var", var, *at):
            key, value = _bytes(d, "key"), _bytes(d, "value")
            if "list_element" in names:
                elem_t = schema["list_element"].dataType
                for e in rows.elements(value):
                    out[(rows.plain(key, key_t), _maybe_ttl(e, elem_t))] += 1
            elif "user_map_key" in names:
                head, rest = rows.prefixed(key)
                wrap = StructType([StructField("k", key_t)])
                user = StructType([StructField("u", schema["user_map_key"].dataType)])
                rec = (rows.plain(head, wrap)[0], rows.plain(rest, user)[0], _maybe_ttl(value, schema["user_map_value"].dataType))
                out[rec] += 1
            else:
                out[(rows.plain(key, key_t), _maybe_ttl(value, schema["value"].dataType))] += 1
    _ = LongType
    return out


def _maybe_ttl(stored: bytes, value_t: Any) -> tuple[Any, ...]:
    """A value row, or with a TTL the row `(value, expiration)`: the value either way."""
    from pyspark.sql.types import LongType, StructField, StructType

    with_ttl = StructType([StructField("v", value_t), StructField("ttl", LongType())])
    row = stored[1:]
    if len(row) > 8 + 8 * len(value_t.fields) and rows.decode_row(row, with_ttl)[1] is not None:
        try:
            inner = rows.plain(stored, with_ttl)[0]
            if isinstance(inner, tuple):
                return inner
        except AssertionError:
            pass
    return rows.plain(stored, value_t)


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
    for name, var in (("tws", "items"), ("tws_v1", "items")):
        for part in (0, 1):
            at = ["--operator", "0", "--partition", str(part)]
            counters = {
                _bytes(d, "key"): _bytes(d, "value") for d in _dump(capsys, ckpts[name].path, *at, "--state-var", f"$rowCounter_{var}")
            }
            values = {_bytes(d, "key"): _bytes(d, "value") for d in _dump(capsys, ckpts[name].path, *at, "--state-var", var)}
            assert set(counters) == set(values), name
            for key, value in values.items():
                assert len(rows.elements(value)) == int.from_bytes(counters[key][9:17], "little"), (name, key)
                lists += 1
    assert lists >= 10, lists
