"""The JVM failpoint plug-in (jvm/): failpoints inside Spark's own checkpoint I/O for native runs.

Spark's RocksDB store writes its changelogs, zips, SSTs and the driver's offset/commit logs in
the JVM, where the Python store's failpoints cannot reach. The plug-in (Java source in `jvm/src`)
wraps Spark's default checkpoint file manager and Hadoop's local FileSystem and speaks the same
grammar and control file as `statebed_store.failpoints`; this module registers its points (so
`Control.arm` accepts them), compiles the jar with the JDK's `javac` against pyspark's own jars
(once per source digest; nothing downloaded) and gives the Spark confs that load it.
`python -m statebed_job.jvm_plugin --sources DIR --jar PATH` compiles named sources into a named
jar instead: how the image (Dockerfile) ships the plug-in, which its STATEBED_JVM_JAR then names.
A second jar (`jvm/src-s3a`, compiled against the installer's hadoop-aws and spark-hadoop-cloud)
carries the S3A twins: the cloud checkpoint file manager with the same failpoints and S3A with the
SST point; s3a:// runs load it beside the first. See docs/native-failpoints.md.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from statebed_base.errors import NotRegularFileError, StatebedError, UsageError
from statebed_base.installed import installed
from statebed_base.localfs import atomic_write, check_regular
from statebed_base.log import get_logger, kv
from statebed_base.names import printable
from statebed_store import failpoints

__all__ = [
    "MANAGERS",
    "POINTS",
    "build",
    "build_s3a",
    "compile_jar",
    "find_javac",
    "jar_path",
    "plugin_confs",
    "pyspark_jars",
    "s3a_jar_path",
]

log = get_logger("jvm_plugin")

JVM_DIR = Path(__file__).resolve().parents[2] / "jvm"
SOURCES = JVM_DIR / "src"
S3A_SOURCES = JVM_DIR / "src-s3a"
BUILD = JVM_DIR / "build"
MANAGER_CLASS = "statebed.FailpointCheckpointFileManager"
FILESYSTEM_CLASS = "statebed.FailpointLocalFileSystem"
# The run's `checkpoint_file_manager` -> the plug-in's manager extending Spark's one of that kind.
MANAGERS = {"rename": MANAGER_CLASS, "abortable": "statebed.FailpointAbortableCheckpointFileManager"}
S3A_FILESYSTEM_CLASS = "statebed.FailpointS3AFileSystem"
S3A_REQUEST_INTERCEPTOR = "statebed.S3RequestInterceptor"  # logs each S3 request of S3A's SDK client (RequestLog, level sdk)
CONTROL_CONF = "statebed.failpoints.control"  # Failpoints.CONF_KEY in the Java source
JDK_PACKAGE = "openjdk-17-jdk-headless"
JAR_ENV = "STATEBED_JVM_JAR"
S3A_JAR_ENV = "STATEBED_JVM_S3A_JAR"

_CLOSE = "at the atomic stream's close, before the rename into place (drop: the file never lands, the writer sees success)"
_ZOMBIE = (
    "delayed close (zombie): delay/hold make close() fail as a lost task's would while the rename lands later "
    "(after delay ms, or on release / the hold bound); other actions as on the upload point"
)
# The plug-in's points (the same names as Failpoints.KNOWN_POINTS in the Java source).
POINTS = {
    "native.changelog.upload": f"native: a state changelog (<v>[_<id>].changelog), {_CLOSE}",
    "native.snapshot.upload": f"native: a state snapshot zip (<v>[_<id>].zip), {_CLOSE}",
    "native.sst.upload": "native: an SST copied into SSTs/ with the Hadoop FileSystem API, before the copy (drop: skip the copy)",
    "native.commitlog.write": f"native: commits/<batch> on the driver, {_CLOSE}",
    "native.offsetlog.write": f"native: offsets/<batch> on the driver, {_CLOSE}",
    "native.changelog.zombie": f"native: a state changelog, {_ZOMBIE}",
    "native.snapshot.zombie": f"native: a state snapshot zip, {_ZOMBIE}",
    "native.cleanup.delete": (
        "native: a state file (changelog, zip, SST) Spark's maintenance deletes, before the delete "
        "(drop: the file stays; error: the delete fails, as Spark's maintenance sees a failed delete)"
    ),
}
for _name, _doc in POINTS.items():
    failpoints.register(_name, _doc)


def pyspark_jars() -> Path:
    """The jars of the installed pyspark: the plug-in compiles against exactly the Spark it runs in."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def find_javac() -> str:
    """The JDK's javac ($JAVA_HOME/bin/javac, else on PATH); missing is a one-line usage error."""
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / "javac" if home else None
    found = str(candidate) if candidate is not None and os.access(candidate, os.X_OK) else shutil.which("javac")
    if found is None:
        raise UsageError(f"javac not found: the JVM failpoint plug-in needs the JDK (apt-get install {JDK_PACKAGE})")
    return found


