"""A holder killed at any step of a commit or of a takeover, a torn WAL, a record of another boot,
and a query restarted at the same checkpoint path: the next process that claims the shared
directory serves exactly the state a fresh provider rebuilds from the checkpoint (issue 62).

Each holder is a real child process, stopped at the step by a failpoint `hold` (recorded in the
control directory when it starts: the event the test waits on) and then sent SIGKILL: no close,
no flush, its unsynced WAL as the kernel has it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from checkpoint_helpers import commit, state_at
from net_helpers import wait_for

from statebed_store import CheckpointRef, SnapshotUploader, StateStoreProvider, StoreId, StoreOptions, open_storage
from statebed_store.failpoint_control import Control
from statebed_store.failpoints import CONTROL_ENV
from statebed_store.local_dirs import local_root, store_dir
from statebed_store.naming import CHANGELOG, DB_DIR, HELD_FILE
from statebed_store.store_files import StoreFiles

STORE = StoreId(0, 0)

HOLDER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from statebed_store import SnapshotUploader, StateStoreProvider, StoreId, StoreOptions, open_storage
    ckpt, local, fmt, base, n, step = sys.argv[1:7]
    storage = open_storage(Path(ckpt))
    options = StoreOptions(local_dir=Path(local), snapshot_interval=2, format=fmt)
    p = StateStoreProvider(storage, StoreId(0, 0), options, uploader=SnapshotUploader(), share=True)
    base = tuple(json.loads(base))
    def put(txn, v):
        txn.put_many([b"k", b"n%d" % v] + [b"bulk%03d" % i for i in range(200)], [b"%d" % v, b"x"] + [b"%d" % v * 100] * 200)
    for _ in range(int(n)):
        with p.load(*base) as txn:
            put(txn, base[0] + 1)
            r = txn.commit()
        base = (r.version, r.checkpoint_id)
    txn = p.load(*base)  # a takeover, if there is one to make, happens here
    print(json.dumps({"base": base, "resumes": p.metrics.resumes}), flush=True)
    put(txn, base[0] + 1)
    if step == "mid-transaction":
        print(json.dumps({"written": True}), flush=True)
        sys.stdin.read()
    r = txn.commit()  # the failpoint armed for this step holds it here
    print(json.dumps({"committed": [r.version, r.checkpoint_id]}), flush=True)
    sys.stdin.read()
    """
)

COMMIT_STEPS = [
    "mid-transaction",
    "changelog.upload.before",
    "changelog.upload.after",
    "commit.identity.before",
    "commit.identity.after",
    "after-commit",
]


@dataclass
class Killed:
    base: CheckpointRef  # the last commit the holder reported
    resumes: int  # how many instances the holder itself took over
    final: CheckpointRef | None  # the commit it returned before it was killed, if any


def kill_holder(tmp_path: Path, step: str, *, base: CheckpointRef = CheckpointRef(0), n: int = 2, fmt: str = "v2") -> Killed:
    """Run a holder that commits `n` versions from `base`, then SIGKILL it at `step` of the next commit."""
    control = Control(tmp_path / "control" / f"{step}-{base.version}" / "control.json")
    control.path.parent.mkdir(parents=True)
    hits = n  # each point is hit once a commit: the holder's (n+1)th is the one
    control.arm(f"{step}={hits}*off->hold(120000)" if "." in step else "changelog.upload.before=off")
    env = {**os.environ, CONTROL_ENV: str(control.path)}
    args = [str(tmp_path / "ckpt"), str(tmp_path / "local"), fmt, json.dumps([base.version, base.id]), str(n), step]
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        head = json.loads(proc.stdout.readline())
        final = None
        if step == "mid-transaction":
            assert json.loads(proc.stdout.readline()) == {"written": True}
        elif step == "after-commit":
            final = CheckpointRef(*json.loads(proc.stdout.readline())["committed"])
        else:
            wait_for(lambda: [f for f in control.firings() if f["failpoint"] == step and f["action"].startswith("hold")], 60)
        proc.kill()  # SIGKILL, at the step: our own child, not yet reaped
        assert proc.wait(timeout=60) == -9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    return Killed(CheckpointRef(*head["base"]), head["resumes"], final)


