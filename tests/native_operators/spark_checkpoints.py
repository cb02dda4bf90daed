"""Small native checkpoints of every stateful operator, written by the installed pyspark in one session.

Each query reads JSON files (one file = one micro-batch: `maxFilesPerTrigger=1` and
`processAllAvailable()` after each file) and runs on Spark's RocksDB provider with changelog
checkpointing. After every batch the generator waits on the checkpoint itself (a snapshot
zip newer than the last one) for at most a few maintenance rounds, so the stores hold both
snapshots and changelogs to replay.

State with a TTL needs `timeMode="ProcessingTime"`, and such a query asks for another (empty)
batch after every batch, so `processAllAvailable()` would never return and `availableNow`
never ends: those queries run on a processing-time trigger instead, each file waited for in
the query's progress (its input rows counted, bounded), and stop after the last file.
Run as a script to keep the checkpoints for inspection:

    python tests/native_operators/spark_checkpoints.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"
SPARK_CONF = {
    "spark.sql.streaming.stateStore.providerClass": PROVIDER,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
    "spark.sql.streaming.stateStore.maintenanceInterval": "1s",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.default.parallelism": "2",
}
BATCHES = 6
TTL_MS = 3_600_000  # one hour: nothing expires while the tests run, so Spark's reader and the dump see the same entries
TIMER_MS = 3_600_000
TTL_TRIGGER = "1 second"


@dataclass
class Checkpoint:
    """One generated checkpoint and how Spark's state data source reads each of its parts."""

    name: str
    path: Path
    fmt: int  # checkpoint format version (1 or 2)
    # (label, reader options) per readable part: operatorId, stateVarName, joinSide, storeName
    reads: list[tuple[str, dict[str, str]]] = field(default_factory=list)


def _rows(batch: int) -> list[dict[str, Any]]:
    """Deterministic rows for `batch`: ids repeat across batches, keys k0..k4, event times in seconds."""
    out = []
    for j in range(7):
        i = (batch * 5 + j * 3) % 17
        out.append({"id": i, "key": f"k{(batch + j) % 5}", "v": batch * 10 + j, "ts": batch * 4 + j % 3, "side": "L" if j % 2 else "R"})
    return out


def _write(directory: Path, batch: int) -> None:
    tmp, final = directory / f".tmp-{batch:04d}.json", directory / f"part-{batch:04d}.json"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in _rows(batch)))
    os.rename(tmp, final)


def _source(spark: Any, directory: Path) -> Any:
    directory.mkdir(parents=True, exist_ok=True)
    schema = "id long, key string, v long, ts long, side string"
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(directory))
    return df.withColumn("event_time", df.ts.cast("timestamp"))


def _run(spark: Any, df: Any, ckpt: Path, inputs: Path, mode: str, fmt: int, trigger: str | None = None) -> None:
    spark.conf.set(FORMAT_CONF, str(fmt))
    w = df.writeStream.format("noop").outputMode(mode).option("checkpointLocation", str(ckpt))
    q = (w if trigger is None else w.trigger(processingTime=trigger)).start()
    try:
        for b in range(BATCHES):
            _write(inputs, b)
            if trigger is None:
                q.processAllAvailable()
            else:
                _await_rows(q, sum(len(_rows(i)) for i in range(b + 1)))
            _await_snapshot(ckpt, q)
    finally:
        q.stop()
    if q.exception() is not None:
        raise RuntimeError(f"{ckpt.name}: {q.exception()}")


def _await_rows(q: Any, rows: int, rounds: int = 1800) -> None:
    """Wait (bounded) until the query's progress counts `rows` input rows: a triggered query
    that always asks for another batch never lets `processAllAvailable()` return."""
    import threading

    done = threading.Event()
    for _ in range(rounds):
        if sum(p["numInputRows"] for p in q.recentProgress) >= rows or not q.isActive:
            return
        done.wait(0.1)
    raise RuntimeError(f"{q.name or q.id}: {rows} input rows not processed in {rounds // 10} s")


def _zips(ckpt: Path) -> int:
    return sum(1 for _ in (ckpt / "state").rglob("*.zip"))


def _await_snapshot(ckpt: Path, q: Any, rounds: int = 30) -> None:
    """Wait (bounded) until maintenance uploaded one more snapshot, so snapshots and changelogs mix."""
    import threading

    before, done = _zips(ckpt), threading.Event()
    for _ in range(rounds):
        if _zips(ckpt) > before or not q.isActive:
            return
        done.wait(0.1)


def _tws_processor(ttl_ms: int | None = None) -> type:
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class Lists(StatefulProcessor):  # type: ignore[misc]
        """ListState (RocksDB merge), ValueState, MapState and a timer per key: an event-time
        timer, or with `ttl_ms` (processing time) every variable with that TTL and a processing-time timer."""

        def init(self, handle: Any) -> None:
            self.handle = handle
            self.items = handle.getListState("items", "v long", ttl_ms)
            self.total = handle.getValueState("total", "t long", ttl_ms)
            self.seen = handle.getMapState("seen", "id long", "n long", ttl_ms)

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            vs = [int(v) for pdf in rows for v in pdf["v"]]
            self.items.appendList([(v,) for v in vs])
            t = (self.total.get() or (0,))[0] + sum(vs)
            self.total.update((t,))
            for v in vs:
                self.seen.updateValue((v % 4,), (v,))
            now = timerValues.getCurrentWatermarkInMs() if ttl_ms is None else timerValues.getCurrentProcessingTimeInMs()
            self.handle.registerTimer(now + TIMER_MS)
            yield pd.DataFrame({"key": [key[0]], "n": [len(vs)]})

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
            yield pd.DataFrame({"key": [key[0]], "n": [-1]})

        def close(self) -> None:
            pass

    return Lists


