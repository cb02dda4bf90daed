"""The JVM failpoint plug-in without Spark: it compiles against pyspark's jars, is rebuilt only when
its sources change, a missing javac is one line, and Java parses every spec exactly as Python does."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from statebed_base.errors import UsageError
from statebed_base.installed import installed
from statebed_job import jvm_plugin
from statebed_store import failpoints

SPECS_OK = [
    "native.changelog.upload=error",
    "native.changelog.upload=error(boom here)",
    "native.snapshot.upload=30%delay(2000)",
    "native.sst.upload=1*drop",
    "native.commitlog.write=[batch=3,partition=1,attempt=0]1*error",
    "native.offsetlog.write=[attempt=0, batch=2]12.5%2*sleep(10)->delay(5)",
    "native.changelog.zombie=[batch=1]1*hold(60000)",
    "native.snapshot.zombie=hold(600000)",
    " native.changelog.upload = off ; native.snapshot.upload=exit(3)",
    "native.changelog.upload=exit",
    "native.changelog.upload=50%error->drop;\\n native.sst.upload=0%error",
    "native.changelog.upload=100%1*off",
    "native.changelog.upload=delay( 20 )",
    "native.changelog.upload=0.5%3*hold(1)",
    ";;native.commitlog.write=drop;",
    ";".join(f"{name}=off" for name in jvm_plugin.POINTS),
]
SPECS_BAD = [
    "native.changelog.upload=delay",
    "native.changelog.upload=hold(0)",
    "native.changelog.upload=hold(600001)",
    "native.changelog.upload=hold",
    "native.changelog.upload=101%error",
    "native.changelog.upload=[batch=1,batch=2]error",
    "native.changelog.upload=[stage=1]error",
    "native.changelog.upload=[]error",
    "native.changelog.upload=[batch=-1]error",
    "native.changelog.upload=exit(x)",
    "native.changelog.upload=explode",
    "native.changelog.upload=error->",
    "native.changelog.upload",
    "native.bogus=error",
]


def python_parse(line: str) -> dict[str, Any]:
    """Python's parse of a line, in ParseMain's JSON shape."""
    try:
        parsed = failpoints.parse_spec(line.replace("\\n", "\n"))
    except UsageError as e:
        return {"error": str(e)}
    return {
        "points": {
            name: [
                {"action": t.action, "pct": t.pct, "count": t.count, "arg": t.arg, "task": t.task, "describe": t.describe()} for t in terms
            ]
            for name, terms in parsed.items()
        }
    }


def java_parse(lines: list[str]) -> list[dict[str, Any]]:
    classpath = f"{jvm_plugin.build()}:{jvm_plugin.pyspark_jars()}/*"
    done = subprocess.run(
        ["java", "-cp", classpath, "statebed.ParseMain"], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_jar_holds_the_plugin_and_is_rebuilt_only_when_sources_change() -> None:
    jar = jvm_plugin.build()
    names = zipfile.ZipFile(jar).namelist()
    for cls in ("FailpointCheckpointFileManager", "FailpointLocalFileSystem", "Failpoints", "Target", "ParseMain"):
        assert f"statebed/{cls}.class" in names
    mtime = jar.stat().st_mtime_ns
    assert jvm_plugin.build() == jar and jar.stat().st_mtime_ns == mtime  # unchanged sources: no rebuild
    assert jar.name.startswith("statebed-jvm-") and jar == jvm_plugin.jar_path()


def test_a_changed_source_is_a_new_jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    (src / "statebed").mkdir(parents=True)
    for f in jvm_plugin.SOURCES.rglob("*.java"):
        (src / "statebed" / f.name).write_bytes(f.read_bytes())
    monkeypatch.setattr(jvm_plugin, "SOURCES", src)
    monkeypatch.setattr(jvm_plugin, "BUILD", tmp_path / "build")
    first = jvm_plugin.build()
    assert first.parent == tmp_path / "build" and first.is_file()
    with (src / "statebed" / "Target.java").open("a") as f:
        f.write("// changed\n")
    second = jvm_plugin.build()
    assert second != first and second.is_file() and not first.exists()  # the stale jar is gone


def test_missing_javac_is_one_line_naming_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(jvm_plugin, "BUILD", tmp_path / "build")  # no jar yet: it must compile
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("STATEBED_JVM_JAR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert jvm_plugin.main() == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "javac" in err[0] and "openjdk-17-jdk-headless" in err[0], err


def test_a_prebuilt_jar_is_used_and_a_bad_one_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed statebed (the image) has no jvm/ sources: STATEBED_JVM_JAR names the jar."""
    monkeypatch.setattr(jvm_plugin, "SOURCES", tmp_path / "nowhere")
    with pytest.raises(UsageError, match="STATEBED_JVM_JAR"):
        jvm_plugin.build()
    monkeypatch.setenv("STATEBED_JVM_JAR", str(tmp_path / "missing.jar"))
    with pytest.raises(UsageError, match="missing.jar: not a regular file"):
        jvm_plugin.build()
    (tmp_path / "given.jar").write_bytes(b"PK")
    monkeypatch.setenv("STATEBED_JVM_JAR", str(tmp_path / "given.jar"))
    assert jvm_plugin.plugin_confs(tmp_path / "c.json")["spark.jars"] == str(tmp_path / "given.jar")


