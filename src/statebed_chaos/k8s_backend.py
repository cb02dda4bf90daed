"""The Kubernetes backend of chaos experiments (`--backend k8s`), for the chaos controller pod.

The same experiment files run; what changes is where things are. Drivers stay subprocesses of
the controller (Spark client mode) but submit to Kubernetes (`--master`), so executors are
pods; faults reach them through `K8sTargets`; storage is MinIO behind the chart's Toxiproxy,
whose proxy "s3" already exists (the chart's config file) and is used, not recreated. Storage
faults prove what they did from the run's S3 request logs, as on one machine.
Everything comes from the environment the chart gives the controller pod.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from statebed_base.errors import UsageError
from statebed_store import S3Settings

from .infra.services import PROXY_NAME, Services, toxiproxy_client
from .targets.local import LocalTargets

if TYPE_CHECKING:
    from .targets.k8s import K8sTargets

__all__ = ["BACKENDS", "K8sSettings", "k8s_storage", "k8s_targets"]

BACKENDS = ("local", "k8s")
_REQUIRED = (
    "STATEBED_K8S_NAMESPACE",
    "STATEBED_K8S_EXECUTOR_SELECTOR",
    "STATEBED_K8S_MASTER",
    "STATEBED_TOXIPROXY_API",
    "STATEBED_S3_ENDPOINT",
    "STATEBED_S3_DIRECT",
)


@dataclass(frozen=True)
class K8sSettings:
    namespace: str
    executor_selector: str
    master: str  # k8s://https://kubernetes.default.svc
    toxiproxy_api: str  # http://<release>-toxiproxy:8474
    s3_endpoint: str  # MinIO through Toxiproxy's proxy "s3" (what the job uses)
    s3_direct: str  # MinIO's own Service (what the nemesis and the verifiers use: never through their own toxics)
    access_key: str
    secret_key: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> K8sSettings:
        """The controller pod's settings; a missing variable is a one-line UsageError naming it."""
        missing = [k for k in _REQUIRED if not env.get(k)]
        if missing:
            raise UsageError(f"--backend k8s runs inside the chart's chaos controller pod; not set: {', '.join(missing)}")
        return cls(
            env["STATEBED_K8S_NAMESPACE"],
            env["STATEBED_K8S_EXECUTOR_SELECTOR"],
            env["STATEBED_K8S_MASTER"],
            env["STATEBED_TOXIPROXY_API"],
            env["STATEBED_S3_ENDPOINT"],
            env["STATEBED_S3_DIRECT"],
            env.get("AWS_ACCESS_KEY_ID", ""),
            env.get("AWS_SECRET_ACCESS_KEY", ""),
        )


def k8s_targets(settings: K8sSettings, run_dir: Path) -> K8sTargets:
    """Targets through the API as the controller's ServiceAccount (in-cluster config, else ~/.kube/config)."""
    from kubernetes import client, config  # imported here: local runs never load the client

    from .targets.k8s import K8sTargets

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return K8sTargets(client.CoreV1Api(), settings.namespace, executor_selector=settings.executor_selector, local=LocalTargets(run_dir))


@contextlib.contextmanager
def k8s_storage(settings: K8sSettings) -> Iterator[tuple[dict[str, str], Services]]:
    """The store's S3 environment and the Toxiproxy proxy "s3" the chart created (never destroyed here)."""
    proxy = toxiproxy_client(settings.toxiproxy_api).get_proxy(PROXY_NAME)
    if proxy is None:
        raise UsageError(f"Toxiproxy at {settings.toxiproxy_api} has no proxy {PROXY_NAME!r} (the chart's config file creates it)")
    s3 = S3Settings(endpoint=settings.s3_endpoint, access_key=settings.access_key, secret_key=settings.secret_key)
    env = {
        "STATEBED_S3_ENDPOINT": settings.s3_endpoint,
        "AWS_ACCESS_KEY_ID": settings.access_key,
        "AWS_SECRET_ACCESS_KEY": settings.secret_key,
    }
    yield env, Services(settings.s3_endpoint, settings.s3_direct, proxy, s3, settings.toxiproxy_api)
