"""Where the real stack's parts are: what `install/install.sh` built (MinIO, Toxiproxy, the S3A
jars) and `install/kube-tools.sh` built (a cluster's binaries, a directory per component), asked
of the installer itself (`--where`: the cache layout has one owner,
install/paths.sh), or a path a user names in the environment (an image, another machine).

Missing: one line saying how to install it (a UsageError, exit 2), before anything starts.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from .errors import UsageError
from .processes import run_to_end

__all__ = ["COMPONENTS", "KUBE_TOOLS", "installed", "pins"]

COMPONENTS = {  # component -> the variable that names it instead
    "minio": "STATEBED_MINIO",
    "toxiproxy": "STATEBED_TOXIPROXY",
    "s3a": "STATEBED_S3A_JARS",
    "kubernetes": "STATEBED_KUBERNETES_BIN",
    "etcd": "STATEBED_ETCD_BIN",
    "containerd": "STATEBED_CONTAINERD_BIN",
    "cni": "STATEBED_CNI_BIN",
    "helm": "STATEBED_HELM_BIN",
    "pause": "STATEBED_PAUSE_BIN",
    "coredns": "STATEBED_COREDNS_BIN",
    "mc": "STATEBED_MC_BIN",
}
_INSTALL = Path(__file__).resolve().parents[2] / "install"  # in a checkout; an image names its parts instead
KUBE_TOOLS = {"kubernetes", "etcd", "containerd", "cni", "helm", "pause", "coredns", "mc"}  # built by kube-tools.sh


@functools.cache
def installed(component: str) -> Path:
    """The installed `component` (a binary, the S3A jar directory, or a kube-tools directory)."""
    override = os.environ.get(COMPONENTS[component])
    if override:
        if not os.path.exists(override):
            raise UsageError(f"{COMPONENTS[component]}={override}: no such file")
        return Path(override)
    script = _INSTALL / ("kube-tools.sh" if component in KUBE_TOOLS else "install.sh")
    if not script.is_file():
        raise UsageError(f"{component}: no installer at {script}; set {COMPONENTS[component]} to its path")
    done = run_to_end(["bash", str(script), "--where", component], timeout=60)
    if done.returncode != 0:
        raise UsageError(
            done.stderr.strip().splitlines()[-1]
            if done.stderr.strip()
            else f"{component}: not installed (install/{script.name} {component})"
        )
    return Path(done.stdout.strip())


@functools.cache
def pins() -> dict[str, str]:
    """install/versions.env's KEY=VALUE pins (a checkout's: images built here are tagged by them)."""
    path = _INSTALL / "versions.env"
    try:
        text = path.read_text()
    except OSError as e:
        raise UsageError(f"{path}: cannot read the pins ({e.strerror})") from None
    lines = (line.strip() for line in text.splitlines())
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#") and "=" in line)
