"""The JVM failpoint plug-in inside a real Spark 4.3 streaming query: native RocksDB, checkpoint
format V1, a count aggregation over four file batches, local[2] with task retries. One session
(the plug-in loaded, following one control file) serves the three cases.

Run under `flock /tmp/statebed-spark.lock`."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from statebed_base import procfs
from statebed_job import jvm_plugin
from statebed_store.failpoint_control import Control, firing_file

pytestmark = pytest.mark.slow

MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
SPARK_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
BATCHES = 4
KEYS = 40


@dataclass
class Bed:
    spark: Any
    root: Path
    control: Control
    inputs: Path
    expected: dict[int, int]
    jvm_pid: int

    def run(self, name: str) -> Path:
        """Run the query to the end of its input (one file per batch); returns its checkpoint."""
        ckpt = self.root / name
        df = self.spark.readStream.schema("k INT").option("maxFilesPerTrigger", 1).json(str(self.inputs))
        query = (
            df.groupBy("k")
            .count()
            .writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None
        return ckpt

    def state(self, ckpt: Path) -> dict[int, int]:
        """The committed state as Spark's own state data source reads it."""
        rows = self.spark.read.format("statestore").load(str(ckpt)).collect()
        return {r["key"]["k"]: r["value"]["count"] for r in rows}

    def firings(self, point: str) -> list[dict[str, Any]]:
        return [r for r in self.control.firings() if r["failpoint"] == point]


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    root = tmp_path_factory.mktemp("jvm-spark")
    inputs = root / "input"
    inputs.mkdir()
    expected: Counter[int] = Counter()
    for b in range(BATCHES):
        keys = [(b * 7 + i * 3) % KEYS for i in range(60)]
        expected.update(keys)
        (inputs / f"batch-{b:02d}.json").write_text("".join(json.dumps({"k": k}) + "\n" for k in keys))
        os.utime(inputs / f"batch-{b:02d}.json", (1_000_000 + b, 1_000_000 + b))  # the file source orders by mtime
    control = Control(root / "failpoints" / "control.json")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    conf = {
        "spark.master": "local[2,3]",  # two cores, a failed task is retried (up to 3 attempts)
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.local.dir": str(root / "spark-local"),
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.stateStore.checkpointFormatVersion": "1",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",  # snapshots (zip + SSTs) from the maintenance thread
        "spark.sql.streaming.stateStore.maintenanceInterval": "1s",
        **jvm_plugin.plugin_confs(control.path),
    }
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    try:
        yield Bed(spark, root, control, inputs, dict(expected), pid)
    finally:
        spark.stop()


def wait_for(bed: Bed, point: str, action: str) -> dict[str, Any]:
    """The first record of `point` with `action`, waiting for it to be written (bounded)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = [r for r in bed.firings(point) if r["action"] == action]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no {action} record of {point}: {bed.firings(point)}")


def test_unarmed_plugin_is_a_pass_through(bed: Bed) -> None:
    bed.spark.conf.set(MANAGER_CONF, SPARK_MANAGER)
    bed.spark.conf.set("fs.file.impl", "org.apache.hadoop.fs.LocalFileSystem")
    without = bed.state(bed.run("without-plugin"))
    bed.spark.conf.set(MANAGER_CONF, jvm_plugin.MANAGER_CLASS)
    bed.spark.conf.set("fs.file.impl", jvm_plugin.FILESYSTEM_CLASS)
    manager = bed.spark.sparkContext._jvm.statebed.FailpointCheckpointFileManager
    before = manager.created()
    with_plugin = bed.state(bed.run("with-plugin"))
    assert manager.created() - before >= 2 * BATCHES * 2  # offsets, commits and a changelog per partition went through it
    assert with_plugin == without == bed.expected
    assert bed.control.firings() == []  # unarmed: nothing fired, nothing recorded


def test_error_on_the_changelog_fires_and_is_recorded(bed: Bed) -> None:
    """Also an SST copy passes the plug-in's FileSystem: a 1 ms delay on it fires and is recorded."""
    bed.control.arm("native.changelog.upload=[batch=1,partition=0]1*error;native.sst.upload=1*delay(1)")
    try:
        ckpt = bed.run("changelog-error")
        sst = wait_for(bed, "native.sst.upload", "delay(1)")  # the maintenance thread uploads snapshots
    finally:
        bed.control.disarm()
    assert "/SSTs/" in sst["file"] and sst["file"].endswith(".sst") and sst["task"]["partition"] in (0, 1)
    local = Path(sst["file"].removeprefix("file:"))
    assert local.is_relative_to(bed.root) and local.is_file()  # delayed, then copied
    fired = bed.firings("native.changelog.upload")
    assert len(fired) == 1, fired
    rec = fired[0]
    assert rec["action"] == "error" and rec["task"] == {"batch": 1, "partition": 0, "attempt": 0}
    assert rec["file"].endswith(f"{ckpt.name}/state/0/0/2.changelog") and rec["pid"] == bed.jvm_pid
    assert rec["spec"] == "[batch=1,partition=0]1*error" and rec["control_version"] >= 1
    [log] = bed.control.directory.glob(f"fired-*-{bed.jvm_pid}-*.jsonl")  # one file per JVM, named by host, pid and start
    started = procfs.stat(bed.jvm_pid)
    assert started is not None and rec["started"] == started[2]  # Python's unit: clock ticks since boot
    assert log.name == firing_file(rec["host"], rec["pid"], rec["started"])  # the JVM names it as Python does
    assert bed.state(ckpt) == bed.expected  # the retried attempt healed the batch


