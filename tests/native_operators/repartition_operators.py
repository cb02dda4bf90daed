"""Spark's offline repartition on every stateful operator, and statebed's verdict on each (issue 40).

For each checkpoint `spark_checkpoints` writes (every stateful operator, checkpoint format 1 and
2), Spark 4.3's `StreamingCheckpointManager.repartition` is asked to rewrite the stopped query's
state into `--partitions` partitions (from 2). Where Spark does it, `statebed verify repartition`
judges the result: every key in the partition Spark's partitioner assigns under the new count,
the same rows before and after, a well-formed new batch. Where Spark refuses, its error is
recorded. `enforce_exactly_once_sink=False`: these queries write to the `noop` sink, and the
question here is the state, not the sink.

    python tests/native_operators/repartition_operators.py OUT_DIR [--partitions N] [--only a,b]

prints one JSON object per checkpoint: name, checkpoint format, Spark's answer and statebed's verdict.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import spark_checkpoints as sc

from statebed_store import open_storage
from statebed_verify import verify_repartition


def spark_error(e: BaseException) -> str:
    """Spark's error as it names it (`[ERROR_CLASS] message`; else the exception's first line)."""
    found = re.search(r"\[[A-Z][A-Z0-9_.]+\][^\n]*", str(e))
    if found is not None:
        return found.group(0)[:400]
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:400]


def judged(ckpt: Path) -> dict[str, Any]:
    """statebed's `verify repartition` of `ckpt`, in brief: its verdict, the repartitions' batches, the anomaly kinds."""
    report = verify_repartition(open_storage(ckpt))
    return {
        "statebed": report.valid,
        "repartitions": [r["batch"] for r in report.to_json()["repartitions"]],
        "anomalies": sorted({a.kind for a in report.anomalies}),
        "notes": report.notes[:3],
    }


def repartition(spark: Any, path: Path, fmt: int, partitions: int) -> str | None:
    """Spark's offline repartition of the checkpoint at `path` (the session's format conf set as
    the query ran: Spark checks it against the commit log); None when done, else Spark's error."""
    spark.conf.set(sc.FORMAT_CONF, str(fmt))
    try:
        spark._streamingCheckpointManager.repartition(str(path), partitions, enforce_exactly_once_sink=False)
    except Exception as e:  # Spark's refusal, recorded as it said it
        return spark_error(e)
    return None


def repartition_each(spark: Any, made: dict[str, sc.Checkpoint], partitions: int) -> list[dict[str, Any]]:
    """Spark's repartition of each checkpoint to `partitions`, then statebed's verdict on it."""
    rows = []
    for name, ckpt in made.items():
        row: dict[str, Any] = {"name": name, "checkpoint_format": ckpt.fmt, "partitions": [2, partitions]}
        error = repartition(spark, ckpt.path, ckpt.fmt, partitions)
        if error is None:
            row.update(spark="repartitioned", **judged(ckpt.path))
        else:
            row.update(spark="refused", error=error)
        rows.append(row)
    return rows


Run = Callable[[Any, Path, dict[str, sc.Checkpoint], int], list[dict[str, Any]]]


def script(doc: str, run: Run, only: str | None) -> int:
    """A sweep's command line: generate the checkpoints under OUT_DIR in one session, `run` the sweep
    on them, print one JSON object per row."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--only", default=only, help=f"comma-separated checkpoint names (default: {only or 'all'})")
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    spark = sc.session(args.out_dir / "_scratch")
    try:
        made = sc.generate(spark, args.out_dir, set(args.only.split(",")) if args.only else None)
        for row in run(spark, args.out_dir, made, args.partitions):
            print(json.dumps(row), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(script(__doc__, lambda spark, _root, made, partitions: repartition_each(spark, made, partitions), None))
