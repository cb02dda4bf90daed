"""Model-based test: random interleavings of attempts, commits, snapshot faults, cleanup and restarts.

The model is the committed lineage as a driver sees it: for every committed version, the
state the winning attempt produced. Attempts of one version write different
(nondeterministic) values, snapshots are dropped, fail or are delayed at random, executors
restart and lose their local instances, cleanup keeps the last few versions. Property: every
load of a retained committed `(version, id)`, on any executor, yields exactly the model's state.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from statebed_store import (
    CheckpointRef,
    HeaderCache,
    SnapshotUploader,
    StateStoreProvider,
    Storage,
    StoreId,
    StoreOptions,
    cleanup_store,
    failpoints,
    open_storage,
)

STORE = StoreId(0, 0)
KEYS = [b"k%d" % i for i in range(6)]
EXECUTORS = 3

op = st.tuples(st.sampled_from(KEYS), st.booleans())  # (key, delete?)


def machine(make_storage: Callable[[], Storage]) -> type[RuleBasedStateMachine]:
    class StoreMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.tmp = Path(tempfile.mkdtemp(prefix="statebed-prop-"))
            self.storage = make_storage()
            self.uploader = SnapshotUploader()
            self.opts = StoreOptions(snapshot_interval=3, snapshot_upload_attempts=2, snapshot_upload_backoff_s=0.0)
            self.execs: list[StateStoreProvider | None] = [None] * EXECUTORS
            self.committed: list[tuple[CheckpointRef, dict[bytes, bytes]]] = [(CheckpointRef(0), {})]
            self.oldest_retained = 0
            self.cache = HeaderCache()
            self.serial = 0

        def executor(self, i: int) -> StateStoreProvider:
            p = self.execs[i]
            if p is None:
                p = StateStoreProvider(
                    self.storage, STORE, self.opts.with_(local_dir=self.tmp / f"exec{i}"), uploader=self.uploader, cache=self.cache
                )
                assert p.cache is self.cache  # every executor and cleanup share one header cache, even while it is empty
                self.execs[i] = p
            return p

        @initialize()
        def start(self) -> None:
            failpoints.disarm()

        @rule(
            attempts=st.lists(
                st.tuples(st.integers(0, EXECUTORS - 1), st.lists(op, min_size=1, max_size=4), st.sampled_from([None, True, False])),
                min_size=1,
                max_size=3,
            ),
            winner=st.integers(0, 2),
        )
        def batch(self, attempts: list, winner: int) -> None:
            """One batch: 1-3 attempts of the next version; the driver commits one of them."""
            base, state = self.committed[-1]
            results = []
            for i, (ex, ops, snap) in enumerate(attempts):
                self.serial += 1
                expected = dict(state)
                with self.executor(ex).load(base.version, base.id, task_info=f"attempt {i}") as txn:
                    for key, delete in ops:
                        if delete:
                            txn.delete(key)
                            expected.pop(key, None)
                        else:
                            value = b"v%d-attempt%d-%d" % (base.version + 1, i, self.serial)  # attempts differ
                            txn.put(key, value)
                            expected[key] = value
                    r = txn.commit(snapshot=snap)
                assert r.base_id == base.id and r.version == base.version + 1
                results.append((CheckpointRef(r.version, r.checkpoint_id), expected))
            self.committed.append(results[winner % len(results)])

        @rule(i=st.integers(0, EXECUTORS - 1))
        def restart_executor(self, i: int) -> None:
            """The executor dies: its local instance is gone (queued snapshots may still upload)."""
            p = self.execs[i]
            if p is not None:
                p.close()
                self.execs[i] = None
                shutil.rmtree(self.tmp / f"exec{i}", ignore_errors=True)

        @rule(mode=st.sampled_from(["off", "drop", "50%drop", "error", "30%delay(30)", "1*error"]))
        def snapshot_faults(self, mode: str) -> None:
            failpoints.arm("snapshot.upload.before", mode)

        @rule()
        def drain_uploads(self) -> None:
            assert self.uploader.drain(30)

        @precondition(lambda self: len(self.committed) > 2)
        @rule(keep=st.integers(1, 4))
        def cleanup(self, keep: int) -> None:
            # Retention only moves forward, as a driver's would: never back below what was kept.
            first = max(self.oldest_retained, self.committed[-min(keep, len(self.committed))][0].version, 1)
            retained = [r for r, _ in self.committed if r.version >= first]
            cleanup_store(self.storage, STORE, retained, cache=self.cache, sst_orphan_grace_s=0.0)
            self.oldest_retained = max(self.oldest_retained, retained[0].version)

        @precondition(lambda self: len(self.committed) > 1)
        @rule(i=st.integers(0, EXECUTORS - 1), pick=st.integers(0, 1000))
        def load_committed(self, i: int, pick: int) -> None:
            loadable = [c for c in self.committed if c[0].version >= max(self.oldest_retained, 1)]
            ref, expected = loadable[pick % len(loadable)]
            txn = self.executor(i).load(ref.version, ref.id)
            try:
                assert dict(txn.items()) == expected, f"state of {ref} differs from the model"
            finally:
                txn.abort()

        @invariant()
        def latest_is_loadable_on_a_new_host(self) -> None:
            # Cheap enough to check after every step only every few versions.
            ref, expected = self.committed[-1]
            if ref.version == 0 or ref.version % 4:
                return
            p = StateStoreProvider(
                self.storage, STORE, self.opts.with_(local_dir=self.tmp / f"fresh{uuid.uuid4().hex[:6]}"), uploader=self.uploader
            )
            try:
                txn = p.load(ref.version, ref.id)
                try:
                    assert dict(txn.items()) == expected
                finally:
                    txn.abort()
            finally:
                p.close()

        def teardown(self) -> None:
            failpoints.disarm()
            self.uploader.drain(30)
            for p in self.execs:
                if p is not None:
                    p.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    return StoreMachine


PROFILE = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much], derandomize=True)


def test_random_histories_local(tmp_path: Path) -> None:
    n = iter(range(10**6))
    run_state_machine_as_test(
        machine(lambda: open_storage(tmp_path / f"ckpt{next(n)}")),
        settings=settings(max_examples=60, stateful_step_count=30, **PROFILE),
    )


@pytest.mark.s3
def test_random_histories_s3(s3_server) -> None:  # type: ignore[no-untyped-def]
    from conftest import s3_storage

    run_state_machine_as_test(
        machine(lambda: s3_storage(s3_server)),
        settings=settings(max_examples=20, stateful_step_count=25, **PROFILE),
    )
