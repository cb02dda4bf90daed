"""A transformWithStateInPandas checkpoint written by pyspark 4.3.0 (committed, 23 KB), read without Spark.

`fixtures/tws-spark-4.3.0.tar.gz` is `spark_checkpoints.py`'s `tws` query (V2, 2 partitions,
6 data batches + 3 timer batches): ListState `items` (RocksDB merge), ValueState `total`,
MapState `seen`, event-time timers. Its last snapshots hold a list as an SST value plus an
unmerged operand in a newer SST, so both the changelog replay and the snapshot's merge
operator are exercised. A row whose event time is 0 s is late in batch 0 (Spark drops
event time <= watermark), so the lists hold every other row, in arrival order.
"""

from __future__ import annotations

import base64
import json
import tarfile
from collections import defaultdict
from pathlib import Path

import pytest
import spark_checkpoints as sc
from checkpoint_helpers import run_cli

Capsys = pytest.CaptureFixture[str]
FIXTURE = Path(__file__).parent / "fixtures" / "tws-spark-4.3.0.tar.gz"


@pytest.fixture(scope="module")
def tws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tws")
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(root, filter="data")
    return root / "tws"


def _lines(capsys: Capsys, *argv: str) -> tuple[int, list[dict[str, str]], str]:
    code, out, err = run_cli(capsys, *argv)
    return code, [json.loads(line) for line in out.splitlines()], err


def _b(d: dict[str, str], name: str) -> bytes:
    return d[name].encode() if name in d else base64.b64decode(d[f"{name}_b64"])


def _key(stored: bytes) -> str:
    """A grouping-key row `(key string)`: the string sits inline at row offset 16 (it is short)."""
    assert stored[:1] == b"\x00" and len(stored) == 25, stored.hex()
    size = int.from_bytes(stored[9:13], "little")
    return stored[17 : 17 + size].decode()


def _list(value: bytes) -> list[int]:
    """`<int32 LE 17><version 0><8-byte null bits><long>` per element, nothing between."""
    out, pos = [], 0
    while pos < len(value):
        assert value[pos : pos + 4] == (17).to_bytes(4, "little"), value[pos:].hex()
        out.append(int.from_bytes(value[pos + 13 : pos + 21], "little", signed=True))
        pos += 21
    return out


def _expected() -> dict[str, list[int]]:
    want: dict[str, list[int]] = defaultdict(list)
    for b in range(sc.BATCHES):
        for r in sc._rows(b):
            if r["ts"] > 0:
                want[r["key"]].append(r["v"])
    return dict(want)


def test_lists_hold_every_append(tws: Path, capsys: Capsys) -> None:
    """Each list holds exactly the values that arrived for its key, and as many as `$rowCounter_items` says."""
    got: dict[str, list[int]] = {}
    for part in (0, 1):
        at = ("dump", str(tws), "--operator", "0", "--partition", str(part))
        code, items, err = _lines(capsys, *at, "--state-var", "items")
        assert code == 0, err
        code, counters, err = _lines(capsys, *at, "--cf", "$rowCounter_items")
        assert code == 0, err
        count = {_key(_b(d, "key")): int.from_bytes(_b(d, "value")[9:17], "little") for d in counters}
        for d in items:
            key, values = _key(_b(d, "key")), _list(_b(d, "value"))
            assert len(values) == count[key], key
            got[key] = values
    want = _expected()
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in want.items()}


def test_every_committed_batch_rebuilds_and_the_lineage_is_valid(tws: Path, capsys: Capsys) -> None:
    code, out, err = run_cli(capsys, "ls", "--rebuildable", "--json", str(tws))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["rebuildable"] == doc["committed"] == [[0, 8]]
    code, out, err = run_cli(capsys, "verify", "lineage", str(tws))
    assert code == 0 and "VALID" in out, out + err


def test_state_var_names_the_families_there_are(tws: Path, capsys: Capsys) -> None:
    code, out, err = run_cli(capsys, "dump", str(tws), "--state-var", "nope")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "items" in err and "$rowCounter_items" in err, err


def test_a_checkpoint_without_its_merge_operator_is_not_served(tws: Path, capsys: Capsys, tmp_path: Path) -> None:
    """The offset log no longer names mergeOperatorVersion: the lists cannot be rebuilt, so nothing is served."""
    import shutil

    copy = shutil.copytree(tws, tmp_path / "tws")
    for f in (copy / "offsets").iterdir():
        if f.name.isdigit():
            f.write_text(f.read_text().replace("mergeOperatorVersion", "mergeOperatorVersionX"))
    code, out, err = run_cli(capsys, "dump", str(copy), "--operator", "0", "--partition", "0", "--state-var", "items")
    assert code == 2 and out == "", out
    last = err.strip().splitlines()[-1]  # after the store's warnings that each snapshot is unusable
    assert last.startswith("statebed dump: error:") and "mergeOperatorVersion" in last and "Traceback" not in err, err