def options(tmp_path: Path, fmt: str = "v2", **more: object) -> StoreOptions:
    return StoreOptions(local_dir=tmp_path / "local", snapshot_interval=2, format=fmt, lock_timeout_s=30).with_(**more)  # type: ignore[arg-type]


def successor(tmp_path: Path, fmt: str = "v2", **more: object) -> StateStoreProvider:
    return StateStoreProvider(
        open_storage(tmp_path / "ckpt"), STORE, options(tmp_path, fmt, **more), uploader=SnapshotUploader(), share=True
    )


def truth(tmp_path: Path, ref: CheckpointRef, fmt: str = "v2") -> dict[bytes, bytes]:
    local = tmp_path / "fresh" / f"{ref.version}-{ref.id}"
    opts = StoreOptions(local_dir=local, format=fmt)  # type: ignore[arg-type]
    with StateStoreProvider(open_storage(tmp_path / "ckpt"), STORE, opts, uploader=SnapshotUploader()) as fresh:
        return state_at(fresh, ref)


def committed(tmp_path: Path, version: int) -> list[CheckpointRef]:
    """The checkpoints of `version` that reached storage (a holder killed after its upload left one)."""
    return [r for r in StoreFiles(open_storage(tmp_path / "ckpt"), STORE).refs(CHANGELOG) if r.version == version]


def shared_dir(tmp_path: Path) -> Path:
    return store_dir(local_root(tmp_path / "local", open_storage(tmp_path / "ckpt").url), STORE)


@pytest.fixture
def cleanup() -> Iterator[list[StateStoreProvider]]:
    opened: list[StateStoreProvider] = []
    yield opened
    for p in opened:
        p.close()


@pytest.mark.parametrize("step", COMMIT_STEPS)
def test_a_holder_killed_at_any_step_of_a_commit_leaves_nothing_wrong_to_take_over(
    tmp_path: Path, step: str, cleanup: list[StateStoreProvider]
) -> None:
    killed = kill_holder(tmp_path, step)
    after = committed(tmp_path, killed.base.version + 1)
    assert (killed.final is not None) == (step == "after-commit")
    assert bool(after) == (step not in ("mid-transaction", "changelog.upload.before"))  # the control: where the commit stopped
    p = successor(tmp_path)
    cleanup.append(p)
    for ref in after:  # the newest first: a takeover, if any, is at it
        assert state_at(p, ref) == truth(tmp_path, ref)
    assert p.metrics.resumes == (1 if step == "after-commit" else 0)  # only a finished commit is taken over
    assert state_at(p, killed.base) == truth(tmp_path, killed.base)


@pytest.mark.parametrize("step", ["mid-transaction", "changelog.upload.after", "after-commit"])
def test_a_process_killed_while_it_holds_a_taken_over_instance_leaves_nothing_wrong(
    tmp_path: Path, step: str, cleanup: list[StateStoreProvider]
) -> None:
    first = kill_holder(tmp_path, "after-commit")
    assert first.final is not None
    second = kill_holder(tmp_path, step, base=first.final, n=0)  # takes over the first one's instance, then is killed
    assert second.resumes == 1
    p = successor(tmp_path)
    cleanup.append(p)
    for ref in committed(tmp_path, first.final.version + 1):
        assert state_at(p, ref) == truth(tmp_path, ref)
    assert p.metrics.resumes == (1 if step == "after-commit" else 0)
    assert state_at(p, first.final) == truth(tmp_path, first.final)


