"""The storage faults (toxics on the S3 proxy): inject, heal and evidence against a real S3Storage
on SeaweedFS through our Toxiproxy-API proxy, driven by the real toxiproxy-python client."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proxy_helpers import proxy_api, records, wait_for
from s3server import ACCESS_KEY, SECRET_KEY, S3Server

from statebed_chaos.faults import Fault, FaultContext, FaultSpec, NotApplicable, Trigger, fault_class
from statebed_chaos.targets import LocalTargets
from statebed_model.rundir import RunDir
from statebed_store import S3Settings
from statebed_store.failpoint_control import Control
from statebed_store.storage import S3Storage
from statebed_verify.history import History

KINDS = ["storage-latency", "storage-jitter", "storage-bandwidth", "storage-outage", "storage-reset"]
pytestmark = pytest.mark.s3


@contextlib.contextmanager
def through_proxy(s3: S3Server, tmp_path: Path, record: bool = True) -> Iterator[tuple[FaultContext, S3Storage]]:
    """A FaultContext whose proxy fronts SeaweedFS, and a store reaching S3 through it (fast-failing timeouts)."""
    path = tmp_path / "proxy-record.jsonl"
    with proxy_api(path if record else None) as (_, client):
        proxy = client.create(upstream=s3.endpoint.removeprefix("http://"), name="s3")
        run = tmp_path / "run"
        ctx = FaultContext(
            run=RunDir(run), mode="v2", cluster="local", targets=LocalTargets(run), control=Control(run / "failpoints" / "control.json"),
            history=History(tmp_path / "history.jsonl"), proxy=proxy, proxy_record=path if record else None, seed=7,
        )  # fmt: skip
        settings = S3Settings(f"http://{proxy.listen}", ACCESS_KEY, SECRET_KEY, read_timeout_s=5, retries=1, deadline_s=10)
        store = S3Storage(f"s3://statebed-test/{uuid.uuid4().hex}", settings)
        store.write("warm", b"pooled connection")  # an idle keep-alive connection exists before any fault
        yield ctx, store


def make(kind: str, **params: Any) -> Fault:
    return fault_class(kind)(FaultSpec("f1", kind, Trigger(1), 1.0, params))


def hit(ctx: FaultContext) -> bool:
    assert ctx.proxy_record is not None
    return any(r["toxic"] == "statebed-f1" and (r["bytes"] > 0 or r["fresh"]) for r in records(ctx.proxy_record))


@pytest.mark.parametrize("kind", KINDS)
def test_fault_fires_on_a_request_in_flight(kind: str, s3_server: S3Server, tmp_path: Path) -> None:
    with through_proxy(s3_server, tmp_path) as (ctx, store):
        fault = make(kind)
        facts = fault.inject(ctx)
        assert facts["toxic"] == "statebed-f1" and ctx.proxy.get_toxic("statebed-f1").type == facts["type"]
        outcome: list[object] = []  # outage and reset make the request fail: that is the fault
        worker = threading.Thread(target=lambda: outcome.append(_attempt(lambda: store.read("warm"))), daemon=True)
        worker.start()
        wait_for(lambda: hit(ctx), timeout_s=20)  # the toxic acted on the request's connection
        fault.heal(ctx)
        fault.heal(ctx)  # idempotent
        worker.join(30)
        assert not worker.is_alive() and ctx.proxy.toxics() == {}
        ev = fault.evidence(ctx)
        assert ev.fired is True and ev.proof and all(p["toxic"] == "statebed-f1" for p in ev.proof)
        assert store.read("warm") == b"pooled connection"  # healed: S3 answers through the proxy again


@pytest.mark.parametrize("kind", KINDS)
def test_fault_without_requests_did_not_fire(kind: str, s3_server: S3Server, tmp_path: Path) -> None:
    with through_proxy(s3_server, tmp_path) as (ctx, store):
        fault = make(kind)
        fault.inject(ctx)
        fault.heal(ctx)
        ev = fault.evidence(ctx)
        assert ev.fired is False and "no request was in flight" in ev.detail
        assert store.read("warm") == b"pooled connection"


def test_without_a_record_the_evidence_is_unknown(s3_server: S3Server, tmp_path: Path) -> None:
    with through_proxy(s3_server, tmp_path, record=False) as (ctx, store):
        fault = make("storage-latency", latency=50)
        assert fault.inject(ctx)["attributes"] == {"latency": 50, "jitter": 0}
        assert store.read("warm") == b"pooled connection"
        fault.heal(ctx)
        ev = fault.evidence(ctx)
        assert ev.fired is None and "no record" in ev.detail


def test_never_injected_and_not_applicable(tmp_path: Path) -> None:
    fault = make("storage-reset")
    run = tmp_path / "run"
    ctx = FaultContext(
        RunDir(run),
        "v2",
        "local",
        LocalTargets(run),
        Control(run / "fp.json"),
        History(tmp_path / "h.jsonl"),
        proxy_record=tmp_path / "r.jsonl",
    )
    fault.heal(ctx)  # healing what was never injected is a no-op
    assert fault.evidence(ctx).fired is False and "never injected" in fault.evidence(ctx).detail
    for mode, storage in (("native", "s3"), ("v2", "local")):
        with pytest.raises(NotApplicable):
            fault.check(mode, "local", storage)
    fault.check("v1", "standalone", "s3")
    assert fault_class("storage-outage").needs == frozenset({"s3-proxy"})


def test_default_retries_ride_out_a_short_reset_window(s3_server: S3Server, tmp_path: Path) -> None:
    """A write that meets connection resets succeeds once the fault heals within the default
    retry budget: a brief S3 blip must not fail a commit (the matrix's 3 s storage-reset did with 2 retries)."""
    with through_proxy(s3_server, tmp_path) as (ctx, _):
        store = S3Storage(f"s3://statebed-test/{uuid.uuid4().hex}", S3Settings(f"http://{ctx.proxy.listen}", ACCESS_KEY, SECRET_KEY))
        fault = make("storage-reset")
        fault.inject(ctx)
        outcome: list[object] = []
        worker = threading.Thread(target=lambda: outcome.append(_attempt(lambda: store.write("blip", b"kept"))), daemon=True)
        worker.start()
        wait_for(lambda: store.retries >= 3 or bool(outcome), timeout_s=30)  # three resets: more than the old budget of 2 survived
        fault.heal(ctx)
        worker.join(60)
        assert not worker.is_alive() and outcome == [None], outcome
        assert store.retries >= 3 and store.read("blip") == b"kept"


def _attempt(call: Any) -> object:
    """The call's result, or the exception it raised (a request run in a worker thread)."""
    try:
        return call()
    except Exception as e:  # the outcome under test
        return e