def test_delayed_close_lands_a_v1_changelog_after_newer_commits(bed: Bed) -> None:
    """The zombie: attempt 0 of batch 1 loses its close (the task fails, attempt 1 writes
    2.changelog and the query moves on); released after the last commit, attempt 0's rename
    lands and overwrites the file V1 reads."""
    bed.control.arm("native.changelog.zombie=[batch=1,partition=0,attempt=0]1*hold(300000)")
    try:
        ckpt = bed.run("zombie")
        start = wait_for(bed, "native.changelog.zombie", "hold(300000)")
        assert start["task"] == {"batch": 1, "partition": 0, "attempt": 0}
        changelog = ckpt / "state" / "0" / "0" / "2.changelog"
        newest_commit = ckpt / "commits" / str(BATCHES - 1)
        retry = changelog.stat()  # attempt 1's file, in place before the query went on
        assert newest_commit.stat().st_mtime_ns >= retry.st_mtime_ns
        assert [r["action"] for r in bed.firings("native.changelog.zombie")] == ["hold(300000)", "zombie-parked"]  # still held
        bed.control.release("native.changelog.zombie")
        landed = wait_for(bed, "native.changelog.zombie", "zombie-landed")
    finally:
        bed.control.disarm()
    assert landed["after"] == "released" and landed["file"] == start["file"]
    late = changelog.stat()
    assert late.st_ino != retry.st_ino  # renamed over attempt 1's file
    assert late.st_mtime_ns > newest_commit.stat().st_mtime_ns  # after every newer commit
    records = bed.firings("native.changelog.zombie")
    assert [r["action"] for r in records] == ["hold(300000)", "zombie-parked", "released", "zombie-landed"]
    assert Path(records[1]["copy"]).read_bytes() == changelog.read_bytes()  # the parked copy is the whole file that landed


def test_a_state_files_delete_passes_the_cleanup_point_and_a_logs_purge_does_not(bed: Bed) -> None:
    """The manager Spark's maintenance deletes through (the JVM's own instance, called directly, so
    each action is seen on one file): drop keeps the file, error fails the delete and keeps it,
    delay deletes it after the record; the driver's log purge passes through unrecorded."""
    jvm = bed.spark.sparkContext._jvm
    store = bed.root / "direct" / "state" / "0" / "1"
    store.mkdir(parents=True)
    commits = bed.root / "direct" / "commits"
    commits.mkdir()
    conf = bed.spark.sparkContext._jsc.hadoopConfiguration()
    manager = jvm.statebed.FailpointCheckpointFileManager(jvm.org.apache.hadoop.fs.Path(f"file:{bed.root / 'direct'}"), conf)

    def delete(path: Path) -> None:
        manager.delete(jvm.org.apache.hadoop.fs.Path(f"file:{path}"))

    changelog, entry = store / "3.changelog", commits / "2"
    for f in (changelog, entry):
        f.write_bytes(b"x")
    bed.control.arm("native.cleanup.delete=1*drop->1*error->delay(1)")
    try:
        deadline = time.monotonic() + 60
        while not jvm.statebed.Failpoints.armed("native.cleanup.delete"):  # the JVM re-reads the control file every 100 ms
            assert time.monotonic() < deadline, "the JVM never saw the armed point"
            time.sleep(0.05)
        delete(changelog)
        assert changelog.is_file()  # dropped: the file stays
        with pytest.raises(Exception, match="failpoint native.cleanup.delete fired"):
            delete(changelog)
        assert changelog.is_file()  # the delete failed
        delete(changelog)
        delete(entry)
    finally:
        bed.control.disarm()
    assert not changelog.exists() and not entry.exists()
    records = bed.firings("native.cleanup.delete")
    assert [r["action"] for r in records] == ["drop", "error", "delay(1)"], records  # the log's purge: no record
    assert all(r["file"] == f"file:{changelog}" and r["task"] == {"batch": 2, "partition": 1} for r in records), records
