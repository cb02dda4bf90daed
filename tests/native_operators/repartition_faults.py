"""A fault during Spark's offline repartition: its driver killed mid-way, then the query restarted on
the half-finished rewrite, then the repartition run again (issue 40).

Spark 4.3 writes the repartition as a batch of its own (SPARK-54345): first its offset log entry,
then the new partitions' state, then its commit. Killing the repartition's driver (its own
process, started here and signalled by its recorded pid only) once the offset log entry is there
leaves a checkpoint whose last batch is planned but not committed. What Spark does with that
(SPARK-55111: a restart detects the unfinished repartition), what statebed's judge says of it, and
whether a second repartition finishes the job, are recorded.

    python tests/native_operators/repartition_faults.py OUT_DIR [--only dedup]

prints one JSON object per checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import spark_checkpoints as sc
from repartition_operators import judged, repartition, script, spark_error

from statebed_store import open_storage
from statebed_store.commitlog import CommitLog
from statebed_verify import verify_lineage

CHILD = """
import sys
sys.path.insert(0, {here!r})
import spark_checkpoints as sc
spark = sc.session(__import__("pathlib").Path({scratch!r}))
spark.conf.set(sc.FORMAT_CONF, "2")
spark._streamingCheckpointManager.repartition({ckpt!r}, {partitions}, enforce_exactly_once_sink=False)
spark.stop()
"""
KILL_WAIT_S = 300.0


def _offsets(ckpt: Path) -> set[int]:
    return {int(p.name) for p in (ckpt / "offsets").iterdir() if p.name.isdigit()}


def kill_mid_repartition(ckpt: Path, scratch: Path, partitions: int) -> dict[str, Any]:
    """Start the repartition in its own driver process and SIGKILL it (its process group) as soon as
    its offset log entry appears; what was there when it died."""
    before = _offsets(ckpt)
    code = CHILD.format(here=str(Path(__file__).parent), scratch=str(scratch), ckpt=str(ckpt), partitions=partitions)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + KILL_WAIT_S
    try:
        while time.monotonic() < deadline and child.poll() is None:
            if _offsets(ckpt) - before:
                os.killpg(child.pid, signal.SIGKILL)  # our own child, by the pid we started
                break
            time.sleep(0.02)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    new = sorted(_offsets(ckpt) - before)
    committed = set(CommitLog(open_storage(ckpt)).batch_ids())
    return {
        "killed": child.returncode == -signal.SIGKILL,
        "exit": child.returncode,
        "planned": new,
        "committed": sorted(b for b in new if b in committed),
    }


def restart(spark: Any, q: sc.Query, ckpt: Path, inputs: Path) -> str:
    """Start the query again on `ckpt` and let it process what is there: 'ran', or Spark's error."""
    spark.conf.set(sc.FORMAT_CONF, str(q.fmt))
    query = q.build(sc._source(spark, inputs)).writeStream.format("noop").outputMode(q.mode).option("checkpointLocation", str(ckpt)).start()
    try:
        query.processAllAvailable()
    except Exception as e:  # Spark's refusal, as it names it
        return spark_error(e)
    finally:
        query.stop()
    return "ran" if query.exception() is None else spark_error(query.exception())


def run(spark: Any, root: Path, made: dict[str, sc.Checkpoint], partitions: int) -> list[dict[str, Any]]:
    queries = {q.name: q for q in sc._queries()}
    rows = []
    for name, ckpt in made.items():
        if ckpt.fmt != 2:
            continue
        row: dict[str, Any] = {"name": name, "partitions": [2, partitions]}
        row["kill"] = kill_mid_repartition(ckpt.path, root / "_child", partitions)
        half = verify_lineage(open_storage(ckpt.path))
        row["half_finished"] = {"lineage": half.valid, "anomalies": sorted({a.kind for a in half.anomalies}), "orphans": len(half.orphans)}
        row["restart"] = restart(spark, queries[name], ckpt.path, root / "_input" / name)
        row["second_repartition"] = repartition(spark, ckpt.path, ckpt.fmt, partitions) or "done"
        final = judged(ckpt.path)
        row["final"] = {"valid": final["statebed"], "repartitions": final["repartitions"], "anomalies": final["anomalies"]}
        rows.append(row)
    return rows


if __name__ == "__main__":
    sys.exit(script(__doc__, run, "dedup"))