@pytest.mark.parametrize("cut", ["the identity record", "half the WAL"])
def test_a_torn_wal_is_never_taken_over_at_the_version_its_record_names(
    tmp_path: Path, cut: str, cleanup: list[StateStoreProvider]
) -> None:
    """held.json names version 3; the WAL lost its tail (a crash of the host's page cache, a bad
    copy): the instance holds less than version 3, and its own identity record went with the rows."""
    killed = kill_holder(tmp_path, "after-commit")
    assert killed.final is not None and killed.final.version == 3  # no snapshot at 3: its rows are in the WAL only
    db = shared_dir(tmp_path) / DB_DIR
    wal = max(db.glob("*.log"), key=lambda f: f.stat().st_size)
    size = wal.stat().st_size
    assert size > 20_000  # the control: version 3's writes are in it
    with open(wal, "r+b") as f:
        f.truncate(size - 20 if cut == "the identity record" else size // 2)
    p = successor(tmp_path)
    cleanup.append(p)
    assert state_at(p, killed.final) == truth(tmp_path, killed.final)
    assert p.metrics.resumes == 0


def test_a_record_of_another_boot_is_ignored(tmp_path: Path, cleanup: list[StateStoreProvider]) -> None:
    killed = kill_holder(tmp_path, "after-commit")
    assert killed.final is not None
    held = shared_dir(tmp_path) / HELD_FILE
    record = json.loads(held.read_text())
    assert record["boot_id"]  # the control: the holder recorded this boot
    held.write_text(json.dumps({**record, "boot_id": "00000000-0000-0000-0000-000000000000"}))
    p = successor(tmp_path)
    cleanup.append(p)
    assert state_at(p, killed.final) == truth(tmp_path, killed.final)
    assert p.metrics.resumes == 0


def rewrite_version(tmp_path: Path, base: CheckpointRef, fmt: str) -> CheckpointRef:
    """Another run (a restarted query, a zombie) commits `base.version + 1` again from `base`."""
    opts = StoreOptions(local_dir=tmp_path / "other-run", format=fmt)  # type: ignore[arg-type]
    with StateStoreProvider(open_storage(tmp_path / "ckpt"), STORE, opts, uploader=SnapshotUploader()) as other:
        r = commit(other, base, {b"k": b"rewritten", b"other-run": b"1"})
    return CheckpointRef(r.version, r.checkpoint_id)


def test_v1_takes_nothing_over_when_a_restarted_query_rewrote_the_version(tmp_path: Path, cleanup: list[StateStoreProvider]) -> None:
    """V1 names a version's file by its number alone: a restarted query at the same path (or a
    zombie) overwrites `3.changelog`. Spark's V1 lost its instance with its JVM; statebed's V1 must too."""
    killed = kill_holder(tmp_path, "after-commit", fmt="v1")
    assert killed.final == CheckpointRef(3)
    rewritten = rewrite_version(tmp_path, killed.base, "v1")
    assert rewritten == CheckpointRef(3)
    p = successor(tmp_path, "v1")
    cleanup.append(p)
    assert state_at(p, rewritten) == truth(tmp_path, rewritten, "v1")
    assert p.metrics.resumes == 0
    assert not (shared_dir(tmp_path) / HELD_FILE).exists()


def test_v2_after_a_restart_at_the_same_path_serves_each_attempt_its_own_state(tmp_path: Path, cleanup: list[StateStoreProvider]) -> None:
    killed = kill_holder(tmp_path, "after-commit")
    assert killed.final is not None
    rewritten = rewrite_version(tmp_path, killed.base, "v2")
    assert rewritten.version == killed.final.version and rewritten.id != killed.final.id
    p = successor(tmp_path)
    cleanup.append(p)
    assert state_at(p, rewritten) == truth(tmp_path, rewritten)
    assert state_at(p, killed.final) == truth(tmp_path, killed.final)
    assert truth(tmp_path, rewritten) != truth(tmp_path, killed.final)  # the control: two states, one version


def test_v1_lends_nothing_unless_asked(tmp_path: Path, cleanup: list[StateStoreProvider]) -> None:
    storage = open_storage(tmp_path / "ckpt")
    a = successor(tmp_path, "v1")
    cleanup.append(a)
    r = commit(a, CheckpointRef(0), {b"k": b"held by a"})
    b = successor(tmp_path, "v1")  # a holds the shared directory: b's is private
    cleanup.append(b)
    assert state_at(b, CheckpointRef(r.version)) == {b"k": b"held by a"}
    assert (b.metrics.borrows, b.metrics.snapshot_loads + b.metrics.changelogs_replayed) == (0, 1)
    asked = successor(tmp_path, "v1", share_v1=True)
    cleanup.append(asked)
    a2 = StateStoreProvider(storage, STORE, options(tmp_path, "v1", share_v1=True), uploader=SnapshotUploader(), share=True)
    cleanup.append(a2)
    commit(a2, CheckpointRef(0), {b"k": b"held by a2"})
    assert state_at(asked, CheckpointRef(1))  # the control: asked explicitly, V1 borrows
    assert asked.metrics.borrows == 1
