"""Checkpoints written by Spark 4.3.0 with row checksums on (tests/fixtures/native/
spark-4.3.0-rowchecksum.tar.gz: make_native_fixtures.py with `rowChecksum.enabled=true`): statebed
reads them, every row verified, and a value changed inside a changelog whose file-level checks
were all redone (`corrupt-row`'s damage) is an anomaly naming the file and the key. Without row
checksums the same change passes every file check and reads as a wrong value: the positive
control of what the feature adds."""

from __future__ import annotations

import shutil
import tarfile
from collections import Counter
from pathlib import Path

import pytest
from native_fixtures import NATIVE_DIR, decode_long, decode_string_key, expected

from statebed_chaos.faults.base import FaultSpec, Trigger
from statebed_chaos.faults.corrupt_row import CorruptRow, changed_changelog, target_changelog
from statebed_store import StoreId, open_storage
from statebed_store.changelog import parse_changelog
from statebed_store.inspection import committed_ref, discover_stores, dump_state
from statebed_store.row_checksum import RowChecksumError, checkpoint_row_checksums
from statebed_verify import verify_lineage

ROWS = NATIVE_DIR / "spark-4.3.0-rowchecksum.tar.gz"


@pytest.fixture
def rows(tmp_path: Path) -> Path:
    with tarfile.open(ROWS) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "spark-4.3.0-rowchecksum"


def _counts(ckpt: Path, operator: int = 0) -> Counter[str]:
    storage = open_storage(ckpt)
    got: Counter[str] = Counter()
    for store in discover_stores(storage):
        if store.operator == operator:
            got.update({decode_string_key(k): decode_long(v) for k, v in dump_state(storage, store, committed_ref(storage, store))})
    return got


def test_the_checkpoint_records_row_checksums_and_statebed_reads_them(rows: Path) -> None:
    framing = checkpoint_row_checksums(open_storage(rows / "agg"))
    assert framing is not None and framing.delimiter == b""  # mergeOperatorVersion 2
    assert dict(_counts(rows / "agg")) == expected(rows, "agg")["counts"]
    assert dict(_counts(rows / "dedup_agg")) == expected(rows, "dedup_agg")["counts"]
    storage = open_storage(rows / "join")
    per_key: Counter[str] = Counter()
    for store in discover_stores(storage):
        if store.store_name == "left-keyToNumValues":
            per_key.update({decode_string_key(k): decode_long(v) for k, v in dump_state(storage, store, committed_ref(storage, store))})
    assert dict(per_key) == expected(rows, "join")["left_rows_per_key"]


@pytest.mark.parametrize("query", ["agg", "dedup_agg", "join"])
def test_the_lineage_of_a_checkpoint_with_row_checksums_is_judged(rows: Path, query: str) -> None:
    report = verify_lineage(open_storage(rows / query))
    assert report.valid is True, report.anomalies


def _replaying(ckpt: Path) -> Path:
    """`ckpt` with partition 0's snapshots removed (no damage in V2), so that its load replays
    every changelog: Spark's maintenance uploaded a snapshot of each version of these fixtures."""
    for f in (ckpt / "state" / "0" / "0").glob("*.zip*"):
        f.unlink()
    for f in (ckpt / "state" / "0" / "0").glob(".*.zip.crc*"):
        f.unlink()
    return ckpt


def _change_a_row(ckpt: Path, framed: bool) -> tuple[str, str]:
    """`corrupt-row`'s damage on partition 0's newest replayed changelog: (its path, the changed key hex)."""
    storage = open_storage(_replaying(ckpt))
    path = target_changelog(storage, 0)
    fault = _fault()
    after, facts = fault.damage_file(storage, path, storage.read(path))
    storage.write(path, after)
    assert facts["row_checksums"] is framed
    return path, facts["key"]


def _fault() -> CorruptRow:
    return CorruptRow(FaultSpec(id="f1", kind="corrupt-row", at=Trigger(batch=3), params={}))


def test_a_changed_row_is_an_anomaly_naming_the_file_and_the_key(rows: Path) -> None:
    path, key = _change_a_row(rows / "agg", framed=True)
    storage = open_storage(rows / "agg")
    store = StoreId(0, 0)
    with pytest.raises(RowChecksumError, match="row checksum mismatch for key 0x" + key) as e:
        list(dump_state(storage, store, committed_ref(storage, store)))
    assert e.value.file == storage.display(path)
    report = verify_lineage(storage)
    assert report.valid is False, report
    assert [(a.kind, a.files) for a in report.anomalies] == [("unreadable-file", [storage.display(path)])]
    assert report.anomalies[0].detail.startswith("row checksum mismatch for key 0x" + key)


def test_without_row_checksums_the_same_change_passes_every_file_check(native: dict[str, Path], tmp_path: Path) -> None:
    """The positive control: Spark 4.3.0's checkpoint without the feature, changed the same way,
    reads as a wrong count and its lineage holds; only an oracle of the state can tell."""
    ckpt = shutil.copytree(native["4.3.0"] / "agg", tmp_path / "agg")
    _change_a_row(ckpt, framed=False)
    assert verify_lineage(open_storage(ckpt)).valid is True
    assert dict(_counts(ckpt)) != expected(native["4.3.0"], "agg")["counts"]


def test_the_change_is_one_byte_of_one_value_in_a_file_that_still_parses(rows: Path) -> None:
    storage = open_storage(_replaying(rows / "agg"))
    path = target_changelog(storage, 0)
    data = storage.read(path)
    after, facts = changed_changelog(data, file=path, framed=True)
    before_rows, after_rows = parse_changelog(data, file=path).columns(), parse_changelog(after, file=path).columns()
    assert before_rows[:2] == after_rows[:2]  # ops and keys
    changed = [(k, a, b) for k, a, b in zip(before_rows[1], before_rows[2], after_rows[2], strict=True) if a != b]
    assert len(changed) == 1 and changed[0][0].hex() == facts["key"]
    _, a, b = changed[0]
    assert a is not None and b is not None
    assert [i for i in range(len(a)) if a[i] != b[i]] == [facts["value_byte"]] == [len(a) - 8]
