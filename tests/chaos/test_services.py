"""An experiment's S3 services (`statebed_chaos.infra.storage_services`): MinIO with the real
Toxiproxy in front, started together, stopped together (also on error), and S3's create-only
semantics intact through the proxy."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import requests
from minio.error import S3Error

from statebed_base.errors import AlreadyExistsError
from statebed_base.installed import pins
from statebed_chaos.infra import storage_services
from statebed_chaos.targets import LocalTargets, Target
from statebed_store.storage import S3Storage

pytestmark = pytest.mark.s3


def _started(run: Path) -> list[Target]:
    """MinIO and Toxiproxy as the services registered them (pinned by start time and command line)."""
    return [t for kind in ("s3", "proxy") for t in LocalTargets(run).find(kind)]


def test_storage_services_start_and_stop_everything(tmp_path: Path) -> None:
    with storage_services(tmp_path / "infra", run_dir=tmp_path / "run") as svc:
        started = _started(tmp_path / "run")
        assert len(started) == 2 and all(t.identity.alive() for t in started)
        store = S3Storage("s3://statebed-test/services", svc.settings)
        store.write("k", b"v")
        assert store.read("k") == b"v" and svc.endpoint != svc.direct
        pin = pins()["TOXIPROXY_VERSION"]
        assert requests.get(f"{svc.api}/version", timeout=5).json() == {"version": pin.removeprefix("v")}  # the real one
        assert svc.proxy.name == "s3" and svc.endpoint == f"http://{svc.proxy.listen}"
    assert not any(t.identity.alive() for t in started)


def test_storage_services_stop_everything_on_error(tmp_path: Path) -> None:
    started: list[Target] = []
    with pytest.raises(RuntimeError, match="boom"), storage_services(tmp_path / "infra", run_dir=tmp_path / "run"):
        started = _started(tmp_path / "run")
        raise RuntimeError("boom")
    assert len(started) == 2 and not any(t.identity.alive() for t in started)


def test_s3_through_the_proxy_keeps_create_only_puts(tmp_path: Path) -> None:
    with storage_services(tmp_path / "infra") as svc:
        prefix = uuid.uuid4().hex
        store = S3Storage(f"s3://statebed-test/{prefix}", svc.settings)
        store.write("a", b"first", create_only=True)
        with pytest.raises(AlreadyExistsError):
            store.write("a", b"second", create_only=True)
        assert store.read("a") == b"first"
        with pytest.raises(S3Error) as e:  # the raw If-None-Match PUT: MinIO's 412 passes Toxiproxy unchanged
            store.client._put_object("statebed-test", f"{prefix}/a", b"x", headers={"If-None-Match": "*"})
        assert e.value.response.status == 412
