"""A real S3 outage: the server is killed mid-run, then restarted on the same data."""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoint_helpers import commit, ref_of, run_versions, state_at
from s3server import start_s3_server

from statebed_base.errors import StorageUnavailableError
from statebed_store import S3Storage, SnapshotUploader, StateStoreProvider, StoreId, StoreOptions

STORE = StoreId(0, 1)


@pytest.mark.e2e
@pytest.mark.s3
@pytest.mark.slow
def test_commits_fail_clearly_during_an_outage_and_nothing_is_lost(tmp_path: Path, options: StoreOptions) -> None:
    from conftest import s3_settings

    server = start_s3_server(tmp_path / "s3")
    try:
        storage = S3Storage("s3://statebed-test/outage", s3_settings(server))
        uploader = SnapshotUploader()
        opts = options.with_(snapshot_interval=2, snapshot_upload_attempts=2, snapshot_upload_backoff_s=0.1)
        p = StateStoreProvider(storage, STORE, opts, uploader=uploader)
        ref, state = run_versions(p, 5)
        assert uploader.drain(30)

        server.stop()  # SIGKILL: the storage is gone
        retried = storage.retries
        with pytest.raises(StorageUnavailableError) as err:
            commit(p, ref, {b"during": b"outage"}, snapshot=True)
        assert storage.retries - retried >= storage.settings.retries  # its bounded retries ran out: an error, not a hang
        msg = str(err.value)
        assert f"s3://statebed-test/outage/{STORE.dir}/6_" in msg and server.endpoint.removeprefix("http://") in msg
        assert p.loaded is None  # the instance holds an uncommitted batch: it will be rebuilt
        other = StateStoreProvider(storage, STORE, opts.with_(local_dir=tmp_path / "other"), uploader=uploader)
        with pytest.raises(StorageUnavailableError, match="cannot reach S3 endpoint"):
            other.load(ref.version, ref.id)
        other.close()

        server.restart()
        fresh = StateStoreProvider(storage, STORE, opts.with_(local_dir=tmp_path / "fresh"), uploader=uploader)
        assert state_at(fresh, ref) == state
        r6 = commit(fresh, ref, {b"after": b"restart"})
        assert state_at(fresh, ref_of(r6)) == {**state, b"after": b"restart"}
        fresh.close()
        p.close()
    finally:
        server.stop()
