"""The committed Spark 4.1.4 and 4.3.0 checkpoints (tests/fixtures/native): deduplication + aggregation in
one query, and a stream-stream join, through every read command. Spark 4.1 is not installed here,
so its state is compared with `<query>.expected.json`, which the fixture generator checked
against Spark's own state data source when it wrote the checkpoint."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import operator_checks as checks
import operator_rows as rows
import pytest
from checkpoint_helpers import run_cli
from native_fixtures import SPARK_VERSIONS, expected
from pyspark.sql.types import LongType, StringType, StructField, StructType

Capsys = pytest.CaptureFixture[str]
STORES = {"dedup_agg": 6, "join": 12}  # 3 partitions: 2 operators x 1 store, 1 operator x 4 join stores


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
@pytest.mark.parametrize("query", sorted(STORES))
def test_ls_lineage_diff_rewind(capsys: Capsys, native: dict[str, Path], tmp_path: Path, spark: str, query: str) -> None:
    root = native[spark] / query
    checks.check_ls(capsys, root, STORES[query])
    checks.check_lineage(capsys, root, 2)
    batches = checks.committed_batches(root)
    assert checks.check_diff(capsys, root, batches[1], batches[-1]) > 0
    checks.check_rewind(capsys, root, tmp_path, batches[len(batches) // 2])


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_join_rows_equal_the_checked_expectation(capsys: Capsys, native: dict[str, Path], tmp_path: Path, spark: str) -> None:
    """Both sides' keyWithIndexToValue stores hold exactly the rows that arrived (what Spark's reader returned
    for `joinSide` when the fixture was made)."""
    root = shutil.copytree(native[spark] / "join", tmp_path / "join")
    want = expected(native[spark], "join")
    latest = checks.committed_batches(root)[-1]
    for side, col in (("left", "lv"), ("right", "rv")):
        value_t = StructType([StructField("key", StringType()), StructField(col, LongType())])
        got = Counter(
            rows.plain(bytes.fromhex(_hex(v)), value_t)
            for (_, _, store), kv in checks.state_at(capsys, root, latest).items()
            if store == f"{side}-keyWithIndexToValue"
            for v in kv.values()
        )
        assert got == Counter(tuple(r) for r in want[f"{side}_rows"]), side
    _ = run_cli


def _hex(rendered: str) -> str:
    import base64

    return base64.b64decode(rendered).hex()
