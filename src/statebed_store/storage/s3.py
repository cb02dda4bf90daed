"""Checkpoint storage in an S3 bucket (MinIO, SeaweedFS, AWS) through the `minio` SDK.

A single PUT is atomic, so files are published whole. Create-only writes send
`If-None-Match: *` (the server answers 412 when the key exists). Which servers honour it,
checked against real servers: MinIO (install/versions.env) and SeaweedFS 4.48 yes; AWS S3 (since
2024-08) document it. The minio SDK's public `put_object` turns unknown headers into
`x-amz-meta-*` metadata silently, so the header goes through `_put_object`, which signs
and sends headers as given (pinned SDK version; covered by a test against a real server).
With `conditional_put=auto` the first create-only write probes the server once; a server
that ignores the header gets a loud warning and a (racy) exists-check fallback.
A create-only PUT that urllib3 retried (its first answer lost, e.g. a read timeout) may meet
its own first write: a 412 on a retry is success when the object holds exactly our bytes.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import urllib3
from minio import Minio
from minio.deleteobjects import DeleteObject
from minio.error import S3Error
from minio.helpers import check_bucket_name

from statebed_base.errors import AlreadyExistsError, MissingFileError, StorageError, StorageUnavailableError, UsageError

from ..config import S3Settings
from ..location import parse_location
from .base import FileInfo, clean_path
from .request_log import log_request
from .whole_requests import whole_request_pools

__all__ = ["S3Storage", "parse_s3_url"]

log = logging.getLogger("statebed.storage.s3")

_NETWORK_ERRORS = (urllib3.exceptions.HTTPError, OSError)
_CONFLICT_CODES = ("PreconditionFailed", "ConditionalRequestConflict")


def _attempt(error: S3Error) -> int:
    """How many times urllib3 had already sent the request that got `error` (0: the first send)."""
    retries = getattr(error.response, "retries", None)
    return len(retries.history) if retries is not None else 0


def parse_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix` (or `s3a://…`) -> ("bucket", "some/prefix"), the bucket name checked."""
    bucket, prefix = parse_location(url).bucket_and_prefix()
    try:
        check_bucket_name(bucket)
    except ValueError as e:  # the SDK would raise it on the first request instead
        raise UsageError(f"S3 URL {url!r}: {e}") from None
    return bucket, prefix.strip("/")


class _RetryCounter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def add(self) -> None:
        with self._lock:
            self.value += 1


