"""Shared fixtures: checkpoint storage on a local directory and on a real S3 server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from native_fixtures import native  # noqa: F401  (session fixture: extracted Spark checkpoints)
from s3server import ACCESS_KEY, SECRET_KEY, S3Server, start_s3_server

from statebed_job.task import close_providers
from statebed_store import S3Settings, SnapshotUploader, Storage, StoreOptions, default_uploader, failpoints, open_storage
from statebed_store.storage import S3Storage

FIXTURES = Path(__file__).parent / "fixtures"

pytest_plugins = [
    "e2e_state",  # --e2e-state FILE: `make e2e` resumable (tests/e2e_state.py)
    "shared_runs",  # expensive real-Spark runs made once per session (tests/shared_runs.py)
]


# Every JVM the suite's runs start compiles with C1 only: runs of seconds spend less CPU compiling
# (src/statebed_job/jvm_startup.py; what runs is the same). A value already set wins.
os.environ.setdefault("STATEBED_JAVA_OPTS", "-XX:TieredStopAtLevel=1")


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C tests send SIGINT to the commands they start. A suite started in the background by
    a shell without job control (`make test &` in a script, CI wrappers) inherits SIGINT ignored,
    and Python keeps an inherited ignore, so those commands would never see the signal and run
    to the end (seen: 2 of 7 runs of test_ctrl_c_stops_every_process). The suite restores the
    default, so the commands it starts get it too."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def providers_closed() -> Iterator[None]:
    """After the test: its queued snapshot uploads finished and its in-process store providers
    closed, so none outlives the test's directories (modules that run tasks in-process use it)."""
    yield
    default_uploader().drain(60)
    close_providers()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = start_s3_server(tmp_path_factory.mktemp("s3"))
    yield server
    server.stop()


def s3_settings(server: S3Server) -> S3Settings:
    return S3Settings(endpoint=server.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY)


def s3_storage(server: S3Server) -> S3Storage:
    """A fresh prefix in the test bucket: every test sees an empty checkpoint root."""
    return S3Storage(f"s3://statebed-test/{uuid.uuid4().hex}", s3_settings(server))


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    """The same test on a local directory and on S3 (contract tests over both backends)."""
    if request.param == "local":
        return open_storage(tmp_path / "ckpt")
    return s3_storage(request.getfixturevalue("s3_server"))


@pytest.fixture
def local_storage(tmp_path: Path) -> Storage:
    return open_storage(tmp_path / "ckpt")


@pytest.fixture
def options(tmp_path: Path) -> StoreOptions:
    return StoreOptions(local_dir=tmp_path / "local", snapshot_upload_backoff_s=0.01)


@pytest.fixture
def uploader() -> SnapshotUploader:
    """A private uploader per test, so `drain()` waits for this test's snapshots only."""
    return SnapshotUploader()


@pytest.fixture(autouse=True)
def _no_failpoints() -> Iterator[None]:
    failpoints.disarm()
    yield
    failpoints.disarm()


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A real, unrelated process (`sleep 60`) that tests signal or name in forged state; always reaped."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)
