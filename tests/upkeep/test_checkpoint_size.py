"""The checkpoint's size in the run report (issue 27's soak plot), without Spark: each maintenance
pass records what every store keeps (files and bytes, from cleanup's own listing), and the run
report plots it per batch; a run without such records gets no chart and still renders."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from checkpoint_helpers import run_cli
from job_helpers import InProcessJob

from statebed_job.config import JobOptions
from statebed_job.maintenance import Maintenance, PassRecord
from statebed_report.checkpoint_size import kept_per_batch
from statebed_store import default_uploader

BATCHES = 9
RETAIN = 2


pytestmark = pytest.mark.usefixtures("providers_closed")  # conftest.py: drained and closed after each test


def job(tmp_path: Path) -> InProcessJob:
    opts = JobOptions(workload="count", batches=BATCHES, partitions=2, rows_per_batch=200, keyspace=40, snapshot_interval=3, seed=5)
    j = InProcessJob(tmp_path / "run", opts)
    return j


def on_disk(store_dir: Path) -> tuple[int, int]:
    """Files and bytes under a store's directory, SSTs included, as the disk has them."""
    sizes = [(Path(d) / n).stat().st_size for d, _, names in os.walk(store_dir) for n in names]
    return len(sizes), sum(sizes)


def test_each_pass_records_what_every_store_keeps(tmp_path: Path) -> None:
    j = job(tmp_path)
    m = Maintenance(j.storage, retain=RETAIN, interval_s=0, sst_grace_s=0)
    for b in range(BATCHES):
        j.batch(b)
    default_uploader().drain(60)
    m.committed(BATCHES - 1)
    records = m.run_pass()
    assert len(records) == 2 and all(r.error is None and r.files_deleted > 0 for r in records)
    for r in records:
        files, size = on_disk(j.run.root / "checkpoint" / r.store)
        assert (r.files_kept, r.bytes_kept) == (files, size), r  # what the store holds after the deletes
        assert r.to_json()["files_kept"] == files and r.to_json()["bytes_kept"] == size


def passes_into_the_run(j: InProcessJob) -> list[dict[str, object]]:
    """A batch, a maintenance pass, ... as `statebed run` does, the passes written to `<run>/maintenance.jsonl`."""
    rows: list[dict[str, object]] = []

    def on_pass(records: list[PassRecord]) -> None:
        rows.extend(r.to_json() for r in records)
        j.run.write_maintenance(rows)

    m = Maintenance(j.storage, retain=RETAIN, interval_s=0, sst_grace_s=0, on_pass=on_pass)
    for b in range(BATCHES):
        j.batch(b)
        default_uploader().drain(60)
        m.committed(b)
        m.run_pass()
    return rows


def plotted(page: str) -> dict[str, object]:
    """The checkpoint-size figure's data, as embedded in the page."""
    m = re.search(r'id="checkpoint-size".*?Plotly\.newPlot\(\s*"checkpoint-size",\s*(\[.*?\]),\s*\{', page, re.S)
    assert m is not None, "no checkpoint-size chart"
    traces = json.loads(m.group(1))
    return {t["name"]: t for t in traces}


def test_the_run_report_plots_the_kept_files_and_bytes_per_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    j = job(tmp_path)
    rows = passes_into_the_run(j)
    points = kept_per_batch(rows)
    assert [b for b, _, _ in points] == list(range(BATCHES))
    code, _, err = run_cli(capsys, "report", str(j.run.root))
    assert code == 0, err
    page = (j.run.root / "report.html").read_text()
    assert 'id="checkpoint-size-section"' in page
    traces = plotted(page)
    assert traces["state files kept"]["x"] == traces["bytes kept"]["x"] == list(range(BATCHES))
    assert traces["state files kept"]["y"] == [f for _, f, _ in points]
    assert traces["bytes kept"]["y"] == [s for _, _, s in points]
    last = {r["store"]: r for r in rows if r["latest_batch"] == BATCHES - 1}
    assert points[-1][1:] == (sum(r["files_kept"] for r in last.values()), sum(r["bytes_kept"] for r in last.values()))  # type: ignore[misc]


def test_a_store_left_out_of_a_pass_counts_at_its_last_value() -> None:
    rows = [
        PassRecord(1, "state/0/0", 5, 2, files_kept=10, bytes_kept=100).to_json(),
        PassRecord(1, "state/0/1", 5, 2, files_kept=7, bytes_kept=70).to_json(),
        PassRecord(2, "state/0/0", 6, 2, files_kept=12, bytes_kept=120).to_json(),  # the budget ran out before state/0/1
        PassRecord(3, "state/0/1", 7, 2, error="OSError: down").to_json(),  # a failed pass is no measurement
    ]
    assert kept_per_batch(rows) == [(5, 17, 170), (6, 19, 190)]


@pytest.mark.parametrize(
    "rows",
    [
        None,  # no maintenance.jsonl: maintenance off, or a run from before it
        [{"pass_no": 1, "store": "state/0/0", "latest_batch": 0, "versions_kept": 1, "files_deleted": 0}],  # records without the fields
        [{"pass_no": 1, "store": "state/0/0", "latest_batch": "x", "files_kept": True, "bytes_kept": -1}],  # nonsense values
    ],
)
def test_no_usable_records_no_chart_and_the_report_renders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[dict[str, object]] | None
) -> None:
    j = job(tmp_path)
    for b in range(3):
        j.batch(b)
    if rows is not None:
        j.run.write_maintenance(rows)
    code, _, err = run_cli(capsys, "report", str(j.run.root))
    assert code == 0, err
    page = (j.run.root / "report.html").read_text()
    assert 'id="lineage-section"' in page  # the report is there ...
    assert "checkpoint-size" not in page  # ... without the chart
