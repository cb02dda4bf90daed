"""The storage faults (toxics on the S3 proxy): inject, heal and evidence against a real S3Storage
on MinIO through the real Toxiproxy (as install/install.sh built it), driven by the real
toxiproxy-python client. The evidence is what the toxic did to the store's own requests, as the
request log (`statebed_store.storage.request_log`) has them."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from net_helpers import wait_for
from s3server import ACCESS_KEY, SECRET_KEY, S3Server

from statebed_chaos.faults import Fault, FaultContext, FaultSpec, NotApplicable, Trigger, fault_class
from statebed_chaos.faults.toxic_fault import failed, requests_proving, sample
from statebed_chaos.infra.proxy import start_proxy
from statebed_chaos.infra.services import toxiproxy_client
from statebed_chaos.targets import LocalTargets
from statebed_model.rundir import RunDir
from statebed_store import S3Settings
from statebed_store.failpoint_control import Control
from statebed_store.formats import V2, get_format
from statebed_store.storage import S3Storage
from statebed_store.storage.request_log import REQUEST_LOG_ENV
from statebed_verify.history import History

KINDS = ["storage-latency", "storage-jitter", "storage-bandwidth", "storage-outage", "storage-reset"]
BIG = 16 * 1024  # at the bandwidth fault's 64 KB/s: 250 ms a read, measurable
pytestmark = pytest.mark.s3


@contextlib.contextmanager
def through_proxy(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: bool = True
) -> Iterator[tuple[FaultContext, S3Storage]]:
    """A FaultContext whose proxy (real Toxiproxy) fronts MinIO, and a store reaching S3 through it
    (fast-failing timeouts), logging its requests where the run's are (unless not `log`)."""
    run = tmp_path / "run"
    if log:
        monkeypatch.setenv(REQUEST_LOG_ENV, str(RunDir(run).s3_requests))
    else:
        monkeypatch.delenv(REQUEST_LOG_ENV, raising=False)
    toxiproxy = start_proxy(tmp_path / "toxiproxy", seed=7)
    try:
        proxy = toxiproxy_client(toxiproxy.api).create(upstream=s3.endpoint.removeprefix("http://"), name="s3", listen="127.0.0.1:0")
        ctx = FaultContext(
            run=RunDir(run), format=V2, cluster="local", targets=LocalTargets(run), control=Control(run / "failpoints" / "control.json"),
            history=History(tmp_path / "history.jsonl"), proxy=proxy, seed=7,
        )  # fmt: skip
        settings = S3Settings(f"http://{proxy.listen}", ACCESS_KEY, SECRET_KEY, read_timeout_s=2, retries=1, deadline_s=6)
        store = S3Storage(f"s3://statebed-test/{uuid.uuid4().hex}", settings)
        store.write("warm", b"pooled connection")  # an idle keep-alive connection exists before any fault
        store.write("big", b"x" * BIG)
        yield ctx, store
    finally:
        toxiproxy.stop()


def make(kind: str, **params: Any) -> Fault:
    return fault_class(kind)(FaultSpec("f1", kind, Trigger(1), 1.0, params))


def requests_under(fault: Fault, ctx: FaultContext, store: S3Storage, n: int = 12) -> list[object]:
    """`n` reads of the big file while `fault` is injected, in a worker (an outage holds each until
    the client's timeout); then the heal. Returns each read's outcome (bytes or the error)."""
    fault.inject(ctx)
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.extend(_attempt(lambda: store.read("big")) for _ in range(n)), daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive()
    fault.heal(ctx)
    fault.heal(ctx)  # idempotent
    return outcome