class _DeadlineRetry(urllib3.Retry):
    """Retries that stop once `deadline_s` has passed since the request's first failure."""

    def __init__(
        self, *args: Any, deadline_s: float = 30.0, first_failure: float | None = None, counter: _RetryCounter | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.deadline_s = deadline_s
        self.first_failure = first_failure
        self.counter = counter

    def new(self, **kw: Any) -> _DeadlineRetry:
        out = super().new(**kw)
        out.deadline_s = self.deadline_s
        out.first_failure = self.first_failure if self.first_failure is not None else time.monotonic()
        out.counter = self.counter
        return out

    def is_exhausted(self) -> bool:
        late = self.first_failure is not None and time.monotonic() - self.first_failure >= self.deadline_s
        return late or super().is_exhausted()

    def increment(self, method: str | None = None, url: str | None = None, *args: Any, **kwargs: Any) -> _DeadlineRetry:
        """Every retry is counted (`S3Storage.retries`) and logged (INFO): a slow endpoint must not hide behind retries."""
        out = super().increment(method, url, *args, **kwargs)
        if self.counter is not None:
            self.counter.add()
        last = out.history[-1] if out.history else None
        log.info(
            "S3 request retried (attempt %d of at most %d): %s %s: %s",
            len(out.history) + 1,
            (self.total or 0) + len(self.history) + 1,
            method,
            url,
            (last.error if last and last.error else f"status {last.status if last else '?'}"),
        )
        return out


class S3Storage:
    def __init__(self, url: str, settings: S3Settings, *, create_bucket: bool = False) -> None:
        self.bucket, self.prefix = parse_s3_url(url)
        self.url = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self.settings = settings
        self._retries = _RetryCounter()
        http = whole_request_pools(
            urllib3.PoolManager(
                timeout=urllib3.Timeout(connect=settings.connect_timeout_s, read=settings.read_timeout_s),
                maxsize=32,  # hedges take a second connection while the first is in flight
                retries=_DeadlineRetry(
                    total=settings.retries,
                    backoff_factor=0.2,
                    backoff_max=2.0,
                    backoff_jitter=0.2,  # retries of many clients must not arrive in lockstep
                    status_forcelist=[500, 502, 503, 504],
                    allowed_methods=None,
                    deadline_s=settings.deadline_s,
                    counter=self._retries,
                ),
            )
        )
        try:
            self.client = Minio(
                settings.host_port,
                access_key=settings.access_key or None,
                secret_key=settings.secret_key or None,
                secure=settings.secure,
                region=settings.region or "us-east-1",
                http_client=http,
            )
        except ValueError as e:  # a malformed endpoint: the SDK's message, naming it
            raise UsageError(f"S3 endpoint {settings.endpoint!r}: {e}") from None
        self._conditional: bool | None = {"on": True, "off": False}.get(settings.conditional_put)
        self._probe_lock = threading.Lock()
        if create_bucket:
            self._call("create bucket", self.url, self._ensure_bucket)

    @property
    def retries(self) -> int:
        """Requests urllib3 sent again (after a timeout, a reset, a 5xx) since this storage was opened."""
        return self._retries.value

    def __repr__(self) -> str:
        return f"S3Storage({self.url!r}, endpoint={self.settings.endpoint!r})"

    def _ensure_bucket(self) -> None:
        if not self.client.bucket_exists(self.bucket):
            self.client.make_bucket(self.bucket)

    def _key(self, path: str) -> str:
        p = clean_path(path)
        return f"{self.prefix}/{p}" if self.prefix and p else (self.prefix or p)

    def display(self, path: str) -> str:
        return f"s3://{self.bucket}/{self._key(path)}"

    def _call(self, what: str, shown: str, fn: Any, *args: Any, nbytes: int | None = None, **kwargs: Any) -> Any:
        """`_sdk`, logged (`request_log`) with its times, size, retries and outcome."""
        start, retried, error = time.time(), self._retries.value, None
        try:
            out = self._sdk(what, shown, fn, *args, **kwargs)
            if isinstance(out, bytes):
                nbytes = len(out)
            return out
        except BaseException as e:
            error = type(e).__name__
            raise
        finally:
            log_request(what, shown, start, time.time(), nbytes=nbytes, retries=self._retries.value - retried, error=error)

    def _sdk(self, what: str, shown: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run one SDK call, turning transport failures into errors naming the file."""
        try:
            return fn(*args, **kwargs)
        except S3Error as e:
            if e.code in ("NoSuchKey", "NoSuchObject"):
                raise MissingFileError(shown, "file does not exist") from None
            if e.code == "NoSuchBucket":
                raise StorageError(f"{shown}: bucket {self.bucket!r} does not exist at {self.settings.endpoint}") from None
            if e.code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                raise StorageError(f"{shown}: {what} refused by S3 ({e.code}): check credentials") from None
            raise StorageError(f"{shown}: {what} failed: S3 error {e.code}: {e.message}") from None
        except _NETWORK_ERRORS as e:
            raise StorageUnavailableError(
                f"{shown}: {what} failed: cannot reach S3 endpoint {self.settings.endpoint} ({type(e).__name__}: {e})"
            ) from None

    def read(self, path: str, start: int = 0, length: int | None = None) -> bytes:
        key, shown = self._key(path), self.display(path)

        def get() -> bytes:
            if length == 0:  # the SDK reads length 0 as "to the end": an empty range is empty
                self.client.stat_object(self.bucket, key)  # but a missing file is still missing
                return b""
            try:
                resp = self.client.get_object(self.bucket, key, offset=start, length=length or 0)
            except S3Error as e:
                if e.code == "InvalidRange":  # range starts at/after the end, e.g. an empty file
                    return b""
                raise
            try:
                return bytes(resp.read())
            finally:
                resp.close()
                resp.release_conn()

        return bytes(self._call("read", shown, get))

    def _put(self, key: str, data: bytes, conditional: bool) -> None:
        headers: dict[str, str | list[str] | tuple[str]] = {"Content-Type": "application/octet-stream"}
        if conditional:
            headers["If-None-Match"] = "*"
        self.client._put_object(self.bucket, key, data, headers=headers)

    def _supports_conditional(self) -> bool:
        with self._probe_lock:
            if self._conditional is None:
                probe = self._key(f".statebed-probe/{uuid.uuid4().hex}")
                self._put(probe, b"1", True)
                try:
                    self._put(probe, b"2", True)
                    self._conditional = False
                    log.warning(
                        "S3 server %s ignores If-None-Match: create-only writes fall back to a racy "
                        "exists-check; use a server with conditional writes for real runs",
                        self.settings.endpoint,
                    )
                except S3Error as e:
                    if e.code not in _CONFLICT_CODES:
                        raise
                    self._conditional = True
                finally:
                    self.client.remove_object(self.bucket, probe)
            return self._conditional

    def conditional_creates(self) -> bool:
        """Does a create-only write use the server's `If-None-Match: *` (not the racy fallback)?"""
        return bool(self._call("probe", self.url, self._supports_conditional))

    def write(self, path: str, data: bytes, *, create_only: bool = False) -> None:
        key, shown = self._key(path), self.display(path)

        def put() -> None:
            if not create_only:
                return self._put(key, data, False)
            if self._supports_conditional():
                try:
                    return self._put(key, data, True)
                except S3Error as e:
                    if e.code in _CONFLICT_CODES:
                        return self._settle_create_conflict(key, data, shown, _attempt(e))
                    raise
            if self._exists(key):
                raise AlreadyExistsError(shown)
            return self._put(key, data, False)

        self._call("write", shown, put, nbytes=len(data))

    def _settle_create_conflict(self, key: str, data: bytes, shown: str, attempt: int) -> None:
        """A create-only PUT was refused because the key exists. On a retry (`attempt` > 0) the
        key may hold our own first attempt, which landed though its answer was lost: if its
        bytes are ours the write succeeded. Anything else is AlreadyExistsError."""
        if attempt > 0:
            try:
                if self.client.stat_object(self.bucket, key).size == len(data):
                    resp = self.client.get_object(self.bucket, key)
                    try:
                        if resp.read() == data:
                            log.info("create-only retry of %s found its own first write; done", shown)
                            return
                    finally:
                        resp.close()
                        resp.release_conn()
            except S3Error as e:
                if e.code not in ("NoSuchKey", "NoSuchObject", "NotFound"):
                    raise
        raise AlreadyExistsError(shown)

    def _exists(self, key: str) -> bool:
        try:
            self.client.stat_object(self.bucket, key)
            return True
        except S3Error as e:
            if e.code in ("NoSuchKey", "NoSuchObject", "NotFound"):
                return False
            raise

    def exists(self, path: str) -> bool:
        return bool(self._call("stat", self.display(path), self._exists, self._key(path)))

    def _list(self, directory: str) -> builtins.list[Any]:
        key = self._key(directory)
        prefix = f"{key}/" if key else ""
        return list(self.client.list_objects(self.bucket, prefix=prefix, recursive=False))

    def list(self, directory: str) -> list[FileInfo]:
        out = []
        for o in self._call("list", self.display(directory), self._list, directory):
            if o.is_dir:
                continue
            name = o.object_name.rsplit("/", 1)[-1]
            if name.startswith("."):
                continue
            out.append(FileInfo(name, int(o.size or 0), o.last_modified.timestamp() if o.last_modified else 0.0))
        return out

    def list_dirs(self, directory: str) -> builtins.list[str]:
        objs = self._call("list", self.display(directory), self._list, directory)
        names = [o.object_name.rstrip("/").rsplit("/", 1)[-1] for o in objs if o.is_dir]
        return [n for n in names if not n.startswith(".")]  # hidden, as in `list` and LocalStorage

    def delete(self, paths: Sequence[str]) -> None:
        if not paths:
            return

        def remove() -> None:
            for i in range(0, len(paths), 1000):
                errors = list(self.client.remove_objects(self.bucket, [DeleteObject(self._key(p)) for p in paths[i : i + 1000]]))
                bad = [e for e in errors if e.code not in ("NoSuchKey",)]
                if bad:
                    raise StorageError(f"{self.url}: delete failed for {bad[0].name}: {bad[0].code} {bad[0].message}")

        self._call("delete", self.display(paths[0]), remove)
