"""The offset log's conf map, read once for every conf a reader needs (`statebed_store.offset_conf`),
and the row checksums it records followed: a checkpoint that records them but whose rows carry
none serves nothing (its rows do not verify), never rows read as if the conf were not there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from statebed_base.errors import CorruptFileError
from statebed_store import StoreId, open_storage
from statebed_store.checksum import hadoop_crc
from statebed_store.inspection import committed_ref, dump_state
from statebed_store.merge import checkpoint_merge_operator
from statebed_store.naming import hadoop_crc_name
from statebed_store.offset_conf import ROW_CHECKSUM_CONF, offset_conf
from statebed_store.row_checksum import RowChecksumError
from statebed_verify import verify_lineage


def _with_conf(native: dict[str, Path], tmp_path: Path, **conf: str) -> Path:
    """Spark 4.3.0's agg checkpoint with `conf` added to its newest offset log entry."""
    ckpt = shutil.copytree(native["4.3.0"] / "agg", tmp_path / "agg")
    newest = max((p for p in (ckpt / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    lines = newest.read_text().splitlines()
    meta = json.loads(lines[1])
    meta["conf"].update(conf)
    lines[1] = json.dumps(meta)
    newest.write_text("\n".join(lines) + "\n")
    crc = newest.parent / hadoop_crc_name(newest.name)
    crc.write_bytes(hadoop_crc(newest.read_bytes()))  # as a tool that edits it does (verify lineage checks it)
    return ckpt


def test_the_newest_entrys_conf_is_read_and_names_its_file(native: dict[str, Path], tmp_path: Path) -> None:
    ckpt = _with_conf(native, tmp_path)
    found = offset_conf(open_storage(ckpt))
    newest = max(int(p.name) for p in (ckpt / "offsets").iterdir() if p.name.isdigit())
    assert found.source == str(ckpt / "offsets" / str(newest))
    assert found.conf["spark.sql.shuffle.partitions"] == "3"
    assert checkpoint_merge_operator(open_storage(ckpt)).source == found.source
    assert offset_conf(open_storage(tmp_path / "empty")).conf == {}


def test_a_second_line_that_is_no_metadata_is_named(native: dict[str, Path], tmp_path: Path) -> None:
    ckpt = _with_conf(native, tmp_path)
    newest = max((p for p in (ckpt / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    newest.write_text("v1\n{not json\n")
    with pytest.raises(CorruptFileError, match="second line is not the offset log's JSON metadata"):
        offset_conf(open_storage(ckpt))


def test_rows_that_do_not_carry_the_recorded_checksums_are_not_served(native: dict[str, Path], tmp_path: Path) -> None:
    ckpt = _with_conf(native, tmp_path, **{ROW_CHECKSUM_CONF: "true"})
    storage = open_storage(ckpt)
    store = StoreId(0, 0)
    with pytest.raises(RowChecksumError, match="row checksum"):
        list(dump_state(storage, store, committed_ref(storage, store)))
    report = verify_lineage(storage)
    assert report.valid is False and "unreadable-file" in {a.kind for a in report.anomalies}


def test_rows_without_checksums_read_as_before(native: dict[str, Path], tmp_path: Path) -> None:
    ckpt = _with_conf(native, tmp_path, **{ROW_CHECKSUM_CONF: "false"})
    storage = open_storage(ckpt)
    assert list(dump_state(storage, StoreId(0, 0), committed_ref(storage, StoreId(0, 0))))
    assert verify_lineage(storage).valid is True