@pytest.mark.parametrize("kind", KINDS)
def test_fault_fires_on_the_requests_it_acted_on(kind: str, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with through_proxy(s3_server, tmp_path, monkeypatch) as (ctx, store):
        fault = make(kind)
        outcome = requests_under(fault, ctx, store, n=3 if kind == "storage-outage" else 12)
        assert ctx.proxy.toxics() == {}
        if kind in ("storage-outage", "storage-reset"):
            assert any(isinstance(o, Exception) for o in outcome) or store.retries > 0, outcome
        ev = fault.evidence(ctx)
        assert ev.fired is True, ev.detail
        assert ev.proof and all(p["op"] == "read" and p["file"].endswith("/big") for p in ev.proof), ev.proof
        assert store.read("warm") == b"pooled connection"  # healed: S3 answers through the proxy again


@pytest.mark.parametrize("kind", KINDS)
def test_fault_without_requests_did_not_fire(kind: str, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with through_proxy(s3_server, tmp_path, monkeypatch) as (ctx, store):
        fault = make(kind)
        fault.inject(ctx)
        fault.heal(ctx)
        ev = fault.evidence(ctx)
        assert ev.fired is False and "none of the 0 S3 requests started in it" in ev.detail, ev.detail
        assert store.read("warm") == b"pooled connection"


@pytest.mark.parametrize("kind", ["storage-latency", "storage-bandwidth", "storage-reset"])
def test_a_toxic_that_touched_nothing_did_not_fire(kind: str, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests in the window are not proof: toxicity 0 applies the toxic to no connection, the
    reads go through untouched, and the evidence says so."""
    with through_proxy(s3_server, tmp_path, monkeypatch) as (ctx, store):
        fault = make(kind, toxicity=0)
        outcome = requests_under(fault, ctx, store)
        assert outcome == [b"x" * BIG] * 12
        ev = fault.evidence(ctx)
        assert ev.fired is False and "none of the 12 S3 requests started in it shows its effect" in ev.detail, ev.detail


@pytest.mark.parametrize(
    ("stream", "toxics", "fired"),
    [(None, ["statebed-f1-upstream", "statebed-f1-downstream"], True), ("downstream", ["statebed-f1"], False)],
)
def test_bandwidth_throttles_uploads_both_ways_by_default(
    stream: str | None, toxics: list[str], fired: bool, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store's steady traffic is uploads with small answers: only a limit on what it sends slows
    them. A limit on S3's answers alone (`stream: downstream`) touches none, and says so."""
    with through_proxy(s3_server, tmp_path, monkeypatch) as (ctx, store):
        fault = make("storage-bandwidth", **({} if stream is None else {"stream": stream}))
        facts = fault.inject(ctx)
        assert sorted(ctx.proxy.toxics()) == sorted(toxics) and facts["toxics"] == toxics
        for i in range(4):
            store.write(f"up-{i}", b"u" * BIG)
        fault.heal(ctx)
        assert ctx.proxy.toxics() == {}
        ev = fault.evidence(ctx)
        assert ev.fired is fired, ev.detail
        if fired:
            assert ev.proof and all(p["op"] == "write" and "/up-" in p["file"] for p in ev.proof), ev.proof


def test_without_a_request_log_the_evidence_is_unknown(s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with through_proxy(s3_server, tmp_path, monkeypatch, log=False) as (ctx, store):
        fault = make("storage-latency", latency=50)
        assert fault.inject(ctx)["attributes"] == {"latency": 50, "jitter": 0}
        assert store.read("warm") == b"pooled connection"
        fault.heal(ctx)
        ev = fault.evidence(ctx)
        assert ev.fired is None and "no S3 request was logged" in ev.detail


def test_never_injected_and_not_applicable(tmp_path: Path) -> None:
    fault = make("storage-reset")
    run = tmp_path / "run"
    ctx = FaultContext(RunDir(run), V2, "local", LocalTargets(run), Control(run / "fp.json"), History(tmp_path / "h.jsonl"))
    fault.heal(ctx)  # healing what was never injected is a no-op
    assert fault.evidence(ctx).fired is False and "never injected" in fault.evidence(ctx).detail
    for format, storage in (("native", "s3"), ("v2", "local")):
        with pytest.raises(NotApplicable):
            fault.check(get_format(format), "local", storage)
    fault.check(get_format("v1"), "standalone", "s3")
    assert fault_class("storage-outage").needs == frozenset({"s3-proxy"})


def test_default_retries_ride_out_a_short_reset_window(s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that meets connection resets succeeds once the fault heals within the default
    retry budget: a brief S3 blip must not fail a commit (the matrix's 3 s storage-reset did with 2 retries)."""
    with through_proxy(s3_server, tmp_path, monkeypatch) as (ctx, _):
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
        assert fault.evidence(ctx).fired is True


def _attempt(call: Any) -> object:
    """The call's result, or the exception it raised (a request run in a worker thread)."""
    try:
        return call()
    except Exception as e:  # the outcome under test
        return e


def test_sparks_own_s3_requests_replace_its_file_managers_lines_as_evidence() -> None:
    """A native run on S3A logs two levels: the checkpoint file manager's operations (`fm`) and
    every S3 request of the SDK client (`sdk`). The toxic's effect is read from the requests when
    there are any; statebed's own lines (no level) always count; without `sdk` lines, `fm` ones do."""
    fm = {"start": 1.0, "end": 2.0, "op": "exists", "file": "s3a://b/x", "level": "fm"}
    sdk = {"start": 1.0, "end": 5.0, "op": "s3:HeadObject", "file": "s3a://b/x", "retries": 2, "level": "sdk"}
    own = {"start": 1.0, "end": 1.1, "op": "read", "file": "s3://b/y"}
    assert requests_proving([fm, sdk, own]) == [sdk, own]
    assert requests_proving([fm, own]) == [fm, own]
    reset, outage = make("storage-reset"), make("storage-outage")
    assert reset.acted_on(sdk, None) and not reset.acted_on(fm, None)  # the SDK's retries are the reset's mark
    assert outage.acted_on({**sdk, "retries": 0}, healed=4.9) and not outage.acted_on({**fm, "retries": 0}, healed=4.9)


def test_an_s3_answer_is_not_a_failed_request() -> None:
    """S3A checks existence with a HEAD that S3 answers 404 (the SDK raises NoSuchKeyException):
    hundreds of those outside any window must not look like a reset's work; a retried one does."""
    head = {"start": 1.0, "end": 1.01, "op": "s3:HeadObject", "file": "s3a://b/x", "retries": 0, "error": "NoSuchKeyException"}
    assert not failed(head) and failed({**head, "retries": 1}) and failed({**head, "error": "SdkClientException"})


def test_the_proof_names_each_kind_of_request_the_toxic_hit() -> None:
    """74 slowed requests, the PUT among the last: the 20 in the proof still include it."""
    hits = [{"start": float(i), "op": "s3:HeadObject"} for i in range(73)] + [{"start": 99.0, "op": "s3:PutObject"}]
    proof = sample(hits)
    assert len(proof) == 20 and proof[-1]["op"] == "s3:PutObject" and proof[0]["start"] == 0.0
    assert sample(hits[:5]) == hits[:5]
