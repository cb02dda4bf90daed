"""Spark's own restart as the judge's oracle: a checkpoint judged valid is one Spark resumes right.

For each workload (an aggregation, a deduplication feeding an aggregation, a stream-stream
join, a transformWithState running count) Spark 4.3 writes a fresh native checkpoint
(RocksDB store, checkpoint format V2, changelog checkpointing, 3 partitions), one input file
per source per batch, 7 batches, the file source's log compacted every 3 entries. Then, one
case at a time, one file a restart reads is damaged on a copy (deleted, cut short, emptied,
a byte flipped, a conf or an id rewritten with its Hadoop `.crc` resealed, a `.crc` itself
damaged, ...), the copy is kept as it was damaged, and Spark restarts the query on a second
copy, put where the base was written (a checkpoint's files name it by absolute path), over one
more input file per source (`Trigger.AvailableNow`, a `foreachBatch` sink).
Spark's outcome is classified against an oracle computed from the input files alone:

* `refused`: the restart raised (Spark's error class or first line recorded);
* `resumed-wrong`: it ran, but a restarted batch read other input rows than its own input file
  holds (Spark's progress: a file read twice or skipped, whatever the query makes of it), or the
  sink's output over all batches (each batch's last attempt) or the state Spark's `statestore`
  reader reads back is not what the input files make (where the reader refuses a damaged
  operator metadata or schema file, which a restart does not read, the state is read with the
  base run's copies of those files);
* `resumed-right`: output and state are the oracle's.

Then `verify_lineage` judges each kept damaged copy in-process. A **false valid** is a verdict
`valid` (or `resumable: true`) where Spark did not resume right; a **false alarm** a verdict
`invalid` (or `resumable: false`) where it did. Both must be 0. `unknown` counts as neither.

    python benchmarks/restart_oracle.py [--workdir DIR] [--keep] [--json] [--workloads a,b]
                                        [--judge-only DIR] [--quick]

`--judge-only DIR` judges again the cases a previous run kept in DIR (`--keep`) without
starting Spark: Spark's outcomes are read from DIR/cases.jsonl. `--quick`: the aggregation only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statebed_store.checksum import hadoop_crc
from statebed_store.naming import hadoop_crc_name
from statebed_store.storage import open_storage
from statebed_verify import verify_lineage

PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PARTITIONS = 3
BATCHES = 7
SPARK_CONF = {
    "spark.sql.streaming.stateStore.providerClass": PROVIDER,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
    "spark.sql.shuffle.partitions": str(PARTITIONS),
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
    "spark.sql.streaming.fileSource.log.compactInterval": "3",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.default.parallelism": "2",
}
WORKLOADS = ("agg", "dedup", "join", "tws")
SEED = 20261202


# -- input and oracle ------------------------------------------------------------------------
def _rows(workload: str, source: str, batch: int) -> list[dict[str, Any]]:
    rnd = random.Random(f"{SEED}-{workload}-{source}-{batch}")
    if workload == "dedup":
        return [{"id": (i := rnd.randint(0, 24)), "key": f"k{i % 5}"} for _ in range(rnd.randint(3, 6))]
    if workload == "join":
        col = "lv" if source == "left" else "rv"
        return [{"key": f"k{rnd.randint(0, 4)}", col: batch * 10 + j} for j in range(rnd.randint(1, 3))]
    return [{"key": f"k{rnd.randint(0, 5)}"} for _ in range(rnd.randint(3, 6))]


def _sources(workload: str) -> tuple[str, ...]:
    return ("left", "right") if workload == "join" else ("input",)


def _all_rows(workload: str, source: str, batches: int) -> list[dict[str, Any]]:
    return [r for b in range(batches) for r in _rows(workload, source, b)]


def oracle(workload: str, batches: int) -> dict[str, Any]:
    """What the input files of batches 0..batches-1 make: the sink's rows and the state's."""
    if workload in ("agg", "tws"):
        counts = Counter(r["key"] for r in _all_rows(workload, "input", batches))
        return {"output": dict(sorted(counts.items())), "state": dict(sorted(counts.items()))}
    if workload == "dedup":
        seen: dict[int, str] = {}
        for r in _all_rows(workload, "input", batches):
            seen.setdefault(r["id"], r["key"])
        counts = Counter(seen.values())
        return {"output": dict(sorted(counts.items())), "state": {"ids": sorted(seen), "counts": dict(sorted(counts.items()))}}
    left, right = _all_rows(workload, "left", batches), _all_rows(workload, "right", batches)
    pairs = sorted([lr["key"], lr["lv"], rr["rv"]] for lr in left for rr in right if lr["key"] == rr["key"])
    return {
        "output": pairs,
        "state": {"left": sorted([r["key"], r["lv"]] for r in left), "right": sorted([r["key"], r["rv"]] for r in right)},
    }


def write_input(root: Path, workload: str, batch: int) -> None:
    for source in _sources(workload):
        d = root / workload / source
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".tmp-{batch:04d}.json"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in _rows(workload, source, batch)))
        os.rename(tmp, d / f"part-{batch:04d}.json")


# -- the queries -------------------------------------------------------------------------------
def _stream(spark: Any, root: Path, workload: str, source: str) -> Any:
    schema = {"dedup": "id long, key string", "join": f"key string, {'lv' if source == 'left' else 'rv'} long"}.get(workload, "key string")
    return spark.readStream.schema(schema).json(str(root / workload / source))


def _tws_processor() -> Any:
    from pyspark.sql import Row
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class RunningCount(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", StructType([StructField("count", LongType(), True)]))

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            n = sum(1 for _ in rows)
            total = (self.count.get()[0] if self.count.exists() else 0) + n
            self.count.update((total,))
            yield Row(key=key[0], count=total)

        def close(self) -> None:
            pass

    return RunningCount()


def query(spark: Any, root: Path, workload: str) -> tuple[Any, str]:
    """The workload's streaming DataFrame and its output mode."""
    from pyspark.sql import functions as F

    if workload == "agg":
        return _stream(spark, root, workload, "input").groupBy("key").agg(F.count(F.lit(1)).alias("count")), "update"
    if workload == "dedup":
        deduped = _stream(spark, root, workload, "input").dropDuplicates(["id"])
        return deduped.groupBy("key").agg(F.count(F.lit(1)).alias("count")), "update"
    if workload == "join":
        return _stream(spark, root, workload, "left").join(_stream(spark, root, workload, "right"), "key"), "append"
    df = _stream(spark, root, workload, "input").groupBy("key")
    return df.transformWithState(_tws_processor(), "key string, count long", "Update", "None"), "update"


