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

ROOT = Path(__file__).resolve().parents[2]


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "install" / "versions.env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def chart() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "charts" / "statebed" / "values.yaml").read_text())


def test_toxiproxy_is_the_charts_release() -> None:
    assert pins()["TOXIPROXY_VERSION"] == "v" + chart()["toxiproxy"]["image"]["tag"]


def test_the_built_minio_is_not_older_than_the_charts_image() -> None:
    built = re.fullmatch(r"v0\.0\.0-(\d{8})\d{6}-[0-9a-f]{12}", pins()["MINIO_VERSION"])
    image = re.fullmatch(r"RELEASE\.(\d{4})-(\d{2})-(\d{2})T.*", chart()["minio"]["image"]["tag"])
    assert built and image, (pins()["MINIO_VERSION"], chart()["minio"]["image"]["tag"])
    assert "".join(image.groups()) <= built.group(1)


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
