"""The JVM failpoint plug-in (jvm/): failpoints inside Spark's own checkpoint I/O for native runs.

Spark's RocksDB store writes its changelogs, zips, SSTs and the driver's offset/commit logs in
the JVM, where the Python store's failpoints cannot reach. The plug-in (Java source in `jvm/src`)
wraps Spark's default checkpoint file manager and Hadoop's local FileSystem and speaks the same
grammar and control file as `statebed_store.failpoints`; this module registers its points (so
`Control.arm` accepts them), compiles the jar with the JDK's `javac` against pyspark's own jars
(once per source digest; nothing downloaded) and gives the Spark confs that load it.
`python -m statebed_job.jvm_plugin --sources DIR --jar PATH` compiles named sources into a named
jar instead: how the image (Dockerfile) ships the plug-in, which its STATEBED_JVM_JAR then names.
See docs/native-failpoints.md.
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
from collections.abc import Sequence
from pathlib import Path

from statebed_base.errors import NotRegularFileError, StatebedError, UsageError
from statebed_base.localfs import atomic_write, check_regular
from statebed_base.names import printable

from statebed_store import failpoints

__all__ = ["POINTS", "build", "compile_jar", "find_javac", "jar_path", "plugin_confs", "pyspark_jars"]

JVM_DIR = Path(__file__).resolve().parents[2] / "jvm"
SOURCES = JVM_DIR / "src"
BUILD = JVM_DIR / "build"
MANAGER_CLASS = "statebed.FailpointCheckpointFileManager"
FILESYSTEM_CLASS = "statebed.FailpointLocalFileSystem"
CONTROL_CONF = "statebed.failpoints.control"  # Failpoints.CONF_KEY in the Java source
JDK_PACKAGE = "openjdk-17-jdk-headless"
JAR_ENV = "STATEBED_JVM_JAR"

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


def jar_path() -> Path:
    """Where the jar for the current sources lives (named by their digest: a change means a new jar)."""
    digest = hashlib.sha256()
    for src in _sources():
        digest.update(str(src.relative_to(SOURCES)).encode() + b"\0" + src.read_bytes() + b"\0")
    return BUILD / f"statebed-jvm-{digest.hexdigest()[:16]}.jar"


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
    jar = jar_path()
    if jar.is_file():
        return jar
    find_javac()  # missing: the one-line error before anything is created
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jar.is_file():  # another process built it while we waited
            return jar
        _compile(_sources(), jar)
        for old in BUILD.glob("statebed-jvm-*.jar"):
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


def _compile(sources: list[Path], jar: Path) -> None:
    """The one javac + jar invocation: `sources` against pyspark's jars, published at `jar` whole or not at all."""
    javac = find_javac()
    with tempfile.TemporaryDirectory(prefix="statebed-jvm-") as tmp:
        classes = Path(tmp) / "classes"
        _run([javac, "--release", "17", "-nowarn", "-d", str(classes), "-cp", f"{pyspark_jars()}/*", *map(str, sources)])
        staged = Path(tmp) / "plugin.jar"
        _run([str(Path(javac).with_name("jar")), "--create", "--file", str(staged), "-C", str(classes), "."])
        atomic_write(jar, staged.read_bytes())


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} failed on the JVM plug-in ({done.returncode}): {done.stderr.strip()[-2000:]}")


def plugin_confs(control_file: Path) -> dict[str, str]:
    """Spark confs that load the plug-in (building its jar if needed), following `control_file`.

    The checkpoint file manager covers state changelogs/zips and the offset/commit logs; the
    `file:` FileSystem covers SST copies (uncached, so no FileSystem made before these confs
    applied is reused); the control file reaches every JVM through the Hadoop conf."""
    jar = str(build())
    return {
        "spark.jars": jar,
        "spark.driver.extraClassPath": jar,
        "spark.executor.extraClassPath": jar,
        "spark.sql.streaming.checkpointFileManagerClass": MANAGER_CLASS,
        "spark.hadoop.fs.file.impl": FILESYSTEM_CLASS,
        "spark.hadoop.fs.file.impl.disable.cache": "true",
        f"spark.hadoop.{CONTROL_CONF}": str(Path(control_file).absolute()),
    }


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
    return p


def main(argv: Sequence[str] = ()) -> int:
    """`python -m statebed_job.jvm_plugin [--sources DIR --jar PATH]`: build the jar and print its path."""
    parser = _parser()
    args = parser.parse_args(list(argv))
    if args.sources is not None and args.jar is None:
        parser.error("--sources needs --jar (the default build is named by the sources' digest in jvm/build)")
    try:
        jar = build() if args.jar is None else compile_jar(args.sources or SOURCES, args.jar)
    except StatebedError as e:
        print(f"statebed: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # our sources do not compile: a bug
        print(f"statebed: {e}", file=sys.stderr)
        return 70
    print(printable(jar))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
