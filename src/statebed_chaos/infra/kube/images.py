"""The images pods run, built here and imported into containerd: nothing is ever pulled.

The small ones are scratch images around a static binary the installers built (pause from
kube-tools; MinIO and Toxiproxy from `make stack`; `mc` from kube-tools), tagged by their pins
in install/versions.env, which `charts/statebed/values-kube-up.yaml` names (a test holds them
equal). statebed's own image is the one `make image` builds with podman. Each is saved as a
docker archive and imported into containerd's `k8s.io` namespace, where the kubelet looks.
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

from statebed_base.errors import StatebedError
from statebed_base.installed import installed, pins
from statebed_base.localfs import atomic_write

from .layout import ClusterDir
from .procs import run_tool

__all__ = ["PAUSE_IMAGE", "STATEBED_IMAGE", "ImageError", "chart_images", "import_image", "pause_image", "save_image"]

PAUSE_IMAGE = "localhost/statebed-pause:1"
STATEBED_IMAGE = "localhost/statebed:smoke"  # the Makefile's SMOKE_IMAGE (make image)


class ImageError(StatebedError):
    """An image could not be built, saved or imported (the tool's message says why)."""


def _podman(*argv: str, what: str) -> None:
    run_tool(["podman", *argv], ImageError, f"podman {argv[0]} {what}", timeout=900)


def save_image(cd: ClusterDir, tag: str) -> Path:
    """`tag` from podman's store as a docker archive under the cluster's scratch directory."""
    archive = cd.scratch / (tag.rsplit("/", 1)[-1].replace(":", "-") + ".tar")
    archive.unlink(missing_ok=True)
    _podman("save", "--format", "docker-archive", "-o", str(archive), tag, what=tag)
    return archive


def scratch_image(cd: ClusterDir, tag: str, binary: Path, entrypoint: str) -> Path:
    """`binary` as /`entrypoint` in a scratch image with a world-writable /tmp (HOME), saved.
    /tmp comes from a tar (ADD keeps a directory's mode; COPY of an empty directory does not)."""
    ctx = cd.scratch / f"image-{entrypoint}"
    ctx.mkdir(parents=True, exist_ok=True)
    atomic_write(ctx / entrypoint, binary.read_bytes())
    (ctx / entrypoint).chmod(0o755)
    (ctx / "tmp").mkdir(exist_ok=True)
    (ctx / "tmp").chmod(0o1777)
    with tarfile.open(ctx / "tmp.tar", "w") as tar:
        tar.add(ctx / "tmp", arcname="tmp", recursive=False)  # the directory's 1777 travels in the tar
    containerfile = f'FROM scratch\nCOPY {entrypoint} /{entrypoint}\nADD tmp.tar /\nENV HOME=/tmp\nENTRYPOINT ["/{entrypoint}"]\n'
    atomic_write(ctx / "Containerfile", containerfile.encode())
    _podman("build", "--runtime", "runc", "-q", "-t", tag, str(ctx), what=tag)
    return save_image(cd, tag)


def pause_image(cd: ClusterDir, pause: Path) -> Path:
    """The sandbox image (kube-tools' `pause`)."""
    return scratch_image(cd, PAUSE_IMAGE, pause, "pause")


def chart_images(cd: ClusterDir) -> list[Path]:
    """Every image the chart's values-kube-up.yaml profile runs, as archives: MinIO, Toxiproxy and
    mc around the installers' binaries, and statebed's (missing: one line naming `make image`)."""
    p = pins()
    if subprocess.run(["podman", "image", "exists", STATEBED_IMAGE], timeout=60, check=False).returncode != 0:
        raise ImageError(f"{STATEBED_IMAGE} is not in podman's store: make image")
    return [
        scratch_image(cd, f"localhost/statebed-minio:{p['MINIO_VERSION']}", installed("minio"), "minio"),
        scratch_image(cd, f"localhost/statebed-toxiproxy:{p['TOXIPROXY_VERSION']}", installed("toxiproxy"), "toxiproxy"),
        scratch_image(cd, f"localhost/statebed-mc:{p['MC_VERSION']}", installed("mc") / "mc", "mc"),
        save_image(cd, STATEBED_IMAGE),
    ]


def import_image(cd: ClusterDir, containerd: Path, archive: Path) -> None:
    """An OCI/docker archive into containerd's k8s.io namespace (what the kubelet runs from)."""
    argv = [str(containerd / "ctr"), "--address", str(cd.containerd_socket), "-n", "k8s.io", "images", "import", str(archive)]
    run_tool(argv, ImageError, f"ctr images import {archive}", timeout=900)
