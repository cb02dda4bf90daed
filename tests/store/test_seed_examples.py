"""The seed's load examples (SPARK-49374, "State Store Load"), produced through the public API.

Seed ids map to the ids the store draws: d8e2ca47 -> v20, ef6618c2 -> losing attempt of
21, f4d05ac9 -> committed 21, 4489578d -> 22, 689aa6bd -> committed 23, 8205c96f ->
losing attempt of 23, 32e3cc2a -> 24. Every attempt writes different values, so loading
a file of the wrong attempt would show in the state, not only in the plan.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoint_helpers import commit, ref_of, run_versions, state_at

from statebed_store import (
    SnapshotUploader,
    StateStoreProvider,
    Storage,
    StoreFiles,
    StoreId,
    StoreOptions,
    check_plan,
    failpoints,
    plan_load,
)
from statebed_store.naming import SNAPSHOT

STORE = StoreId(0, 3)


class History:
    """Versions 1..20 (snapshot at 20), two attempts of 21, then 22 on the committed 21."""

    def __init__(self, storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp: Path) -> None:
        self.storage, self.uploader = storage, uploader
        opts = options.with_(snapshot_interval=500)  # snapshots only where the example says
        self.p1 = StateStoreProvider(storage, STORE, opts.with_(local_dir=tmp / "exec1"), uploader=uploader)
        self.p2 = StateStoreProvider(storage, STORE, opts.with_(local_dir=tmp / "exec2"), uploader=uploader)
        self.opts = opts
        self.tmp = tmp
        v19, state = run_versions(self.p1, 19)
        self.v20 = ref_of(commit(self.p1, v19, {b"a": b"20"}, snapshot=True))
        assert uploader.drain(30)  # the examples start from an uploaded 20_d8e2ca47.zip
        state[b"a"] = b"20"
        # version 21: two attempts on two executors; the driver commits the second (f4d05ac9)
        self.v21_loser = ref_of(commit(self.p1, self.v20, {b"a": b"21-ef6618c2", b"only-loser": b"x"}))
        self.v21 = ref_of(commit(self.p2, self.v20, {b"a": b"21-f4d05ac9"}, deletes=[b"key-0001"]))
        state[b"a"] = b"21-f4d05ac9"
        del state[b"key-0001"]
        self.v22 = ref_of(commit(self.p2, self.v21, {b"b": b"22"}))
        state[b"b"] = b"22"
        self.state22 = state

    def fresh(self, name: str) -> StateStoreProvider:
        """A provider on a new host: nothing cached, everything comes from storage."""
        return StateStoreProvider(self.storage, STORE, self.opts.with_(local_dir=self.tmp / name), uploader=self.uploader)

    def files(self) -> StoreFiles:
        return StoreFiles(self.storage, STORE)

    def close(self) -> None:
        self.uploader.drain(30)
        self.p1.close()
        self.p2.close()


@pytest.fixture
def history(storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp_path: Path) -> History:
    h = History(storage, options, uploader, tmp_path)
    yield h
    h.close()


def test_lineages_match_the_seed(history: History) -> None:
    files = history.files()
    v23 = ref_of(commit(history.p2, history.v22, {b"c": b"23"}))
    assert files.lineage_of(history.v21) == (history.v20,)
    assert files.lineage_of(history.v21_loser) == (history.v20,)
    files = history.files()
    assert files.lineage_of(history.v22) == (history.v20, history.v21)
    assert files.lineage_of(v23) == (history.v20, history.v21, history.v22)


def test_example1_own_snapshot_is_used(history: History) -> None:
    v23 = ref_of(commit(history.p2, history.v22, {b"c": b"23"}, snapshot=True))
    assert history.uploader.drain(30)
    files = history.files()
    plan = plan_load(files, v23)
    assert plan.snapshot == v23 and plan.changelogs == ()
    check_plan(files, plan)
    fresh = history.fresh("host3")
    assert state_at(fresh, v23) == {**history.state22, b"c": b"23"}
    assert fresh.metrics.snapshot_loads == 1 and fresh.metrics.changelogs_replayed == 0
    fresh.close()


@pytest.mark.parametrize("losing_snapshot", [False, True], ids=["delta-only", "with-losing-23-snapshot"])
def test_example2_lineage_from_changelog(history: History, losing_snapshot: bool) -> None:
    # 23 committed (689aa6bd) as a changelog only; variant 2 adds a losing attempt 8205c96f
    # of 23 that did get a snapshot. Both the loser's changelog and zip must be ignored.
    v23 = ref_of(commit(history.p2, history.v22, {b"c": b"23-689aa6bd"}, snapshot=False))
    if losing_snapshot:
        loser = ref_of(commit(history.p1, history.v22, {b"c": b"23-8205c96f", b"poison": b"1"}, snapshot=True))
        assert history.uploader.drain(30)
        assert history.files().has_snapshot(loser)
    files = history.files()
    plan = plan_load(files, v23)
    assert plan.snapshot == history.v20
    assert plan.changelogs == (history.v21, history.v22, v23)
    check_plan(files, plan)
    fresh = history.fresh("host3")
    assert state_at(fresh, v23) == {**history.state22, b"c": b"23-689aa6bd"}
    fresh.close()


@pytest.mark.parametrize("losing_snapshot", [False, True], ids=["plain", "with-losing-23-snapshot"])
def test_example3_trace_past_a_presumed_snapshot(history: History, losing_snapshot: bool) -> None:
    # 23 was meant to be a snapshot (so 24's lineage starts at it) but its upload failed.
    with failpoints.armed("snapshot.upload.before", "drop"):
        v23 = ref_of(commit(history.p2, history.v22, {b"c": b"23"}, snapshot=True))
        assert history.uploader.drain(30)
    v24 = ref_of(commit(history.p2, v23, {b"d": b"24"}))
    if losing_snapshot:
        loser = ref_of(commit(history.p1, history.v22, {b"c": b"23-8205c96f"}, snapshot=True))
        assert history.uploader.drain(30)
        assert history.files().has_snapshot(loser)
    files = history.files()
    assert not files.has_snapshot(v23)
    assert files.lineage_of(v24) == (v23,)  # only up to the presumed snapshot
    plan = plan_load(files, v24)
    assert plan.snapshot == history.v20
    assert plan.changelogs == (history.v21, history.v22, v23, v24)
    check_plan(files, plan)
    fresh = history.fresh("host3")
    assert state_at(fresh, v24) == {**history.state22, b"c": b"23", b"d": b"24"}
    assert fresh.metrics.changelogs_replayed == 4
    fresh.close()


def test_two_snapshots_of_one_version_are_both_uploaded(history: History) -> None:
    """Same executor runs version 23 twice (foreachBatch rerun): both snapshots must be uploaded."""
    before = history.uploader.uploaded
    first = ref_of(commit(history.p2, history.v22, {b"c": b"23-689aa6bd"}, snapshot=True))
    second = ref_of(commit(history.p2, history.v22, {b"c": b"23-8205c96f"}, snapshot=True))
    assert first != second and first.version == second.version == 23
    assert history.uploader.drain(30)
    assert history.uploader.uploaded - before == 2
    files = history.files()
    assert files.has_snapshot(first) and files.has_snapshot(second)
    assert files.snapshot_metadata(first).lineage == (history.v20, history.v21, history.v22)
    # The driver committed the first; the executor holds the second and must reload.
    loads = history.p2.metrics.snapshot_loads
    assert state_at(history.p2, first)[b"c"] == b"23-689aa6bd"
    assert history.p2.metrics.snapshot_loads == loads + 1
    assert {r for r in files.refs(SNAPSHOT) if r.version == 23} == {first, second}


def test_losing_attempt_is_never_loaded_by_version(history: History) -> None:
    """Both attempts of 21 exist; loading 22 follows the lineage to the committed one."""
    fresh = history.fresh("host3")
    state = state_at(fresh, history.v22)
    assert b"only-loser" not in state and state[b"a"] == b"21-f4d05ac9"
    assert state_at(fresh, history.v21_loser)[b"only-loser"] == b"x"  # still loadable by its own id
    fresh.close()
    # both attempts of 21 are on storage under their own ids; the plan for 22 names only the committed one
    files = history.files()
    assert history.v21_loser.id != history.v21.id
    assert {r for r in files.refs() if r.version == 21} == {history.v21, history.v21_loser}
    plan = plan_load(files, history.v22)
    assert plan.snapshot == history.v20 and plan.changelogs == (history.v21, history.v22)
