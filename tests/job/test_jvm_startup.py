"""The options every JVM statebed starts gets: a class-data archive when one matches, and
STATEBED_JAVA_OPTS (src/statebed_job/jvm_startup.py). Spark-free: the confs and the daemons' env."""

from __future__ import annotations

from pathlib import Path

import pytest

from statebed_job import cluster, jvm_startup
from statebed_job.config import JobOptions
from statebed_job.jvm_plugin import jar_path
from statebed_job.session import spark_conf
from statebed_model.rundir import RunDir


@pytest.fixture
def cds_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty archive directory, no extra options: each test says what exists."""
    monkeypatch.setattr(jvm_startup, "CDS_DIR", tmp_path / "cds")
    monkeypatch.delenv(jvm_startup.OPTS_ENV, raising=False)
    monkeypatch.delenv(jvm_startup.CDS_ENV, raising=False)
    return tmp_path / "cds"


def _archive(extra_classpath: str = "") -> Path:
    path = jvm_startup.archive_path(extra_classpath)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"archive")
    return path


def test_no_archive_and_no_options_add_nothing(cds_dir: Path) -> None:
    assert jvm_startup.java_options() == ""


def test_an_archive_is_used_quietly_and_the_extra_options_follow(cds_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _archive()
    monkeypatch.setenv(jvm_startup.OPTS_ENV, " -XX:TieredStopAtLevel=1 ")
    assert jvm_startup.java_options() == f"-XX:SharedArchiveFile={archive} -Xlog:cds*=off -XX:TieredStopAtLevel=1"
    monkeypatch.setenv(jvm_startup.CDS_ENV, "off")  # the archive builder's own runs
    assert jvm_startup.java_options() == "-XX:TieredStopAtLevel=1"


def test_each_extra_classpath_has_its_own_archive(cds_dir: Path) -> None:
    plain = _archive()
    assert jvm_startup.archive_path("/x/plugin.jar") != plain
    assert jvm_startup.java_options("/x/plugin.jar") == ""  # its archive was never dumped
    assert plain.name.startswith("spark-") and plain.suffix == ".jsa" and plain.parent == cds_dir


def test_driver_and_executors_get_the_archive_of_their_classpath(cds_dir: Path, tmp_path: Path) -> None:
    plain = _archive()
    conf = spark_conf(JobOptions(format="v2"), RunDir(tmp_path / "run"), "local[2]")
    assert conf["spark.driver.extraJavaOptions"].startswith("-Dderby.system.home=")  # statebed's own options stay first
    for role in ("driver", "executor"):
        assert conf[f"spark.{role}.extraJavaOptions"].endswith(f"-XX:SharedArchiveFile={plain} -Xlog:cds*=off")
    native = spark_conf(JobOptions(format="native-v2"), RunDir(tmp_path / "native"), "local[2]")
    assert native["spark.driver.extraClassPath"] == str(jar_path())
    assert "SharedArchiveFile" not in native["spark.driver.extraJavaOptions"]  # the plug-in's classpath has no archive here
    with_jar = _archive(str(jar_path()))
    native = spark_conf(JobOptions(format="native-v2"), RunDir(tmp_path / "native"), "local[2]")
    assert native["spark.executor.extraJavaOptions"].endswith(f"-XX:SharedArchiveFile={with_jar} -Xlog:cds*=off")


def test_standalone_daemons_get_the_options(cds_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _archive()
    monkeypatch.setenv("SPARK_DAEMON_JAVA_OPTS", "-Dmine=1")
    seen: dict[str, str] = {}
    monkeypatch.setattr(cluster, "spawn", lambda argv, **kw: seen.update(kw["env"]))
    cluster.StandaloneCluster(tmp_path / "c")._spawn([cluster.WORKER_CLASS], "127.0.0.2", tmp_path / "w.log")
    assert seen["SPARK_DAEMON_JAVA_OPTS"] == f"-Dmine=1 -XX:SharedArchiveFile={plain} -Xlog:cds*=off"
