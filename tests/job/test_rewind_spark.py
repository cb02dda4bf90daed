"""Rewind real Spark 4.3 runs (statebed's V2 store and Spark's native RocksDB V2 store), then restart them.

The oracle: `count` is deterministic, so the state a reprocess ends with must equal the
state the first run committed for the same batches (and the state verifier's oracle over
the committed input). Retention is statebed's own cleanup (`cleanup_store`), the code a
store runs; a rewind below it is refused naming the missing file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import tree_hash
from spark_runs import statebed, summary

from statebed_store import CommitLog, open_storage
from statebed_store.cleanup import cleanup_checkpoint

pytestmark = pytest.mark.slow

SMALL = ["--batches", "5", "--rows-per-batch", "2000", "--keyspace", "200", "--json"]


def dump(ckpt: Path, batch: int) -> list[str]:
    proc = statebed("dump", str(ckpt), "--batch", str(batch))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.splitlines()


def run_json(*args: str, env: dict[str, str] | None = None) -> Any:
    proc = statebed(*args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def apply_retention(ckpt: Path, keep: int) -> None:
    """Statebed's cleanup (the code a store's maintenance runs), keeping the last `keep` committed batches loadable."""
    cleanup_checkpoint(open_storage(ckpt), keep, sst_orphan_grace_s=0)


def test_statebed_run_rewound_past_retention_refused_then_resumed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    ckpt = run_dir / "checkpoint"
    proc = statebed("run", "--run-dir", str(run_dir), "--workload", "count", "--snapshot-interval", "2", "--no-verify", *SMALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    apply_retention(ckpt, keep=3)
    before = dump(ckpt, 4)
    assert before, "the run committed no state"

    doc = run_json("ls", str(ckpt), "--rebuildable")
    assert doc["committed"] == [[0, 4]]
    low = doc["rebuildable"][0][0]
    assert doc["rebuildable"] == [[low, 4]] and 0 < low <= 2  # retention keeps batches 2..4 loadable, not batch 0
    blocked = [s["firstUnrebuildable"] for s in doc["stores"] if s["firstUnrebuildable"]]
    assert blocked and all(b["batch"] == low - 1 for b in blocked)
    missing = blocked[0]["file"]
    assert missing and not Path(missing).exists()

    # below retention: refused, naming the file, nothing changed
    digest = tree_hash(run_dir)
    proc = statebed("rewind", str(run_dir), "--to-batch", str(low - 1))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert any(b["file"] in proc.stderr for b in blocked), proc.stderr
    # a dry run prints every move and changes nothing
    dry = run_json("rewind", str(run_dir), "--to-batch", str(low), "--dry-run")
    assert tree_hash(run_dir) == digest
    moved = {m["from"] for m in dry["moves"]}
    later = range(low + 1, 5)
    assert {f"checkpoint/commits/{b}" for b in later} | {f"spark-checkpoint/offsets/{b}" for b in later} <= moved
    assert {f"output/{b}.parquet" for b in later} | {f"spark-checkpoint/sources/0/{b}" for b in later} <= moved

    done = run_json("rewind", str(run_dir), "--to-batch", str(low))
    assert [m["from"] for m in done["moves"]] == [m["from"] for m in dry["moves"]]
    assert all((run_dir / m["to"]).is_file() and not (run_dir / m["from"]).exists() for m in done["moves"])
    assert CommitLog(open_storage(ckpt)).batch_ids() == list(range(0, low + 1))

    proc = statebed("run", "--run-dir", str(run_dir), "--resume", "--workload", "count", *SMALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc)
    assert s["statuses"] == {"committed": 4 - low} and s["verdicts"]["state"]["valid"] is True
    assert s["verdicts"]["lineage"]["valid"] is True
    assert dump(ckpt, 4) == before  # the reprocess rebuilt exactly the state of the abandoned timeline


@pytest.mark.e2e
def test_native_run_rewind_interrupted_then_completed_and_restarted(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    ckpt = run_dir / "spark-checkpoint"
    proc = statebed("run", "--run-dir", str(run_dir), "--workload", "count", "--native", "--no-verify", *SMALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before = dump(ckpt, 4)
    assert before
    # killed between two moves (the fourth move exits the process as SIGKILL would)
    proc = statebed("rewind", str(run_dir), "--to-batch", "1", env={"STATEBED_FAILPOINTS": "rewind.move.after=3*off->exit(137)"})
    assert proc.returncode == 137
    (journal,) = (run_dir / "_rewind").glob("*/journal.json")
    doc = json.loads(journal.read_text())
    assert doc["status"] == "moving" and len(doc["moves"]) > 4
    moved = [m for m in doc["moves"] if (run_dir / m["to"]).exists()]
    assert len(moved) == 4  # half-done on disk
    # the next command finishes it first, then finds nothing more to move
    proc = statebed("rewind", str(run_dir), "--to-batch", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "completed the interrupted rewind" in proc.stderr
    assert json.loads(proc.stdout)["moves"] == []
    assert json.loads(journal.read_text())["status"] == "done"
    assert all((run_dir / m["to"]).exists() and not (run_dir / m["from"]).exists() for m in doc["moves"])
    assert sorted(p.name for p in (ckpt / "commits").iterdir() if not p.name.startswith(".")) == ["0", "1"]

    proc = statebed("run", "--run-dir", str(run_dir), "--resume", "--workload", "count", "--native", *SMALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc)
    assert s["verdicts"]["state"]["valid"] is True and s["verdicts"]["lineage"]["valid"] is True
    assert dump(ckpt, 4) == before  # Spark reprocessed batches 2..4 from the rewound checkpoint to the same state