def run_once(
    spark: Any,
    root: Path,
    workload: str,
    ckpt: Path,
    outputs: dict[int, list[Any]],
    rows: dict[int, int] | None = None,
    timeout_s: float = 300,
) -> str | None:
    """One `AvailableNow` run of the workload on `ckpt`; each batch's rows into `outputs` (a rerun
    replaces its batch) and, into `rows`, each batch's input row count as Spark's progress says.
    The error's first line when the query failed, else None."""
    df, mode = query(spark, root, workload)

    def sink(batch: Any, batch_id: int) -> None:
        outputs[int(batch_id)] = [r.asDict() for r in batch.collect()]

    try:  # Spark may refuse at start() already (a missing `metadata`) or while it runs
        q = df.writeStream.outputMode(mode).option("checkpointLocation", str(ckpt)).foreachBatch(sink).trigger(availableNow=True).start()
        if not q.awaitTermination(timeout_s):
            q.stop()
            return f"the restart did not end within {timeout_s:.0f} s"
    except Exception as e:  # StreamingQueryException: Spark refused or failed the restart
        return _first_line(e)
    err = q.exception()
    if rows is not None:
        for p in q.recentProgress:
            rows[int(p["batchId"])] = int(p["numInputRows"])
    return None if err is None else _first_line(err)


def stop_state_stores(spark: Any) -> None:
    """Unload every state store provider and stop their maintenance (which uploads snapshots and
    deletes old files in the background after a query ends): `StateStore.stop()` waits for it."""
    spark._jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()


def input_rows(workload: str, batch: int) -> int:
    """What batch `batch` of a right run reads: its own input file of each source."""
    return sum(len(_rows(workload, source, batch)) for source in _sources(workload))


def _first_line(e: BaseException) -> str:
    text = str(getattr(e, "desc", None) or e).strip()
    return (text.splitlines() or [type(e).__name__])[0][:300]


