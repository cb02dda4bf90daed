"""S3-only behaviour against the real server: conditional PUTs, errors naming endpoint and file."""

from __future__ import annotations

import logging
import socket
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import s3_settings, s3_storage
from minio.error import S3Error
from s3server import S3Server

from statebed_base.errors import AlreadyExistsError, MissingFileError, StorageError, StorageUnavailableError, UsageError
from statebed_store import S3Settings, S3Storage, open_storage
from statebed_store.location import parse_location
from statebed_store.storage import parse_s3_url

pytestmark = pytest.mark.s3


def on_server(server: S3Server, conditional: str) -> S3Storage:
    settings = s3_settings(server)
    settings = S3Settings(settings.endpoint, settings.access_key, settings.secret_key, conditional_put=conditional)  # type: ignore[arg-type]
    return S3Storage(f"s3://statebed-test/{uuid.uuid4().hex}", settings)


def test_server_answers_412_to_a_conditional_put_of_an_existing_key(s3_server: S3Server) -> None:
    st = s3_storage(s3_server)
    key = f"{st.prefix}/raw"
    st.client._put_object(st.bucket, key, b"1", headers={"If-None-Match": "*"})
    with pytest.raises(S3Error) as e:
        st.client._put_object(st.bucket, key, b"2", headers={"If-None-Match": "*"})
    assert e.value.code == "PreconditionFailed" and e.value.response.status == 412
    assert st.read("raw") == b"1"


def test_create_only_uses_the_conditional_put(s3_server: S3Server) -> None:
    """With conditional_put=on there is no exists-check fallback: the refusal is the server's 412."""
    st = on_server(s3_server, "on")
    st.write("state/0/0/1_a.changelog", b"first", create_only=True)
    with pytest.raises(AlreadyExistsError) as e:
        st.write("state/0/0/1_a.changelog", b"second", create_only=True)
    assert e.value.file == f"s3://statebed-test/{st.prefix}/state/0/0/1_a.changelog"
    assert st.read("state/0/0/1_a.changelog") == b"first"


def test_auto_mode_detects_conditional_puts_and_cleans_its_probe(s3_server: S3Server) -> None:
    st = on_server(s3_server, "auto")
    st.write("x", b"1", create_only=True)
    assert st._conditional is True  # the probe found the server honours If-None-Match
    with pytest.raises(AlreadyExistsError):
        st.write("x", b"2", create_only=True)
    left = [o.object_name for o in st.client.list_objects(st.bucket, prefix=f"{st.prefix}/", recursive=True)]
    assert left == [f"{st.prefix}/x"]


def test_racing_create_only_writers_one_wins(s3_server: S3Server) -> None:
    st = on_server(s3_server, "on")
    results: dict[int, str] = {}
    start = threading.Barrier(6)

    def attempt(i: int) -> None:
        start.wait()
        try:
            st.write("commits/4", b"writer-%d" % i, create_only=True)
            results[i] = "ok"
        except AlreadyExistsError:
            results[i] = "refused"

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    winners = [i for i, r in results.items() if r == "ok"]
    assert len(results) == 6 and len(winners) == 1, results
    assert st.read("commits/4") == b"writer-%d" % winners[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_endpoint_fails_after_the_bounded_retries_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    """Each call gives up after exactly `retries` retries (counted by the storage and logged),
    then fails naming the endpoint and the file: the bound is the retry count, not a clock."""
    endpoint = f"http://127.0.0.1:{closed_port()}"
    settings = S3Settings(endpoint, "k", "s", conditional_put="on")
    stores = {what: S3Storage("s3://bucket/prefix", settings) for what in ("read", "write", "list", "exists", "delete")}
    calls: dict[str, Callable[[], object]] = {
        "read": lambda: stores["read"].read("state/0/0/1_a.changelog"),
        "write": lambda: stores["write"].write("state/0/0/1_a.changelog", b"x", create_only=True),
        "list": lambda: stores["list"].list("state/0/0"),
        "exists": lambda: stores["exists"].exists("commits/0"),
        "delete": lambda: stores["delete"].delete(["commits/0"]),
        "create bucket": lambda: S3Storage("s3://bucket/p", settings, create_bucket=True),
    }

    def outcome(call: Callable[[], object]) -> BaseException | None:
        try:
            call()
        except BaseException as e:
            return e
        return None

    caplog.set_level(logging.INFO, logger="statebed.storage.s3")
    with ThreadPoolExecutor(len(calls)) as pool:  # concurrently: each call backs off for a few seconds
        errors = dict(zip(calls, pool.map(outcome, calls.values())))
    for what, error in errors.items():
        assert isinstance(error, StorageUnavailableError), (what, error)
        assert endpoint in str(error), (what, str(error))
        assert "s3://bucket/p" in str(error), (what, str(error))
    assert {what: st.retries for what, st in stores.items()} == dict.fromkeys(stores, settings.retries)
    logged = [r for r in caplog.records if r.getMessage().startswith("S3 request retried")]
    assert len(logged) == settings.retries * len(calls)  # the create-bucket call's retries too


def test_no_retry_starts_after_the_deadline() -> None:
    """With a deadline shorter than the backoff, the retries stop before their count runs out."""
    settings = S3Settings(f"http://127.0.0.1:{closed_port()}", "k", "s", conditional_put="on", retries=20, deadline_s=0.3)
    st = S3Storage("s3://bucket/prefix", settings)
    with pytest.raises(StorageUnavailableError):
        st.read("commits/0")
    assert 0 < st.retries < settings.retries  # retried at once, then the first backoff ran past the deadline


def test_missing_bucket_and_bad_credentials(s3_server: S3Server) -> None:
    good = s3_settings(s3_server)
    no_bucket = S3Storage(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/p", good)
    with pytest.raises(StorageError, match="does not exist") as e:
        no_bucket.read("x")
    assert "no-such-bucket-" in str(e.value) and good.endpoint in str(e.value)
    bad = S3Storage("s3://statebed-test/p", S3Settings(good.endpoint, good.access_key, "wrong-secret"))
    with pytest.raises(StorageError, match="check credentials") as e:
        bad.write("x", b"1")
    assert "s3://statebed-test/p/x" in str(e.value)


def test_missing_object_is_a_missing_file(s3_server: S3Server) -> None:
    st = s3_storage(s3_server)
    with pytest.raises(MissingFileError) as e:
        st.read("state/0/0/3_q.zip")
    assert e.value.file == f"s3://statebed-test/{st.prefix}/state/0/0/3_q.zip"


def test_open_storage_and_urls(s3_server: S3Server) -> None:
    prefix = uuid.uuid4().hex
    st = open_storage(parse_location(f"s3://statebed-test/{prefix}/ckpt/", s3_settings(s3_server)))
    assert isinstance(st, S3Storage) and st.url == f"s3://statebed-test/{prefix}/ckpt"
    st.write("commits/0", b"v1\n{}")
    assert st.display("commits/0") == f"s3://statebed-test/{prefix}/ckpt/commits/0"
    assert parse_s3_url("s3://bkt") == ("bkt", "")
    assert parse_s3_url("s3://bkt/x/y/") == ("bkt", "x/y")
    for bad in ("s3:///x", "http://b/x", "s3://Bad_Bucket!!/x", "s3://b/x"):  # S3 bucket names: 3-63 of [a-z0-9.-]
        with pytest.raises(UsageError) as e:
            parse_s3_url(bad)
        assert repr(bad) in str(e.value)
