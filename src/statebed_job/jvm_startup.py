"""The options every JVM statebed starts gets (drivers, executors, standalone daemons): a short
run is mostly a JVM starting, and two options cut that without changing what runs.

- **A class-data archive (AppCDS).** `python -m statebed_job.jvm_startup` (`make jvm`) runs a
  small statebed run and a small native one, each in a JVM that dumps the classes it loaded at
  exit, into `jvm/build/cds/`: one archive per (pyspark version, `java` binary, extra classpath:
  the JVM plug-in's jar prepends itself). A JVM given an archive maps those classes instead of
  loading and verifying them; one whose JDK or classpath does not match ignores it, silently (its
  `cds` logging is off: a warning would land on the driver's stdout, where `--json` prints). No
  archive (an installed statebed, the image): no option, a normal start.
- **`STATEBED_JAVA_OPTS`**: more options for the same JVMs. The test suite sets
  `-XX:TieredStopAtLevel=1` (C1 only: runs of seconds spend less CPU compiling); a long run
  (a benchmark) should not.

Measured on `statebed run` (count, 4 batches, local[2], 2 cores): 24 s wall and 39 CPU-s without
either, 19 s / 30 with the archive, 15 s / 19 with both.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from statebed_base.localfs import move_durably
from statebed_base.processes import run_to_end
from statebed_store.formats import NATIVE_V2, V2, Format

from .jvm_plugin import BUILD

__all__ = ["CDS_ENV", "OPTS_ENV", "archive_path", "build_archives", "java_options"]

CDS_DIR = BUILD / "cds"
OPTS_ENV = "STATEBED_JAVA_OPTS"
CDS_ENV = "STATEBED_JVM_CDS"  # "off": no archive (the archive builder's own runs dump one instead)
QUIET = "-Xlog:cds*=off"  # a mismatched archive is ignored without a word on stdout


def _java() -> str:
    """The `java` the launcher runs (JAVA_HOME first, as spark-class does), resolved: part of the key."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java") or "java"
    return os.path.realpath(java)


def archive_path(extra_classpath: str = "") -> Path:
    """Where the archive for this pyspark, this JDK and this extra classpath lives."""
    import pyspark

    key = hashlib.sha256(f"{_java()}\0{extra_classpath}".encode()).hexdigest()[:12]
    return CDS_DIR / f"spark-{pyspark.__version__}-{key}.jsa"


def java_options(extra_classpath: str = "") -> str:
    """The options for a JVM whose classpath starts with `extra_classpath` (empty: Spark's own)."""
    opts = []
    if os.environ.get(CDS_ENV) != "off":
        archive = archive_path(extra_classpath)
        if archive.is_file():
            opts += [f"-XX:SharedArchiveFile={archive}", QUIET]
    extra = os.environ.get(OPTS_ENV, "").strip()
    return " ".join([*opts, extra] if extra else opts)


# The runs whose classes are archived: statebed's own store, and Spark's (with the plug-in's jar).
_RUNS: tuple[Format, ...] = (V2, NATIVE_V2)


def build_archives() -> list[Path]:
    """Dump the archive of each run in `_RUNS` that has none yet; return the archives."""
    from .jvm_plugin import build as plugin_jar

    done = []
    for fmt in _RUNS:
        extra = str(plugin_jar()) if fmt.plugin else ""
        archive = archive_path(extra)
        if not archive.is_file():
            _dump(fmt, archive)
        done.append(archive)
    return done


def _dump(fmt: Format, archive: Path) -> None:
    """A small run of `fmt` in a child JVM that writes its loaded classes to `archive` at exit."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=archive.parent, prefix=".dump-") as tmp:
        part = Path(tmp) / archive.name
        env = dict(os.environ, **{CDS_ENV: "off", OPTS_ENV: f"-XX:ArchiveClassesAtExit={part} {QUIET}"})
        argv = [sys.executable, "-m", "statebed_job.cds_dump", fmt.name, str(Path(tmp) / "run")]
        done = run_to_end(argv, env=env, timeout=600)  # its own session: a timeout or Ctrl-C stops its JVM too
        if done.returncode != 0 or not part.is_file():
            raise RuntimeError(f"the class-data archive's run failed (--format {fmt}, exit {done.returncode}): {done.stderr[-1500:]}")
        try:
            move_durably(part, archive)
        except FileExistsError:  # another build dumped it meanwhile: the same classes
            pass


def main() -> int:
    """`python -m statebed_job.jvm_startup`: build the archives (`make jvm`), print their paths."""
    try:
        paths = build_archives()
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"statebed: {e}", file=sys.stderr)
        return 70
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