def _read_state(spark: Any, ckpt: Path, **opts: Any) -> list[Any]:
    r = spark.read.format("statestore")
    for k, v in opts.items():
        r = r.option(k, str(v))
    return list(r.load(str(ckpt)).collect())


def observed(spark: Any, workload: str, ckpt: Path, outputs: dict[int, list[Any]]) -> dict[str, Any]:
    """What the sink's batches and Spark's state reader say, in the oracle's shape."""
    rows = [r for b in sorted(outputs) for r in outputs[b]]
    if workload in ("agg", "tws", "dedup"):
        last: dict[str, int] = {}
        for r in rows:  # update mode: a key's latest value is its count so far
            last[r["key"]] = r["count"]
        out: Any = dict(sorted(last.items()))
    else:
        out = sorted([r["key"], r["lv"], r["rv"]] for r in rows)
    # by position, not name: a field renamed in a schema file (which Spark tolerates) renames the reader's columns
    if workload == "agg":
        state: Any = dict(sorted((r[0][0], r[1][0]) for r in _read_state(spark, ckpt)))
    elif workload == "tws":
        state = dict(sorted((r[0][0], r[1][0]) for r in _read_state(spark, ckpt, stateVarName="count")))
    elif workload == "dedup":
        ids = sorted(r[0][0] for r in _read_state(spark, ckpt, operatorId=1))
        counts = dict(sorted((r[0][0], r[1][0]) for r in _read_state(spark, ckpt, operatorId=0)))
        state = {"ids": ids, "counts": counts}
    else:
        state = {side: sorted([r[1][0], r[1][1]] for r in _read_state(spark, ckpt, joinSide=side)) for side in ("left", "right")}
    return {"output": out, "state": state}


# -- the damage ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Damage:
    name: str  # "<file role>: <what>"
    path: str  # checkpoint-relative
    apply: Callable[[Path], None]


def _reseal(path: Path) -> None:
    """Rewrite the Hadoop `.crc` beside `path` for its new bytes, as a tool that edits it does."""
    crc = path.parent / hadoop_crc_name(path.name)
    if crc.exists():
        crc.write_bytes(hadoop_crc(path.read_bytes()))


def _drop_crc(p: Path) -> None:
    crc = p.parent / hadoop_crc_name(p.name)
    if crc.exists():
        crc.unlink()


def _delete(p: Path) -> None:
    p.unlink()
    _drop_crc(p)


def _truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _empty(p: Path) -> None:
    p.write_bytes(b"")


def _flip(offset_of: Callable[[bytes], int]) -> Callable[[Path], None]:
    def apply(p: Path) -> None:
        data = bytearray(p.read_bytes())
        i = offset_of(bytes(data))
        data[i] ^= 0x01
        p.write_bytes(bytes(data))

    return apply


