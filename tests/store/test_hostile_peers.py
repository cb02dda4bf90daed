"""The loan desk's trust boundary (issue 62): a borrower serves only a copy that proves its own
`(version, id)`, from a lender of its own uid that its advertisement names; a desk answers only
peers of its own uid; a malformed, oversized or late answer means a rebuild, never a failed task;
a copy nobody took is removed by its lender, and never recreates a directory its borrower removed.

The hostile peers are real processes on real abstract sockets: forked children (the test runs as
root; another uid is `nobody`, set in the child), since a fresh interpreter as `nobody` could not
read this one's installation."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from checkpoint_helpers import commit, ref_of, state_at
from net_helpers import wait_for

from statebed_store import CheckpointRef, SnapshotUploader, StateStoreProvider, StoreId, StoreOptions, lending, open_storage
from statebed_store.failpoint_control import Control
from statebed_store.failpoints import CONTROL_ENV
from statebed_store.local_dirs import local_root, store_dir
from statebed_store.naming import LOAN_PREFIX
from statebed_store.storage.base import Storage

STORE = StoreId(0, 0)
NOBODY = 65534


def setup(tmp_path: Path) -> tuple[Storage, StoreOptions]:
    return open_storage(tmp_path / "ckpt"), StoreOptions(local_dir=tmp_path / "local", lock_timeout_s=30)


def provider(storage: Storage, options: StoreOptions) -> StateStoreProvider:
    return StateStoreProvider(storage, STORE, options, uploader=SnapshotUploader(), share=True)


def truth(storage: Storage, ref: CheckpointRef, tmp_path: Path) -> dict[bytes, bytes]:
    with StateStoreProvider(storage, STORE, StoreOptions(local_dir=tmp_path / "fresh"), uploader=SnapshotUploader()) as fresh:
        return state_at(fresh, ref)


def lenders_dir(storage: Storage, options: StoreOptions) -> Path:
    sdir = store_dir(local_root(options.local_dir, storage.url), STORE)
    return sdir.with_name(sdir.name + ".lenders")


def advert_of(storage: Storage, options: StoreOptions, pid: int) -> Path:
    (entry,) = (e for e in lenders_dir(storage, options).iterdir() if e.name.split("-")[0] == str(pid))
    return entry


def two_attempts(storage: Storage, tmp_path: Path) -> tuple[CheckpointRef, CheckpointRef]:
    """Two attempts of version 1 with different state; the second is the one the query committed."""
    refs = []
    for tag in (b"first attempt", b"committed attempt"):
        with StateStoreProvider(storage, STORE, StoreOptions(local_dir=tmp_path / tag.decode()), uploader=SnapshotUploader()) as w:
            refs.append(ref_of(commit(w, CheckpointRef(0), {b"k": tag})))
    return refs[0], refs[1]


@contextlib.contextmanager
def forked(body: Callable[[Callable[[str], None]], None], *, uid: int | None) -> Iterator[Callable[[], str]]:
    """Run `body(say)` in a forked child (as `uid` if given); `next_line()` reads what it says."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: sockets and json only, then _exit (no pytest teardown, no atexit)
        os.close(r)
        try:
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)

            def say(line: str) -> None:
                os.write(w, line.encode() + b"\n")

            body(say)
        except BaseException:
            traceback.print_exc()  # shown in the test's captured stderr
        finally:
            os._exit(0)
    os.close(w)
    reader = os.fdopen(r)
    try:
        yield lambda: reader.readline().strip()
    finally:
        reader.close()
        os.kill(pid, signal.SIGKILL)  # our own child, not yet reaped: the PID is still its
        os.waitpid(pid, 0)