def _pandas_state(key: Any, pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    import pandas as pd

    n = sum(len(p) for p in pdfs)
    total = (state.get[0] if state.exists else 0) + n
    state.update((total,))
    yield pd.DataFrame({"key": [key[0]], "n": [total]})


class Query(NamedTuple):
    name: str
    fmt: int  # checkpoint format version
    mode: str  # output mode
    build: Callable[[Any], Any]  # source DataFrame -> the stateful query
    reads: list[tuple[str, dict[str, str]]]
    trigger: str | None = None  # a processing-time trigger interval (TTL queries), else processAllAvailable


def _queries() -> list[Query]:
    import pyspark.sql.functions as F

    def dedup(df: Any) -> Any:
        return df.dropDuplicates(["id"])

    def session(df: Any) -> Any:
        return df.withWatermark("event_time", "1 hour").groupBy(F.session_window("event_time", "3 seconds"), "key").count()

    def pandas_state(df: Any) -> Any:
        return df.groupBy("key").applyInPandasWithState(_pandas_state, "key string, n long", "total long", "update", "NoTimeout")

    def tws(df: Any) -> Any:
        return (
            df.withWatermark("event_time", "10 seconds")
            .groupBy("key")
            .transformWithStateInPandas(_tws_processor()(), "key string, n long", "Update", "EventTime")
        )

    def tws_ttl(df: Any) -> Any:
        return df.groupBy("key").transformWithStateInPandas(_tws_processor(TTL_MS)(), "key string, n long", "Update", "ProcessingTime")

    def join(df: Any) -> Any:
        left = df.where("side = 'L'").select("key", F.col("v").alias("lv"))
        right = df.where("side = 'R'").select("key", F.col("v").alias("rv"))
        return left.join(right, "key")

    def multi(df: Any) -> Any:
        return df.dropDuplicates(["id"]).groupBy("key").count()

    tws_vars = [(f"var:{v}", {"stateVarName": v}) for v in ("items", "total", "seen")]
    sides = [(f"side:{s}", {"joinSide": s}) for s in ("left", "right")]
    return [
        Query("dedup", 2, "append", dedup, [("op0", {})]),
        Query("dedup_v1", 1, "append", dedup, [("op0", {})]),
        Query("session", 2, "append", session, [("op0", {})]),
        Query("pandas_state", 2, "update", pandas_state, [("op0", {})]),
        Query("tws", 2, "update", tws, tws_vars),
        Query("tws_v1", 1, "update", tws, tws_vars),
        Query("tws_ttl", 2, "update", tws_ttl, tws_vars, TTL_TRIGGER),
        Query("tws_ttl_v1", 1, "update", tws_ttl, tws_vars, TTL_TRIGGER),
        Query("join", 2, "append", join, sides),
        Query("multi", 2, "update", multi, [("op0", {"operatorId": "0"}), ("op1", {"operatorId": "1"})]),
    ]


def generate(spark: Any, root: Path, only: set[str] | None = None) -> dict[str, Checkpoint]:
    """Write every checkpoint under `root/<name>` (inputs under `root/_input`); returns them by name."""
    out = {}
    for q in _queries():
        if only is not None and q.name not in only:
            continue
        ckpt, inputs = root / q.name, root / "_input" / q.name
        _run(spark, q.build(_source(spark, inputs)), ckpt, inputs, q.mode, q.fmt, q.trigger)
        out[q.name] = Checkpoint(q.name, ckpt, q.fmt, q.reads)
    return out


def session(scratch: Path, master: str = "local[2]", extra: dict[str, str] | None = None) -> Any:
    """The one Spark session (local[2]) every checkpoint is written and read with; `extra` confs
    (the JVM plug-in's) and another `master` (local[2,2]: a failed task is retried) for a fault."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master(master)
        .appName("statebed-native-operators")
        .config("spark.local.dir", str(scratch / "local"))
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch / 'derby'}")
    )
    for k, v in {**SPARK_CONF, **(extra or {})}.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.addPyFile(__file__)  # Python workers unpickle the processors defined here
    return spark


def read_state(spark: Any, ckpt: Checkpoint, options: dict[str, str], batch: int | None = None) -> Any:
    """Spark's own reading of one part of `ckpt` (the state data source), as a DataFrame."""
    spark.conf.set(FORMAT_CONF, str(ckpt.fmt))
    _ = spark.streams.active  # the StateStoreCoordinator must exist before RocksDB state is read
    r = spark.read.format("statestore")
    for k, v in options.items():
        r = r.option(k, v)
    if batch is not None:
        r = r.option("batchId", str(batch))
    return r.load(str(ckpt.path))


if __name__ == "__main__":
    target = Path(sys.argv[1]).resolve()
    target.mkdir(parents=True, exist_ok=False)
    with tempfile.TemporaryDirectory(prefix="statebed-native-ops-") as tmp:
        os.chdir(tmp)
        s = session(Path(tmp))
        try:
            made = generate(s, target, set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None)
            for c in made.values():
                for label, opts in c.reads:
                    print(c.name, label, read_state(s, c, opts).count(), flush=True)
        finally:
            s.stop()
