"""The cleanup-race fault without Spark: in the catalogue and the full matrix (statebed formats
only), and proven only by a pass that deleted files while Spark's event log shows a pending or
losing attempt alive."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "chaos"))
from test_process_faults import context, events, fault

from statebed_chaos.faults import KINDS, NotApplicable
from statebed_chaos.matrix_presets import FAULTS, PRESETS
from statebed_job.maintenance import PassRecord
from statebed_model.eventlog import read_event_log
from statebed_store.errors import UsageError


def test_in_the_catalogue_and_the_full_matrix_for_statebed_formats() -> None:
    assert KINDS["cleanup-race"] == "cleanup_race" and "cleanup-race" in FAULTS
    assert {"v1", "v2"} <= {m for f, _, m in PRESETS["full"].combos if f == "cleanup-race"}
    f = fault("cleanup-race")
    f.check("v2", "local", "local")
    with pytest.raises(NotApplicable, match="native"):
        f.check("native", "local", "local")
    with pytest.raises(UsageError, match="retain"):
        fault("cleanup-race", retain=0)


def write_passes(ctx: object, rows: list[PassRecord]) -> None:
    run = ctx.run  # type: ignore[attr-defined]
    run.storage.write("faults/f1-maintenance.jsonl", b"".join(json.dumps(r.to_json()).encode() + b"\n" for r in rows))


def test_fired_only_when_a_deleting_pass_overlaps_a_pending_attempt(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    f = fault("cleanup-race")
    assert f.evidence(ctx).fired is None  # no record: cannot tell
    events(ctx, "app-20261123115904")
    tasks = [t for t in read_event_log(ctx.run.events).tasks if t.batch is not None and t.finish_ms is not None]
    t = max(tasks, key=lambda t: t.batch or 0)
    assert t.batch is not None
    during = (t.launch_ms + 1) / 1000
    write_passes(ctx, [PassRecord(1, "state/0/0", t.batch - 1, 2, files_deleted=0, at=during, seconds=0.001)])
    assert f.evidence(ctx).fired is False  # a pass that deleted nothing
    write_passes(ctx, [PassRecord(1, "state/0/0", t.batch - 1, 2, files_deleted=3, at=1.0, seconds=0.5)])
    assert f.evidence(ctx).fired is False  # deleted, but long before any attempt ran
    write_passes(ctx, [PassRecord(1, "state/0/0", t.batch - 1, 2, files_deleted=3, at=during, seconds=0.001)])
    ev = f.evidence(ctx)
    assert ev.fired is True and ev.proof[1]["attempt"]["batch"] == t.batch, ev