def read_line(conn: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def relay(listen_as: str, desk: str, claim: CheckpointRef) -> Callable[[Callable[[str], None]], None]:
    """A peer on `listen_as` that forwards one request to the live desk `desk` and rewrites the
    answer's claim to `claim` (the relay the issue names), then forwards what the borrower says."""

    def body(say: Callable[[str], None]) -> None:
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind("\0" + listen_as)
        srv.listen(1)
        say("ready")
        conn, _ = srv.accept()
        request = read_line(conn)
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        up.settimeout(20)
        up.connect("\0" + desk)
        up.sendall(request)
        answer = read_line(up)
        say("answered" if answer else "refused")
        msg = json.loads(answer or b'{"loan": null}')
        if msg.get("loan"):
            msg["loan"]["loaded"] = [claim.version, claim.id]
            msg["loan"]["lineage"] = [[claim.version, claim.id]]
        conn.sendall(json.dumps(msg).encode() + b"\n")
        up.sendall(read_line(conn))  # the borrower's acknowledgement, if any
        read_line(up)

    return body


DEAD_LENDER = textwrap.dedent(
    """
    import json, os, signal, sys
    from pathlib import Path
    from statebed_store import SnapshotUploader, StateStoreProvider, StoreId, StoreOptions, open_storage
    p = StateStoreProvider(open_storage(Path(sys.argv[1])), StoreId(0, 0), StoreOptions(local_dir=Path(sys.argv[2])),
                           uploader=SnapshotUploader(), share=True)
    os.kill(os.getpid(), signal.SIGKILL)  # its advertisement stays; its socket goes with it
    """
)


def dead_lenders_name(storage: Storage, options: StoreOptions, tmp_path: Path) -> tuple[Path, str]:
    proc = subprocess.run([sys.executable, "-c", DEAD_LENDER, str(tmp_path / "ckpt"), str(options.local_dir)], timeout=120)
    assert proc.returncode == -signal.SIGKILL
    entry = advert_of(storage, options, proc_pid_of(storage, options, exclude=os.getpid()))
    return entry, entry.read_text()


def proc_pid_of(storage: Storage, options: StoreOptions, *, exclude: int) -> int:
    (pid,) = {int(e.name.split("-")[0]) for e in lenders_dir(storage, options).iterdir()} - {exclude}
    return pid


LIVE_LENDER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from statebed_store import CheckpointRef, SnapshotUploader, StateStoreProvider, StoreId, StoreOptions, open_storage
    p = StateStoreProvider(open_storage(Path(sys.argv[1])), StoreId(0, 0), StoreOptions(local_dir=Path(sys.argv[2])),
                           uploader=SnapshotUploader(), share=True)
    with p.load(int(sys.argv[3]), sys.argv[4]) as txn:
        txn.put(b"k", b"the first attempt, then more")
        txn.commit()
    print("lending", flush=True)
    sys.stdin.read()
    p.close()
    """
)


@contextlib.contextmanager
def live_lender(storage: Storage, options: StoreOptions, tmp_path: Path, base: CheckpointRef) -> Iterator[str]:
    """A lender in its own process, at a version on top of `base` (not the committed attempt);
    its advertisement removed, so a borrower finds it only through a peer that relays to it."""
    args = [str(tmp_path / "ckpt"), str(options.local_dir), str(base.version), str(base.id)]
    proc = subprocess.Popen([sys.executable, "-c", LIVE_LENDER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "lending"
        entry = advert_of(storage, options, proc.pid)
        desk = entry.read_text()
        entry.unlink()
        yield desk
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0


@pytest.mark.parametrize("uid", [NOBODY, None], ids=["another uid", "the same uid"])
def test_a_peer_on_a_dead_lenders_name_relaying_a_live_lender_is_never_believed(tmp_path: Path, uid: int | None) -> None:
    storage, options = setup(tmp_path)
    first, committed = two_attempts(storage, tmp_path)
    with live_lender(storage, options, tmp_path, first) as desk:
        dead_entry, dead_name = dead_lenders_name(storage, options, tmp_path)
        with forked(relay(dead_name, desk, committed), uid=uid) as next_line:
            assert next_line() == "ready"
            b = provider(storage, options)
            assert state_at(b, committed) == {b"k": b"committed attempt"} == truth(storage, committed, tmp_path)
            assert b.metrics.borrows == 0
            assert not dead_entry.exists()  # its name was held by another process: the advertisement was stale
            b.close()


def test_a_desk_answers_no_peer_of_another_uid(tmp_path: Path) -> None:
    storage, options = setup(tmp_path)
    live = provider(storage, options)
    commit(live, CheckpointRef(0), {b"k": b"1"})
    desk = advert_of(storage, options, os.getpid()).read_text()
    sdir = store_dir(local_root(options.local_dir, storage.url), STORE)
    dest = sdir / f"{LOAN_PREFIX}asked-by-nobody"

    def ask(say: Callable[[str], None]) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(20)
        s.connect("\0" + desk)
        try:
            s.sendall(json.dumps({"store": str(sdir), "dest": str(dest)}).encode() + b"\n")
            say(read_line(s).decode().strip() or "closed")
        except (ConnectionResetError, BrokenPipeError):  # the desk hung up on a request it did not read
            say("closed")

    with forked(ask, uid=NOBODY) as next_line:
        assert next_line() == "closed"
    assert not dest.exists()
    with forked(ask, uid=None) as next_line:  # the control: the same request from our own uid gets a copy
        assert json.loads(next_line())["loan"] is not None
    wait_for(lambda: not dest.exists(), 30)  # and the copy nobody acknowledged is removed by the desk
    live.close()


def test_a_same_uid_peer_that_lies_about_what_its_copy_holds_is_caught_by_the_copy(tmp_path: Path) -> None:
    """Inside the trust boundary a peer may still relay another instance under a false claim: the
    copy's own identity record says what it holds, and the borrower rebuilds."""
    storage, options = setup(tmp_path)
    first, committed = two_attempts(storage, tmp_path)
    token = "0123456789abcdef"

    def liar(desk: str) -> Callable[[Callable[[str], None]], None]:
        def body(say: Callable[[str], None]) -> None:
            (lenders_dir(storage, options) / f"{os.getpid()}-{token}").write_text("liar")
            relay(f"statebed-lend-{os.getpid()}-{token}", desk, committed)(say)

        return body

    with live_lender(storage, options, tmp_path, first) as desk, forked(liar(desk), uid=None) as next_line:
        assert next_line() == "ready"
        b = provider(storage, options)
        assert state_at(b, committed) == {b"k": b"committed attempt"}
        assert next_line() == "answered"  # the control: the lie was told, with a real copy behind it
        assert b.metrics.borrows == 0
        b.close()


def fake_lender(
    storage: Storage, options: StoreOptions, answer: Callable[[socket.socket], None]
) -> Callable[[Callable[[str], None]], None]:
    """A properly advertised peer of our uid that answers one request with `answer`."""

    def body(say: Callable[[str], None]) -> None:
        advert = f"{os.getpid()}-{'f' * 16}"
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(f"\0statebed-lend-{advert}")
        srv.listen(1)
        lenders_dir(storage, options).mkdir(parents=True, exist_ok=True)
        (lenders_dir(storage, options) / advert).write_text(f"statebed-lend-{advert}")
        say("ready")
        conn, _ = srv.accept()
        read_line(conn)
        try:
            answer(conn)
        except OSError:
            pass  # the borrower hung up first (it stops reading an oversized answer)
        say("answered")
        read_line(conn)

    return body


ANSWERS: dict[str, Callable[[socket.socket], None]] = {
    "deeply nested": lambda c: c.sendall(b"[" * 200_000 + b"]" * 200_000 + b"\n"),
    "oversized": lambda c: c.sendall(b'{"loan": "' + b"x" * (lending.MAX_MESSAGE + 10) + b'"}\n'),
    "wrong types": lambda c: c.sendall(b'{"loan": {"loaded": ["1", 2], "lineage": {}, "last_snapshot_version": true, "ssts": 3}}\n'),
    "a claim with no copy": lambda c: c.sendall(
        b'{"loan": {"loaded": [1, null], "lineage": [], "last_snapshot_version": 0, "ssts": []}}\n'
    ),
    "late": lambda c: read_line(c),  # never answers: it waits for the borrower to hang up
}


@pytest.mark.parametrize("kind", list(ANSWERS))
def test_a_malformed_oversized_or_late_answer_means_a_rebuild(tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lending, "REPLY_TIMEOUT_S", 1.0)  # the borrower's patience (the peer's own is its copy's)
    storage, options = setup(tmp_path)
    _, committed = two_attempts(storage, tmp_path)
    with forked(fake_lender(storage, options, ANSWERS[kind]), uid=None) as next_line:
        assert next_line() == "ready"
        b = provider(storage, options)
        assert state_at(b, committed) == truth(storage, committed, tmp_path)
        assert b.metrics.borrows == 0
        if kind != "late":
            assert next_line() == "answered"  # the control: the bad answer was sent
        b.close()


LENDER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from statebed_store import CheckpointRef, SnapshotUploader, StateStoreProvider, StoreId, StoreOptions, open_storage
    p = StateStoreProvider(open_storage(Path(sys.argv[1])), StoreId(0, 0), StoreOptions(local_dir=Path(sys.argv[2])),
                           uploader=SnapshotUploader(), share=True)
    with p.load(0) as txn:
        txn.put(b"k", b"lent")
        r = txn.commit()
    print(json.dumps([r.version, r.checkpoint_id]), flush=True)
    sys.stdin.read()
    p.close()
    """
)


@contextlib.contextmanager
def slow_lender(tmp_path: Path, spec: str) -> Iterator[tuple[CheckpointRef, Control]]:
    """A lender in its own process, its desk held by the failpoint `spec` arms (from its start:
    a process re-reads its control file at most every 0.1 s) until the test releases it."""
    control = Control(tmp_path / "control" / "control.json")
    control.path.parent.mkdir(parents=True)
    control.arm(spec)
    env = {**os.environ, CONTROL_ENV: str(control.path)}
    args = [str(tmp_path / "ckpt"), str(tmp_path / "local")]
    proc = subprocess.Popen([sys.executable, "-c", LENDER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        yield CheckpointRef(*json.loads(proc.stdout.readline())), control
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0


def held(control: Control, point: str) -> Callable[[], bool]:
    return lambda: any(f["failpoint"] == point and f["action"].startswith("hold") for f in control.firings())


def released(control: Control, point: str) -> Callable[[], bool]:
    return lambda: any(f["failpoint"] == point and f["action"] == "released" for f in control.firings())


def test_a_copy_that_lands_after_its_borrower_gave_up_is_removed_by_its_lender(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with slow_lender(tmp_path, "lend.reply.before=1*hold(60000)") as (ref, control):
        copy_landed_late(tmp_path, ref, control, monkeypatch)


def impatient_borrower(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StateStoreProvider:
    """A borrower that gives up on a lender after 1 s (the lender holds the shared directory: its own is private)."""
    monkeypatch.setattr(lending, "REPLY_TIMEOUT_S", 1.0)
    return provider(*setup(tmp_path))


def copy_landed_late(tmp_path: Path, ref: CheckpointRef, control: Control, monkeypatch: pytest.MonkeyPatch) -> None:
    b = impatient_borrower(tmp_path, monkeypatch)
    assert state_at(b, ref) == {b"k": b"lent"}  # it gave up waiting, and rebuilt
    assert b.metrics.borrows == 0
    wait_for(held(control, "lend.reply.before"), 30)
    private = b._dir  # where the late copy landed
    (copy,) = private.glob(f"{LOAN_PREFIX}*")  # the control: a copy landed after the borrower gave up
    control.release("lend.reply.before")
    wait_for(lambda: not copy.exists(), 30)
    b.close()


def test_a_late_loan_never_recreates_a_directory_its_borrower_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with slow_lender(tmp_path, "lend.copy.before=1*hold(60000)") as (ref, control):
        loan_after_close(tmp_path, ref, control, monkeypatch)


def loan_after_close(tmp_path: Path, ref: CheckpointRef, control: Control, monkeypatch: pytest.MonkeyPatch) -> None:
    b = impatient_borrower(tmp_path, monkeypatch)
    private = b._dir
    assert state_at(b, ref) == {b"k": b"lent"}
    wait_for(held(control, "lend.copy.before"), 30)
    b.close()
    assert not private.exists()
    control.release("lend.copy.before")
    wait_for(released(control, "lend.copy.before"), 30)
    monkeypatch.setattr(lending, "REPLY_TIMEOUT_S", 30.0)
    c = provider(*setup(tmp_path))  # the desk answers one request at a time: once c is served, b's is done
    assert state_at(c, ref) == {b"k": b"lent"} and c.metrics.borrows == 1
    assert not private.exists()
    c.close()


def test_a_stale_advertisement_goes_and_a_live_one_with_the_same_pid_stays(tmp_path: Path) -> None:
    storage, options = setup(tmp_path)
    live = provider(storage, options)
    r = commit(live, CheckpointRef(0), {b"k": b"live"})
    mine = advert_of(storage, options, os.getpid())
    stale = mine.with_name(f"{os.getpid()}-{'0' * 16}")  # what a dead process with this PID would have left
    stale.write_text(f"statebed-lend-{stale.name}")
    b = provider(storage, options)
    assert state_at(b, ref_of(r)) == {b"k": b"live"}
    assert b.metrics.borrows == 1
    assert not stale.exists() and mine.exists()
    b.close()
    live.close()
