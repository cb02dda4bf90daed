"""A zombie write of Spark's offline repartition (issue 40): a task of the repartition job whose
snapshot upload fails, as a lost task's would, while its file lands later.

The repartition runs in its own driver (`local[2,2]`: a failed task is retried once) with statebed's
JVM plug-in. `native.snapshot.zombie`, filtered to the repartition's batch N and new partition 0,
makes the close of that partition's zip (version N + 1) throw to its writer and parks the bytes;
Spark retries the task, which writes the zip again, and the repartition commits. Only then is the
parked close released: the zombie's zip lands, in V1 over the name the retry wrote, in V2 as
`<N+1>_<uuid>.zip` beside the committed one. Then the query is restarted on the checkpoint and
statebed judges the repartition and the lineage. Evidence is the plug-in's own records (the hold,
its release, `zombie-landed`), never the schedule.

    python tests/native_operators/repartition_zombie.py OUT_DIR [--only dedup,dedup_v1]

prints one JSON object per checkpoint.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import spark_checkpoints as sc
from repartition_faults import restart
from repartition_operators import judged, script

import statebed_job.jvm_plugin  # noqa: F401 (registers the plug-in's points)
from statebed_store import open_storage
from statebed_store.commitlog import CommitLog
from statebed_store.failpoint_control import Control
from statebed_verify import verify_lineage

POINT = "native.snapshot.zombie"
HOLD_MS = 240_000  # the plug-in's own bound on the parked close
WAIT_S = 300.0
LANDED = ("zombie-landed", "zombie-failed")
CHILD = """
import pathlib, sys, time
sys.path.insert(0, {here!r})
import spark_checkpoints as sc
from statebed_job.jvm_plugin import plugin_confs
from statebed_store.failpoint_control import Control
control = Control({control!r})
spark = sc.session(pathlib.Path({scratch!r}), "local[2,2]", plugin_confs(pathlib.Path({control!r})))
spark.conf.set(sc.FORMAT_CONF, "{fmt}")
spark._streamingCheckpointManager.repartition({ckpt!r}, {partitions}, enforce_exactly_once_sink=False)
print("repartitioned", flush=True)
# the parked close lives in this JVM: stay until it landed (the parent releases it), bounded
deadline = time.monotonic() + {wait}
while time.monotonic() < deadline and not any(f.get("action") in {landed!r} for f in control.firings()):
    time.sleep(0.05)
spark.stop()
"""


def _firings(control: Control, action: str | tuple[str, ...]) -> list[dict[str, Any]]:
    actions = (action,) if isinstance(action, str) else action
    return [f for f in control.firings() if f.get("failpoint") == POINT and str(f.get("action", "")).startswith(actions)]


def _await(what: Any, child: subprocess.Popen[str], bound_s: float = WAIT_S) -> Any:
    """`what()` once it is truthy, polled while the child lives (bounded); None otherwise."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        found = what()
        if found or child.poll() is not None:
            return found or what()
        time.sleep(0.05)
    return None


def _zips(ckpt: Path, version: int) -> dict[str, str]:
    """Partition 0's zips of `version`: name -> sha256 (the committed one and any zombie's)."""
    d = ckpt / "state" / "0" / "0"
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in sorted(d.glob(f"{version}*.zip"))}


def zombie_repartition(ckpt: sc.Checkpoint, scratch: Path, partitions: int) -> dict[str, Any]:
    """Run the repartition with the zombie armed, release it after the commit; what happened."""
    batch = max(int(p.name) for p in (ckpt.path / "offsets").iterdir() if p.name.isdigit()) + 1
    control_dir = scratch / f"failpoints-{ckpt.name}"
    control_dir.mkdir(parents=True)
    control = Control(control_dir / "control.json")
    control.arm(f"{POINT}=[batch={batch},partition=0]1*hold({HOLD_MS})")
    code = CHILD.format(
        here=str(Path(__file__).parent),
        control=str(control.path),
        scratch=str(scratch / f"child-{ckpt.name}"),
        fmt=ckpt.fmt,
        ckpt=str(ckpt.path),
        partitions=partitions,
        wait=WAIT_S,
        landed=LANDED,
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    row: dict[str, Any] = {"batch": batch}
    try:
        held = _await(lambda: _firings(control, "hold"), child)
        row["held"] = bool(held)
        committed = _await(lambda: batch in CommitLog(open_storage(ckpt.path)).batch_ids(), child)
        row["committed_before_release"] = bool(committed) and not _firings(control, LANDED)
        row["zips_before"] = _zips(ckpt.path, batch + 1)
        control.release(POINT)
        landed = _await(lambda: _firings(control, LANDED), child)
        row["landed"] = [f.get("action") for f in landed or []]
        row["zips_after"] = _zips(ckpt.path, batch + 1)
    finally:
        control.release(POINT)  # never leave the close parked
        control.disarm(POINT)
        try:
            _, err = child.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            child.kill()  # our own child, by the handle we started it with
            _, err = child.communicate()
    row["exit"] = child.returncode
    if child.returncode != 0:
        row["error"] = err.strip().splitlines()[-1:] if err else []
    return row


def run(spark: Any, root: Path, made: dict[str, sc.Checkpoint], partitions: int) -> list[dict[str, Any]]:
    queries = {q.name: q for q in sc._queries()}
    rows = []
    for name, ckpt in made.items():
        row: dict[str, Any] = {"name": name, "checkpoint_format": ckpt.fmt, "partitions": [2, partitions]}
        row["zombie"] = zombie_repartition(ckpt, root / "_zombie", partitions)
        row["repartition"] = judged(ckpt.path)
        row["restart"] = restart(spark, queries[name], ckpt.path, root / "_input" / name)
        lineage = verify_lineage(open_storage(ckpt.path))
        row["lineage"] = {"valid": lineage.valid, "anomalies": sorted({a.kind for a in lineage.anomalies}), "orphans": len(lineage.orphans)}
        rows.append(row)
    return rows


if __name__ == "__main__":
    sys.exit(script(__doc__, run, "dedup,dedup_v1"))