def test_java_parses_every_spec_as_python_does() -> None:
    lines = SPECS_OK + SPECS_BAD
    java = java_parse(lines)
    assert len(java) == len(lines)
    for line, got in zip(lines, java):
        want = python_parse(line)
        if "error" in want:
            assert "error" in got, f"{line!r}: Python rejects ({want['error']}), Java parsed {got}"
        else:
            assert got == want, f"{line!r}: Java {got} != Python {want}"
    assert sum("error" in python_parse(line) for line in SPECS_OK) == 0  # the table's positive half parses


def test_plugin_confs_load_the_manager_and_the_filesystem(tmp_path: Path) -> None:
    conf = jvm_plugin.plugin_confs(tmp_path / "failpoints" / "control.json")
    assert conf["spark.sql.streaming.checkpointFileManagerClass"] == "statebed.FailpointCheckpointFileManager"
    assert conf["spark.hadoop.fs.file.impl"] == "statebed.FailpointLocalFileSystem"
    assert conf["spark.hadoop.fs.file.impl.disable.cache"] == "true"
    assert conf["spark.jars"] == str(jvm_plugin.jar_path())
    assert conf["spark.hadoop.statebed.failpoints.control"] == str(tmp_path / "failpoints" / "control.json")


@pytest.mark.s3
def test_s3a_runs_load_the_s3a_twins_beside_the_core_jar(tmp_path: Path) -> None:
    """The S3A jar holds the cloud manager and S3A with the SST point, links against the installer's
    jars (javap resolves their supertypes), and an s3a run's confs name the manager asked for."""
    jar = jvm_plugin.build_s3a()
    names = set(zipfile.ZipFile(jar).namelist())
    assert {"statebed/FailpointAbortableCheckpointFileManager.class", "statebed/FailpointS3AFileSystem.class"} <= names
    cp = f"{jar}:{jvm_plugin.build()}:{installed('s3a')}/*:{jvm_plugin.pyspark_jars()}/*"
    done = subprocess.run(
        ["javap", "-cp", cp, "statebed.FailpointAbortableCheckpointFileManager"], capture_output=True, text=True, timeout=120
    )
    assert "extends org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager" in done.stdout, done.stderr
    control = tmp_path / "control.json"
    conf = jvm_plugin.plugin_confs(control, s3a=True, manager="abortable")
    assert conf["spark.sql.streaming.checkpointFileManagerClass"] == "statebed.FailpointAbortableCheckpointFileManager"
    assert conf["spark.hadoop.fs.s3a.impl"] == "statebed.FailpointS3AFileSystem"
    assert conf["spark.jars"].split(",") == [str(jvm_plugin.build()), str(jar)]
    assert conf["spark.executor.extraClassPath"] == f"{jvm_plugin.build()}:{jar}"
    rename = jvm_plugin.plugin_confs(control, s3a=True)
    assert rename["spark.sql.streaming.checkpointFileManagerClass"] == jvm_plugin.MANAGER_CLASS
    assert "spark.hadoop.fs.s3a.impl" not in jvm_plugin.plugin_confs(control)  # a local run keeps S3A as it is
    with pytest.raises(UsageError, match="checkpoint_file_manager"):
        jvm_plugin.plugin_confs(control, s3a=True, manager="magic")


