"""`verify lineage` reads every file a restart reads: Spark 4.3's own checkpoints, damaged one file
at a time as `benchmarks/restart_oracle.py` measured Spark to refuse, resume wrong or resume right."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from native_fixtures import extract_native, extract_one

from statebed_store.checksum import hadoop_crc
from statebed_store.naming import hadoop_crc_name
from statebed_store.storage import open_storage
from statebed_verify import verify_lineage
from statebed_verify.restart_files import DAMAGED, INCONSISTENT, MISSING


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("native")


@pytest.fixture(scope="module")
def spark43(fixtures: Path) -> Path:
    root: Path = extract_native(fixtures)["4.3.0"]
    return root


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    return dst


def _judge(ckpt: Path) -> dict[str, Any]:
    return verify_lineage(open_storage(str(ckpt))).to_json()


def _reseal(p: Path) -> None:
    crc = p.parent / hadoop_crc_name(p.name)
    if crc.exists():
        crc.write_bytes(hadoop_crc(p.read_bytes()))


def _edit(p: Path, change: Callable[[str], str]) -> None:
    p.write_text(change(p.read_text()))
    _reseal(p)


def _conf(key: str, value: str) -> Callable[[str], str]:
    def change(text: str) -> str:
        lines = text.split("\n")
        meta = json.loads(lines[1])
        assert key in meta["conf"]
        meta["conf"][key] = value
        lines[1] = json.dumps(meta)
        return "\n".join(lines)

    return change


def _kinds(report: dict[str, Any]) -> set[str]:
    return {a["kind"] for a in report["anomalies"]}


def test_spark_checkpoints_as_written_are_resumable(spark43: Path) -> None:
    for query in ("agg", "dedup_agg", "join"):
        report = _judge(spark43 / query)
        assert report["valid"] is True and report["resumable"] is True, (query, report["resumable_reasons"])
        assert report["resumable_reasons"] == []


def test_a_store_directory_without_query_files_is_unknown_and_its_verdict_unchanged(spark43: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "store"
    for part in ("commits", "state"):
        shutil.copytree(spark43 / "agg" / part, ckpt / part)
    report = _judge(ckpt)
    assert report["valid"] is True and report["resumable"] == "unknown"
    assert "no query files" in report["resumable_reasons"][0]


@pytest.mark.parametrize(
    ("damage", "kind"),
    [
        (lambda c: (c / "metadata").unlink(), MISSING),
        (lambda c: _edit(c / "metadata", lambda t: t.replace('"id":"', '"id":"g')), DAMAGED),
        (lambda c: (c / "offsets" / "9").write_text('v1\n{"batchWatermarkMs":0,'), DAMAGED),
        (lambda c: (c / "offsets" / "8").unlink(), MISSING),
        (lambda c: (c / "offsets" / "9").unlink(), INCONSISTENT),  # the commit log is then ahead of it
        (lambda c: _edit(c / "offsets" / "9", lambda t: "\n".join(t.split("\n")[:2])), INCONSISTENT),
        (lambda c: _edit(c / "offsets" / "9", _conf("spark.sql.shuffle.partitions", "2")), INCONSISTENT),
        (lambda c: _edit(c / "offsets" / "9", _conf("spark.sql.streaming.stateStore.compression.codec", "zstd")), INCONSISTENT),
        (lambda c: (c / "sources" / "0" / "9.compact").unlink(), MISSING),
        (lambda c: _edit(c / "sources" / "0" / "9.compact", lambda t: "\n".join(t.split("\n")[:-1])), DAMAGED),
        (
            lambda c: _edit(c / "state" / "0" / "_metadata" / "metadata", lambda t: t.replace("stateStoreSave", "stateStoreRestore")),
            INCONSISTENT,
        ),
        (lambda c: (c / "state" / "0" / "0" / "_metadata" / "schema").write_bytes(b"\x00\x02v2\x00\x00"), DAMAGED),
    ],
    ids=[
        "metadata-deleted",
        "metadata-id-no-uuid",
        "latest-offsets-cut",
        "previous-offsets-deleted",
        "latest-offsets-deleted",
        "latest-offsets-source-lines-dropped",
        "shuffle-partitions-changed",
        "codec-changed",
        "compaction-deleted",
        "compaction-line-dropped",
        "operator-renamed-to-a-reader",
        "schema-cut",
    ],
)
def test_a_file_spark_refuses_or_resumes_wrong_on_is_an_anomaly(
    spark43: Path, tmp_path: Path, damage: Callable[[Path], None], kind: str
) -> None:
    ckpt = _copy(spark43 / "agg", tmp_path)
    damage(ckpt)
    report = _judge(ckpt)
    assert report["resumable"] is False and report["valid"] is False
    assert kind in _kinds(report), report["anomalies"]
    assert report["resumable_reasons"] and all(isinstance(r, str) for r in report["resumable_reasons"])


@pytest.mark.parametrize(
    "damage",
    [
        lambda c: (c / "offsets" / "0").unlink(),
        lambda c: (c / "commits" / "9").unlink(),
        lambda c: (c / "sources" / "0" / "3").unlink(),
        lambda c: _edit(c / "offsets" / "9", _conf("spark.sql.streaming.stateStore.rocksdb.formatVersion", "4")),
        lambda c: _edit(c / "offsets" / "8", _conf("spark.sql.shuffle.partitions", "5")),
        lambda c: (c / "state" / "0" / "_metadata" / "metadata").write_text(""),
        lambda c: _edit(c / "sources" / "0" / "8", lambda t: t.replace('"batchId":8', '"batchId":7')),
    ],
    ids=[
        "first-offsets-deleted",
        "latest-commit-deleted",
        "source-entry-below-compaction-deleted",
        "rocksdb-format-version",
        "previous-entry-partitions",
        "operator-metadata-v1-emptied",
        "source-entry-batch-id",
    ],
)
def test_a_file_spark_tolerates_is_a_note(spark43: Path, tmp_path: Path, damage: Callable[[Path], None]) -> None:
    ckpt = _copy(spark43 / "agg", tmp_path)
    damage(ckpt)
    report = _judge(ckpt)
    assert report["resumable"] is True and report["valid"] is True, report["resumable_reasons"]
    assert not _kinds(report) & {MISSING, DAMAGED, INCONSISTENT}


def test_a_crc_that_does_not_match_is_unknown_never_valid(spark43: Path, tmp_path: Path) -> None:
    ckpt = _copy(spark43 / "agg", tmp_path)
    crc = ckpt / "offsets" / hadoop_crc_name("9")
    data = bytearray(crc.read_bytes())
    data[-1] ^= 1
    crc.write_bytes(bytes(data))
    report = _judge(ckpt)
    assert report["resumable"] == "unknown" and report["valid"] == "unknown"
    assert any(".crc does not match" in r for r in report["resumable_reasons"])


def test_an_input_file_the_source_logged_that_is_gone_is_unknown(spark43: Path, tmp_path: Path) -> None:
    """The source log's paths point here; one logged file is missing from its directory (a changed
    path in the entry, or input deleted): Spark would read the real file again."""
    ckpt = _copy(spark43 / "agg", tmp_path)
    inputs = tmp_path / "input"
    inputs.mkdir()
    for entry in sorted((ckpt / "sources" / "0").iterdir()):
        if entry.name.startswith("."):
            continue
        text = entry.read_text()
        for line in text.split("\n")[1:]:
            if line.strip():
                name = json.loads(line)["path"].rsplit("/", 1)[1]
                (inputs / name).write_text("{}\n")
                text = text.replace(json.loads(line)["path"], f"file://{inputs}/{name}")
        entry.write_text(text)
        _reseal(entry)
    assert _judge(ckpt)["resumable"] is True
    (inputs / "part-0009.json").unlink()
    report = _judge(ckpt)
    assert report["resumable"] == "unknown" and report["valid"] == "unknown"
    assert any("not found" in r for r in report["resumable_reasons"])


def test_transform_with_state_operator_metadata_v2_must_parse(tmp_path: Path) -> None:
    ckpt = _copy(extract_one("spark-4.3.0-repartitioned-tws", tmp_path / "fx") / "tws", tmp_path)
    assert _judge(ckpt)["resumable"] is True
    latest = max((p for p in (ckpt / "state" / "0" / "_metadata" / "v2").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    latest.write_text("")
    report = _judge(ckpt)
    assert report["resumable"] is False and DAMAGED in _kinds(report)