def _flip_mid(p: Path) -> None:
    _flip(lambda d: len(d) // 2)(p)


def _sealed(edit: Callable[[Path], None]) -> Callable[[Path], None]:
    def apply(p: Path) -> None:
        edit(p)
        _reseal(p)

    return apply


def _unsealed(edit: Callable[[Path], None]) -> Callable[[Path], None]:
    """The edit, and the `.crc` removed (a copy that kept no checksums, or an object store)."""

    def apply(p: Path) -> None:
        edit(p)
        _drop_crc(p)

    return apply


def _replace(old: str, new: str) -> Callable[[Path], None]:
    def apply(p: Path) -> None:
        data = p.read_bytes()  # bytes: a schema file's strings carry binary length prefixes
        if old.encode() not in data:
            raise LookupError(f"{p}: {old!r} not in it")
        p.write_bytes(data.replace(old.encode(), new.encode(), 1))

    return apply


def _conf(key: str, value: str) -> Callable[[Path], None]:
    def apply(p: Path) -> None:
        lines = p.read_text().split("\n")
        meta = json.loads(lines[1])
        if key not in meta["conf"]:
            raise LookupError(f"{p}: no conf {key}")
        meta["conf"][key] = value
        lines[1] = json.dumps(meta, separators=(",", ":"))
        p.write_text("\n".join(lines))

    return apply


def _drop_lines(keep: int) -> Callable[[Path], None]:
    def apply(p: Path) -> None:
        p.write_text("\n".join(p.read_text().split("\n")[:keep]))

    return apply


def _crc(edit: Callable[[Path], None]) -> Callable[[Path], None]:
    def apply(p: Path) -> None:
        edit(p.parent / hadoop_crc_name(p.name))

    return apply


def _new_id(p: Path) -> None:
    p.write_text(json.dumps({"id": str(uuid.UUID(int=random.Random(7).getrandbits(128)))}, separators=(",", ":")))


def _files(ckpt: Path, pattern: str) -> list[Path]:
    return sorted(p for p in ckpt.glob(pattern) if p.is_file() and not p.name.startswith("."))


def _index(entry: Path) -> int:
    """A source log entry's batch id: `6` or `5.compact`."""
    return int(entry.name.split(".")[0])


def damages(ckpt: Path, workload: str) -> list[Damage]:
    """Every damage this benchmark makes to the checkpoint a workload's base run wrote."""
    out: list[Damage] = []

    def add(name: str, path: Path | None, apply: Callable[[Path], None]) -> None:
        if path is not None and path.exists():
            out.append(Damage(name, str(path.relative_to(ckpt)), apply))

    def file_kinds(role: str, path: Path | None, *, sealed_flip: bool = True) -> None:
        add(f"{role}: deleted", path, _delete)
        add(f"{role}: cut short", path, _truncate)
        add(f"{role}: emptied", path, _empty)
        add(f"{role}: byte flipped", path, _flip_mid)
        if sealed_flip:
            add(f"{role}: byte flipped, .crc resealed", path, _sealed(_flip_mid))
            add(f"{role}: byte flipped, .crc removed", path, _unsealed(_flip_mid))

    offsets = sorted((p for p in _files(ckpt, "offsets/*") if p.name.isdigit()), key=lambda p: int(p.name))
    latest, previous, first = offsets[-1], offsets[-2], offsets[0]
    file_kinds("metadata", ckpt / "metadata")
    add("metadata: another query id, .crc resealed", ckpt / "metadata", _sealed(_new_id))
    file_kinds("latest offsets entry", latest)
    add("latest offsets entry: source lines dropped, .crc resealed", latest, _sealed(_drop_lines(2)))
    file_kinds("previous offsets entry", previous, sealed_flip=False)
    add("first offsets entry: deleted", first, _delete)
    add("first offsets entry: byte flipped", first, _flip_mid)
    for key, value in (
        ("spark.sql.shuffle.partitions", str(PARTITIONS + 1)),
        ("spark.sql.shuffle.partitions", str(PARTITIONS - 1)),
        ("spark.sql.streaming.stateStore.providerClass", "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"),
        ("spark.sql.streaming.aggregation.stateFormatVersion", "1"),
        ("spark.sql.streaming.join.stateFormatVersion", "1"),
        ("spark.sql.streaming.stateStore.compression.codec", "zstd"),
        ("spark.sql.streaming.stateStore.rowChecksum.enabled", "true"),
        ("spark.sql.streaming.stateStore.encodingFormat", "avro"),
        ("spark.sql.streaming.stateStore.rocksdb.formatVersion", "4"),
        ("spark.sql.streaming.multipleWatermarkPolicy", "max"),
    ):
        if workload != "join" and key.endswith("join.stateFormatVersion"):
            continue
        if workload not in ("agg", "dedup") and key.endswith("aggregation.stateFormatVersion"):
            continue
        add(
            f"latest offsets entry: {key.removeprefix('spark.sql.')}={value}, .crc resealed",
            latest,
            _sealed(_conf(key, value)),
        )
    add(
        "previous offsets entry: shuffle.partitions changed, .crc resealed",
        previous,
        _sealed(_conf("spark.sql.shuffle.partitions", str(PARTITIONS + 1))),
    )
    add(
        "latest offsets entry: file source offset moved back, .crc resealed",
        latest,
        _sealed(_replace(f'"logOffset":{int(latest.name)}', f'"logOffset":{int(latest.name) - 1}')),
    )
    add("latest offsets entry: .crc byte flipped", latest, _crc(_flip(lambda d: len(d) - 1)))
    add("latest offsets entry: .crc magic damaged", latest, _crc(_flip(lambda d: 0)))
    add("latest offsets entry: .crc deleted", latest, _crc(lambda p: p.unlink()))

    commits = sorted((p for p in _files(ckpt, "commits/*") if p.name.isdigit()), key=lambda p: int(p.name))
    add("latest commit entry: deleted", commits[-1], _delete)
    add("latest commit entry: cut short", commits[-1], _truncate)
    add("latest commit entry: byte flipped", commits[-1], _flip_mid)
    add("latest commit entry: .crc byte flipped", commits[-1], _crc(_flip(lambda d: len(d) - 1)))

    for source in sorted(p for p in (ckpt / "sources").iterdir() if p.is_dir()):
        entries = sorted((p for p in _files(source, "*") if p.name.split(".")[0].isdigit()), key=lambda p: int(p.name.split(".")[0]))
        last, compact = entries[-1], max((p for p in entries if p.name.endswith(".compact")), key=lambda p: int(p.name.split(".")[0]))
        role = f"source {source.name} log"
        file_kinds(f"{role} latest entry", last)
        add(
            f"{role} latest entry: another batch's id, .crc resealed",
            last,
            _sealed(_replace(f'"batchId":{_index(last)}', f'"batchId":{_index(last) - 1}')),
        )
        file_kinds(f"{role} latest compaction", compact, sealed_flip=False)
        add(f"{role} latest compaction: a line dropped, .crc resealed", compact, _sealed(_drop_lines(-1)))
        older = [p for p in entries if not p.name.endswith(".compact") and int(p.name) < int(compact.name.split(".")[0])]
        if older:
            add(f"{role} entry below the compaction: deleted", older[-1], _delete)

    for meta in _files(ckpt, "state/*/_metadata/metadata"):
        file_kinds(f"operator {meta.parts[-3]} metadata", meta, sealed_flip=False)
        text = meta.read_text()
        for name in ("stateStoreSave", "dedupe", "symmetricHashJoin", "transformWithStateExec"):
            if f'"operatorName":"{name}"' in text:
                add(
                    f"operator {meta.parts[-3]} metadata: operator renamed, .crc resealed",
                    meta,
                    _sealed(_replace(f'"{name}"', '"stateStoreRestore"')),
                )
    for meta in _files(ckpt, "state/*/_metadata/v2/*")[-1:]:
        file_kinds("operator metadata v2 (latest)", meta, sealed_flip=False)
    schemas = (
        _files(ckpt, "state/*/0/_metadata/schema") + _files(ckpt, "state/*/0/*/_metadata/schema") + _files(ckpt, "state/*/_stateSchema/*/*")
    )
    for schema in schemas:
        role = f"schema {'/'.join(schema.relative_to(ckpt).parts[1:])}"
        file_kinds(role, schema)
        add(f"{role}: a field renamed, .crc resealed", schema, _sealed(_replace('"name":"key"', '"name":"kez"')))
        add(f"{role}: a type changed, .crc resealed", schema, _sealed(_replace('"type":"long"', '"type":"int\\u0020"')))
        add(f"{role}: nullable changed, .crc resealed", schema, _sealed(_replace('"nullable":true', '"nullable":fals\\u0065')))
    return out


# -- the run -----------------------------------------------------------------------------------
@dataclass
class Case:
    workload: str
    damage: str
    path: str
    spark: str = ""
    spark_detail: str = ""
    valid: Any = None
    resumable: Any = None
    kinds: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    judge_error: str = ""

    def grade(self) -> str:
        """false-valid, false-alarm, agree or unknown (the judge could not say)."""
        right = self.spark == "resumed-right"
        says = self.resumable if self.valid is not False else False
        if self.valid is True and self.resumable is not True:
            says = "unknown"
        if says == "unknown" or says is None:
            return "unknown"
        if says is True and not right:
            return "false-valid"
        if says is False and right:
            return "false-alarm"
        return "agree"


def _session() -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    b = SparkSession.builder.master("local[2]").appName("statebed-restart-oracle")
    for k, v in SPARK_CONF.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("OFF")
    return spark


def _log(msg: str) -> None:
    print(f"[restart_oracle {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def spark_phase(work: Path, workloads: list[str]) -> list[Case]:
    """Base checkpoints, then every damage restarted by Spark; cases.jsonl written as they end."""
    spark = _session()
    inputs, base_dir, cases_dir = work / "input", work / "base", work / "cases"
    journal = (work / "cases.jsonl").open("w")
    cases: list[Case] = []
    try:
        for workload in workloads:
            base = base_dir / workload
            outputs: dict[int, list[Any]] = {}
            for b in range(BATCHES):
                write_input(inputs, workload, b)
                err = run_once(spark, inputs, workload, base, outputs)
                if err is not None:
                    raise RuntimeError(f"{workload}: base batch {b} failed: {err}")
            base_outputs = dict(outputs)
            got = observed(spark, workload, base, outputs)
            if got != oracle(workload, BATCHES):
                raise RuntimeError(f"{workload}: the base run is not the oracle's: {got} != {oracle(workload, BATCHES)}")
            write_input(inputs, workload, BATCHES)  # the one more input every restart reads
            want = oracle(workload, BATCHES + 1)
            plan = [Damage("none (control)", "", lambda p: None), *damages(base, workload)]
            _log(f"{workload}: base written ({BATCHES} batches), {len(plan)} cases")
            for i, damage in enumerate(plan):
                case_dir = cases_dir / workload / f"{i:03d}"
                kept, pristine = case_dir / "damaged", base_dir / f"{workload}.pristine"
                shutil.copytree(base, kept)
                case = Case(workload, damage.name, damage.path)
                try:
                    damage.apply(kept / damage.path if damage.path else kept)
                except LookupError as e:
                    _log(f"{workload}: {damage.name}: not applicable ({e})")
                    shutil.rmtree(case_dir)
                    continue
                # Spark restarts the copy where the base was written: files name their checkpoint by
                # absolute path (transformWithState's operator metadata names its schema files so)
                base.rename(pristine)
                shutil.copytree(kept, base)
                outputs, rows = dict(base_outputs), dict[int, int]()
                t0 = time.monotonic()
                try:
                    err = run_once(spark, inputs, workload, base, outputs, rows)
                    if err is not None:
                        case.spark, case.spark_detail = "refused", err
                    else:
                        case.spark, case.spark_detail = judge_restart(spark, workload, pristine, base, outputs, rows, want)
                finally:
                    stop_state_stores(spark)  # no maintenance thread of this case writes on after it
                    shutil.rmtree(base)
                    pristine.rename(base)
                _log(
                    f"{workload} {i + 1}/{len(plan)} {damage.name}: {case.spark} ({time.monotonic() - t0:.1f} s) {case.spark_detail[:120]}"
                )
                cases.append(case)
                journal.write(json.dumps({**asdict(case), "dir": str(kept.relative_to(work))}) + "\n")
                journal.flush()
    finally:
        journal.close()
        spark.stop()
    return cases


def judge_restart(
    spark: Any, workload: str, base: Path, restarted: Path, outputs: dict[int, list[Any]], rows: dict[int, int], want: dict[str, Any]
) -> tuple[str, str]:
    """resumed-right or resumed-wrong, with what differs: the rows each restarted batch read (a
    file read twice or skipped shows here first, whatever the query makes of it), the sink's output
    and the state. Where Spark's state reader refuses a damaged operator metadata or schema file
    (a restart goes on without reading it), the state is read with the base run's copies of those
    files: the restart's state files are what is judged, not the reader."""
    wrong_rows = {b: (n, input_rows(workload, b)) for b, n in sorted(rows.items()) if n != input_rows(workload, b)}
    if wrong_rows:
        return "resumed-wrong", "; ".join(f"batch {b} read {n} input rows, its input file has {m}" for b, (n, m) in wrong_rows.items())
    note = ""
    try:
        got = observed(spark, workload, restarted, outputs)
    except Exception as e:  # Spark's state reader refused the damaged decode files
        restore_metadata(base, restarted)
        note = f" (state read with the base's metadata files: the reader failed on the damaged ones: {_first_line(e)[:120]})"
        try:
            got = observed(spark, workload, restarted, outputs)
        except Exception as e2:
            return "resumed-wrong", f"the state reader failed: {_first_line(e2)}"
    if got == want:
        return "resumed-right", note.strip()
    parts = [k for k in want if got.get(k) != want[k]]
    return "resumed-wrong", "; ".join(f"{k}: got {json.dumps(got.get(k))[:200]} want {json.dumps(want[k])[:200]}" for k in parts) + note


def restore_metadata(base: Path, ckpt: Path) -> None:
    """The base run's operator metadata and schema files over `ckpt`'s (their .crc too)."""
    for src in base.glob("state/**/*"):
        rel = src.relative_to(base)
        if src.is_file() and ("_metadata" in rel.parts or "_stateSchema" in rel.parts):
            (ckpt / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, ckpt / rel)


def judge_phase(work: Path) -> list[Case]:
    """`verify_lineage` on every kept damaged copy (in-process)."""
    rows = [json.loads(line) for line in (work / "cases.jsonl").read_text().splitlines() if line.strip()]
    out: list[Case] = []
    for row in rows:
        case = Case(**{k: row[k] for k in ("workload", "damage", "path", "spark", "spark_detail")})
        try:
            report = verify_lineage(open_storage(str(work / row["dir"]))).to_json()
            case.valid, case.resumable = report["valid"], report["resumable"]
            case.kinds = sorted({a["kind"] for a in report["anomalies"]})
            case.reasons = list(report["resumable_reasons"])
        except Exception as e:
            case.valid, case.resumable, case.judge_error = "unknown", "unknown", f"{type(e).__name__}: {e}"
            traceback.print_exc(file=sys.stderr)
        out.append(case)
    return out


def report(cases: list[Case]) -> dict[str, Any]:
    grades = Counter(c.grade() for c in cases)
    return {
        "benchmark": "restart_oracle",
        "cases": len(cases),
        "spark": dict(Counter(c.spark for c in cases)),
        "false_valid": grades.get("false-valid", 0),
        "false_alarm": grades.get("false-alarm", 0),
        "unknown": grades.get("unknown", 0),
        "agree": grades.get("agree", 0),
        "rows": [{**asdict(c), "grade": c.grade()} for c in cases],
    }


_SPARK_SHORT = {"refused": "refused", "resumed-wrong": "wrong", "resumed-right": "right"}
_JUDGE_SHORT = {True: "valid", False: "invalid", "unknown": "unknown"}


def print_table(result: dict[str, Any], stream: Any) -> None:
    """One row per damage, one column per workload: Spark's outcome / the judge's verdict
    (`resumable` where it differs), the grade only where it is not agreement."""
    workloads = [w for w in WORKLOADS if any(r["workload"] == w for r in result["rows"])]
    by_damage: dict[str, dict[str, dict[str, Any]]] = {}
    for r in result["rows"]:
        by_damage.setdefault(r["damage"], {})[r["workload"]] = r
    print("| damage | " + " | ".join(workloads) + " |", file=stream)
    print("|---" * (len(workloads) + 1) + "|", file=stream)
    for name, cells in by_damage.items():
        out = []
        for w in workloads:
            r = cells.get(w)
            if r is None:
                out.append("-")
                continue
            verdict = _JUDGE_SHORT.get(r["valid"], str(r["valid"]))
            if r["resumable"] != r["valid"]:
                verdict += f" (resumable {_JUDGE_SHORT.get(r['resumable'], str(r['resumable']))})"
            grade = "" if r["grade"] in ("agree", "unknown") else f" **{r['grade']}**"
            out.append(f"{_SPARK_SHORT.get(r['spark'], r['spark'])} / {verdict}{grade}")
        print(f"| {name} | " + " | ".join(out) + " |", file=stream)
    print(
        f"\n{result['cases']} cases; Spark {result['spark']}; false valid {result['false_valid']}, "
        f"false alarm {result['false_alarm']}, unknown {result['unknown']}, agree {result['agree']}",
        file=stream,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/restart_oracle.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", type=Path)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--judge-only", type=Path, metavar="DIR")
    args = p.parse_args(argv)
    if args.judge_only is not None:
        result = report(judge_phase(args.judge_only))
    else:
        workloads = ["agg"] if args.quick else [w for w in args.workloads.split(",") if w]
        unknown = sorted(set(workloads) - set(WORKLOADS))
        if unknown:
            print(f"restart_oracle: unknown workload(s) {', '.join(unknown)} (known: {', '.join(WORKLOADS)})", file=sys.stderr)
            return 2
        work = args.workdir or Path(tempfile.mkdtemp(prefix="statebed-restart-oracle-"))
        work.mkdir(parents=True, exist_ok=True)
        try:
            spark_phase(work, workloads)
            result = report(judge_phase(work))
        finally:
            if not args.keep and args.workdir is None:
                shutil.rmtree(work, ignore_errors=True)
    print_table(result, sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(result, indent=1))
    return 0 if result["false_valid"] == 0 and result["false_alarm"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
