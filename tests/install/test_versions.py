"""`install/versions.env` is the one file of the storage stack's pins; what else names a version agrees.

The chart keeps the official images (MinIO's are frozen since its last release, 2025-09-07; the
Go module proxy serves a later source commit, which is what the installer builds), so MinIO
agrees by date: the chart's release is not newer than the built commit. Toxiproxy is the same
release in both. hadoop-aws is the Hadoop pyspark ships."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyspark
import yaml

from statebed_base.installed import pins

ROOT = Path(__file__).resolve().parents[2]


def chart() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "charts" / "statebed" / "values.yaml").read_text())


def test_toxiproxy_is_the_charts_release() -> None:
    assert pins()["TOXIPROXY_VERSION"] == "v" + chart()["toxiproxy"]["image"]["tag"]


def test_the_built_minio_is_not_older_than_the_charts_image() -> None:
    built = re.fullmatch(r"v0\.0\.0-(\d{8})\d{6}-[0-9a-f]{12}", pins()["MINIO_VERSION"])
    image = re.fullmatch(r"RELEASE\.(\d{4})-(\d{2})-(\d{2})T.*", chart()["minio"]["image"]["tag"])
    assert built and image, (pins()["MINIO_VERSION"], chart()["minio"]["image"]["tag"])
    assert "".join(image.groups()) <= built.group(1)


def test_the_kube_up_profile_tags_the_images_built_here_by_their_pins() -> None:
    """statebed_chaos.infra.kube.images tags the scratch images by the pins; the profile must name the same."""
    profile = yaml.safe_load((ROOT / "charts" / "statebed" / "values-kube-up.yaml").read_text())
    assert profile["minio"]["image"]["tag"] == pins()["MINIO_VERSION"]
    assert profile["minio"]["mcImage"]["tag"] == pins()["MC_VERSION"]
    assert profile["toxiproxy"]["image"]["tag"] == pins()["TOXIPROXY_VERSION"]
    assert all(i["digest"] == "" for i in (profile["minio"]["image"], profile["minio"]["mcImage"], profile["toxiproxy"]["image"]))


def test_hadoop_aws_is_the_hadoop_pyspark_ships() -> None:
    jars = Path(pyspark.__file__).parent / "jars"
    shipped = {m.group(1) for j in jars.glob("hadoop-client-api-*.jar") if (m := re.search(r"-(\d+\.\d+\.\d+)\.jar$", j.name))}
    assert shipped == {pins()["HADOOP_AWS_VERSION"]}


def test_every_pin_the_scripts_read_is_in_the_file() -> None:
    """Positive control of the parser, and no script reads a pin the file lacks."""
    names = set(pins())
    used = set()
    for script in (ROOT / "install").rglob("*"):
        if script.is_file() and script.suffix in (".sh", ".xml"):
            used |= set(re.findall(r"\b([A-Z][A-Z0-9_]*_VERSION)\b", script.read_text()))
    assert {"MINIO_VERSION", "TOXIPROXY_VERSION", "HADOOP_AWS_VERSION"} <= names
    assert used <= names, used - names


def _go_mod(name: str) -> str:
    return (ROOT / "install" / "kube" / name / "go.mod").read_text()


def test_the_kubernetes_wrapper_builds_the_pinned_release_with_its_own_staging_modules() -> None:
    """k8s.io/kubernetes v1.M.P needs each staging module k8s.io/<m> at v0.M.P (what its ./staging
    holds); a pin changed in versions.env without the wrapper would build a mix."""
    ver = pins()["KUBERNETES_VERSION"]
    mod = _go_mod("kubernetes")
    assert re.search(rf"^(require )?\s*k8s\.io/kubernetes {re.escape(ver)}$", mod, re.M), "go.mod does not require the pinned release"
    staging = re.findall(r"^\s*(k8s\.io/[\w.-]+) => (k8s\.io/[\w.-]+) (v\S+)$", mod, re.M)
    assert len(staging) >= 30  # the release's staging modules (31 in 1.35)
    assert {(a == b, v) for a, b, v in staging} == {(True, "v0." + ver.removeprefix("v1."))}


def test_the_etcd_wrapper_builds_the_pinned_release() -> None:
    assert re.search(rf"^require go\.etcd\.io/etcd/server/v3 {re.escape(pins()['ETCD_VERSION'])}$", _go_mod("etcd"), re.M)