def test_an_installed_statebed_without_the_s3a_jar_runs_the_default_manager_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The image ships the core jar only: an s3a run there keeps Spark's S3A (no SST point), and
    asking for the cloud manager is a usage error naming what is missing."""
    monkeypatch.setattr(jvm_plugin, "S3A_SOURCES", tmp_path / "nowhere")
    monkeypatch.delenv(jvm_plugin.S3A_JAR_ENV, raising=False)
    conf = jvm_plugin.plugin_confs(tmp_path / "c.json", s3a=True)
    assert conf["spark.jars"] == str(jvm_plugin.build()) and "spark.hadoop.fs.s3a.impl" not in conf
    with pytest.raises(UsageError, match=jvm_plugin.S3A_JAR_ENV):
        jvm_plugin.plugin_confs(tmp_path / "c.json", s3a=True, manager="abortable")


def test_a_prebuilt_jar_needs_no_javac(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The image has the sources' jar but no JDK: with STATEBED_JVM_JAR set, nothing looks for javac,
    even where no jar of the checkout's sources exists yet (the control: unset, the same call fails on javac)."""
    monkeypatch.setattr(jvm_plugin, "BUILD", tmp_path / "build")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    (tmp_path / "given.jar").write_bytes(b"PK")
    monkeypatch.setenv("STATEBED_JVM_JAR", str(tmp_path / "given.jar"))
    assert jvm_plugin.build() == tmp_path / "given.jar" and jvm_plugin.main() == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "given.jar")
    monkeypatch.delenv("STATEBED_JVM_JAR")
    with pytest.raises(UsageError, match="javac not found"):
        jvm_plugin.build()
    assert not (tmp_path / "build").exists()


def test_the_cli_compiles_named_sources_into_a_named_jar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The image's build step: `--sources DIR --jar PATH` compiles with the real javac into exactly PATH,
    whatever STATEBED_JVM_JAR says (the image sets it to PATH), and again replaces the jar whole."""
    monkeypatch.setenv("STATEBED_JVM_JAR", str(tmp_path / "not-built-yet.jar"))
    jar = tmp_path / "opt" / "statebed-jvm.jar"
    assert jvm_plugin.main(["--sources", str(jvm_plugin.SOURCES), "--jar", str(jar)]) == 0
    assert capsys.readouterr().out.strip() == str(jar)
    names = zipfile.ZipFile(jar).namelist()
    assert {"statebed/FailpointCheckpointFileManager.class", "statebed/FailpointLocalFileSystem.class"} <= set(names)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["statebed-jvm.jar"]  # nothing staged left behind
    done = subprocess.run(
        ["java", "-cp", f"{jar}:{jvm_plugin.pyspark_jars()}/*", "statebed.ParseMain"],
        input="native.changelog.upload=1*error\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and json.loads(done.stdout) == python_parse("native.changelog.upload=1*error"), done.stderr
    jar.write_bytes(b"stale")
    assert jvm_plugin.main(["--jar", str(jar)]) == 0 and zipfile.is_zipfile(jar)  # default sources; a regular file is replaced


def test_the_cli_names_bad_sources_and_a_jar_path_that_is_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    assert jvm_plugin.main(["--sources", str(tmp_path / "empty"), "--jar", str(tmp_path / "p.jar")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--sources" in err[0] and "empty: no .java files" in err[0], err
    assert jvm_plugin.main(["--sources", str(jvm_plugin.SOURCES), "--jar", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--jar" in err[0] and "is a directory" in err[0], err
    with pytest.raises(SystemExit) as e:
        jvm_plugin.main(["--sources", str(jvm_plugin.SOURCES)])
    assert e.value.code == 2 and "--sources needs --jar" in capsys.readouterr().err
    assert not (tmp_path / "p.jar").exists()