def _sources(root: Path | None = None) -> list[Path]:
    return sorted((SOURCES if root is None else root).rglob("*.java"))


def _digest(*roots: Path, extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for root in roots:
        for src in _sources(root):
            digest.update(str(src.relative_to(root)).encode() + b"\0" + src.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def jar_path() -> Path:
    """Where the jar for the current sources lives (named by their digest: a change means a new jar)."""
    return BUILD / f"statebed-jvm-{_digest(SOURCES)}.jar"


def s3a_jar_path() -> Path:
    """Where the S3A jar for the current sources and the installer's S3A jars lives."""
    return BUILD / f"statebed-jvm-s3a-{_digest(SOURCES, S3A_SOURCES, extra=installed('s3a').name)}.jar"


def build() -> Path:
    """The plug-in's jar, compiled now only when no jar of these sources exists yet.

    `STATEBED_JVM_JAR` names a prebuilt jar instead (an installed statebed has no jvm/ sources)."""
    prebuilt = os.environ.get(JAR_ENV)
    if prebuilt:
        if not Path(prebuilt).is_file():
            raise UsageError(f"{JAR_ENV}={prebuilt}: not a regular file (the JVM failpoint plug-in's jar; `make jvm` builds it)")
        return Path(prebuilt).absolute()
    if not _sources():
        raise UsageError(f"the JVM failpoint plug-in's sources are not at {SOURCES}: set {JAR_ENV} to a built jar (`make jvm`)")
    return _built(jar_path(), "statebed-jvm-[0-9a-f]*.jar", lambda jar: _compile(_sources(), jar))


def build_s3a() -> Path:
    """The S3A jar (`jvm/src-s3a` against the core classes and the installer's S3A jars), built
    when missing; `STATEBED_JVM_S3A_JAR` names a prebuilt one instead."""
    prebuilt = os.environ.get(S3A_JAR_ENV)
    if prebuilt:
        if not Path(prebuilt).is_file():
            raise UsageError(f"{S3A_JAR_ENV}={prebuilt}: not a regular file (the plug-in's S3A jar; `make jvm` builds it)")
        return Path(prebuilt).absolute()
    if not _sources(S3A_SOURCES):
        raise UsageError(f"the JVM plug-in's S3A sources are not at {S3A_SOURCES}: set {S3A_JAR_ENV} to a built jar (`make jvm`)")
    core, s3a = build(), installed("s3a")
    return _built(s3a_jar_path(), "statebed-jvm-s3a-*.jar", lambda jar: _compile(_sources(S3A_SOURCES), jar, [core, s3a / "*"]))


def _built(jar: Path, family: str, compile_into: Callable[[Path], None]) -> Path:
    """`jar`, compiled now under the build lock unless it exists; older jars of its `family` removed."""
    if jar.is_file():
        return jar
    find_javac()  # missing: the one-line error before anything is created
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jar.is_file():  # another process built it while we waited
            return jar
        compile_into(jar)
        for old in BUILD.glob(family):
            if old != jar and old.is_file() and not old.is_symlink():
                old.unlink()
    return jar


def compile_jar(sources: Path, jar: Path) -> Path:
    """Compile the plug-in's Java `sources` (a directory) into `jar`, whatever STATEBED_JVM_JAR says:
    the image's build step, where the jar's name is fixed and the sources are not in a checkout.
    An existing regular file at `jar` is replaced whole; anything else there is a usage error."""
    files = _sources(sources)
    if not files:
        raise UsageError(f"--sources {printable(sources)}: no .java files (the JVM failpoint plug-in's jvm/src)")
    try:
        check_regular(jar)
    except NotRegularFileError as e:
        raise UsageError(f"--jar {printable(jar)}: {e.detail}") from None
    except OSError as e:
        raise UsageError(f"--jar {printable(jar)}: {e.strerror or e}") from None
    _compile(files, jar)
    return jar.absolute()


def _compile(sources: list[Path], jar: Path, class_path: Sequence[Path] = ()) -> None:
    """The one javac + jar invocation: `sources` against pyspark's jars (and `class_path`), published at `jar` whole or not at all."""
    javac = find_javac()
    cp = ":".join([*map(str, class_path), f"{pyspark_jars()}/*"])
    with tempfile.TemporaryDirectory(prefix="statebed-jvm-") as tmp:
        classes = Path(tmp) / "classes"
        _run([javac, "--release", "17", "-nowarn", "-d", str(classes), "-cp", cp, *map(str, sources)])
        staged = Path(tmp) / "plugin.jar"
        _run([str(Path(javac).with_name("jar")), "--create", "--file", str(staged), "-C", str(classes), "."])
        atomic_write(jar, staged.read_bytes())


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} failed on the JVM plug-in ({done.returncode}): {done.stderr.strip()[-2000:]}")


def plugin_confs(control_file: Path, *, s3a: bool = False, manager: str = "rename") -> dict[str, str]:
    """Spark confs that load the plug-in (building its jars if needed), following `control_file`.

    The checkpoint file manager (`manager`: Spark's rename-based default or, on S3A, its cloud
    "abortable" one, each wrapped) covers state changelogs/zips and the offset/commit logs; the
    `file:` FileSystem covers SST copies (uncached, so no FileSystem made before these confs
    applied is reused), and on an s3a:// checkpoint (`s3a`) S3A's twin does (cached: S3A clients
    are heavy, and none is made before the session applies these); the control file reaches every
    JVM through the Hadoop conf."""
    if manager not in MANAGERS:
        raise UsageError(f"checkpoint_file_manager must be one of {', '.join(MANAGERS)}, got {manager!r}")
    jars = [str(build()), *([str(twins)] if s3a and (twins := _s3a_jar(manager)) else [])]
    conf = {
        "spark.jars": ",".join(jars),
        "spark.driver.extraClassPath": ":".join(jars),
        "spark.executor.extraClassPath": ":".join(jars),
        "spark.sql.streaming.checkpointFileManagerClass": MANAGERS[manager],
        "spark.hadoop.fs.file.impl": FILESYSTEM_CLASS,
        "spark.hadoop.fs.file.impl.disable.cache": "true",
        f"spark.hadoop.{CONTROL_CONF}": str(Path(control_file).absolute()),
    }
    if len(jars) > 1:
        conf["spark.hadoop.fs.s3a.impl"] = S3A_FILESYSTEM_CLASS
        conf["spark.hadoop.fs.s3a.audit.execution.interceptors"] = S3A_REQUEST_INTERCEPTOR
    return conf


def _s3a_jar(manager: str) -> Path | None:
    """The S3A jar; None (said in a warning) where an installed statebed has neither its sources
    nor STATEBED_JVM_S3A_JAR and the default manager is asked for: the run goes on without the
    SST point on S3A (a fault scheduled on it then never fires: unknown, not valid)."""
    if manager == "rename" and not os.environ.get(S3A_JAR_ENV) and not _sources(S3A_SOURCES):
        log.warning("the plug-in's S3A jar is not here: native.sst.upload cannot fire on s3a://", extra=kv(hint=f"set {S3A_JAR_ENV}"))
        return None
    return build_s3a()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m statebed_job.jvm_plugin",
        description="Build the JVM failpoint plug-in's jar and print its path: by default jvm/build/statebed-jvm-<digest>.jar "
        "from this checkout's jvm/src (make jvm; STATEBED_JVM_JAR, if set, is used instead); with --jar, the sources compiled into PATH.",
    )
    p.add_argument(
        "--sources", type=Path, metavar="DIR", help="the plug-in's Java sources (default: jvm/src of this checkout); needs --jar"
    )
    p.add_argument(
        "--jar", type=Path, metavar="PATH", help="compile into this jar (replacing a regular file there), ignoring STATEBED_JVM_JAR"
    )
    p.add_argument(
        "--s3a", action="store_true", help="also build the S3A jar (jvm/src-s3a, against the installer's S3A jars) and print its path"
    )
    return p


def main(argv: Sequence[str] = ()) -> int:
    """`python -m statebed_job.jvm_plugin [--sources DIR --jar PATH] [--s3a]`: build the jar(s) and print their paths."""
    parser = _parser()
    args = parser.parse_args(list(argv))
    if args.sources is not None and args.jar is None:
        parser.error("--sources needs --jar (the default build is named by the sources' digest in jvm/build)")
    try:
        jars = [build() if args.jar is None else compile_jar(args.sources or SOURCES, args.jar)]
        if args.s3a:
            jars.append(build_s3a())
    except StatebedError as e:
        print(f"statebed: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # our sources do not compile: a bug
        print(f"statebed: {e}", file=sys.stderr)
        return 70
    for jar in jars:
        print(printable(jar))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
