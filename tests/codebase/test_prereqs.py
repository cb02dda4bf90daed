"""`make test`'s prerequisite check (tests/prereqs.sh): a missing Chromium, Java 17 or Python
3.11 is one line naming it and its Debian package, before anything starts.

Each case runs the check with a PATH holding only what the case provides (links to the real
interpreter and JVM, or stand-in scripts written as new files)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tests" / "prereqs.sh"
PYTHON = os.path.realpath(sys.executable)  # the interpreter itself, not a shim that needs a PATH


def real(name: str) -> str:
    path = shutil.which(name)
    assert path is not None, f"{name} is not installed here: the suite needs it (see the README's prerequisites)"
    return path


def bin_dir(tmp_path: Path, *, java: str | None = "real", chromium: bool = False, javac: bool = True, prometheus: bool = True) -> Path:
    """A PATH directory: python3 always; java linked to the real one (and javac, unless
    `javac=False`), a stand-in printing `java` as its version, or none; chromium a stand-in when asked;
    prometheus a stand-in unless `prometheus=False`."""
    d = tmp_path / "bin"
    d.mkdir(parents=True)
    (d / "python3").symlink_to(PYTHON)
    if java == "real":
        (d / "java").symlink_to(real("java"))
        if javac:
            (d / "javac").symlink_to(real("javac"))
    elif java is not None:
        stand_in(d / "java", f"echo 'openjdk version \"{java}\" 2019-01-15' >&2")
    if chromium:
        stand_in(d / "chromium", "exit 0")
    if prometheus:
        stand_in(d / "prometheus", "exit 0")
    return d


def stand_in(path: Path, body: str) -> None:
    assert not path.exists()  # a new file: never written through a link to a real program
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def check(path: Path, python: str = "python3", venv: str = ".venv", **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    return subprocess.run(
        ["/bin/sh", str(CHECK), python, venv],
        env={**clean, "PATH": str(path), **env},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_everything_present_is_silent() -> None:
    """The positive control: on this machine (Chromium, Java 17, Python 3.11) nothing is said."""
    for name in ("chromium", "java", "prometheus"):
        real(name)
    done = check(Path(os.environ["PATH"]), PYTHON)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_missing_chromium_is_one_line_naming_it_and_its_package(tmp_path: Path) -> None:
    done = check(bin_dir(tmp_path))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == ["make test needs: chromium (apt-get install chromium)"]


def test_missing_prometheus_is_one_line_naming_it_and_its_package(tmp_path: Path) -> None:
    done = check(bin_dir(tmp_path, chromium=True, prometheus=False))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == ["make test needs: prometheus (apt-get install prometheus)"]


def test_an_old_or_missing_java_and_an_old_python_are_named(tmp_path: Path) -> None:
    old = check(bin_dir(tmp_path / "old", java="11.0.2", chromium=True))
    assert old.returncode == 1 and len(old.stderr.splitlines()) == 1
    assert "Java 17+" in old.stderr and "apt-get install openjdk-17-jre-headless" in old.stderr
    assert "chromium" not in old.stderr and "Python" not in old.stderr
    none = check(bin_dir(tmp_path / "none", java=None))
    assert none.returncode == 1 and none.stderr.splitlines() == [
        "make test needs: Java 17+ as 'java' (apt-get install openjdk-17-jre-headless); chromium (apt-get install chromium)"
    ]
    java8 = check(bin_dir(tmp_path / "java8", java="1.8.0_402", chromium=True))
    assert "Java 17+" in java8.stderr
    slow = tmp_path / "python3.9"
    stand_in(slow, "exit 1")  # what `sys.exit(sys.version_info < (3, 11))` does on 3.9
    py = check(bin_dir(tmp_path / "py", chromium=True), str(slow))
    assert py.returncode == 1 and "Python 3.11+" in py.stderr and len(py.stderr.splitlines()) == 1


def test_missing_javac_is_one_line_naming_the_jdk_package(tmp_path: Path) -> None:
    """The JVM failpoint plug-in (jvm/) is compiled at set-up: a JRE without the JDK is named."""
    done = check(bin_dir(tmp_path, chromium=True, javac=False))
    assert done.returncode == 1 and done.stderr.splitlines() == [
        "make test needs: javac as 'javac' (apt-get install openjdk-17-jdk-headless)"
    ]


def test_java_home_is_where_java_is_looked_for(tmp_path: Path) -> None:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    stand_in(home / "bin" / "java", "echo 'openjdk version \"21.0.5\" 2024-10-15' >&2")
    stand_in(home / "bin" / "javac", "echo 'javac 21.0.5'")
    done = check(bin_dir(tmp_path, java=None, chromium=True), JAVA_HOME=str(home))
    assert (done.returncode, done.stderr) == (0, "")


def test_make_test_stops_with_one_line_before_anything_starts(tmp_path: Path) -> None:
    """`make -n test` (print, never run, the recipes): without Chromium make stops at parse
    time with one line, so no recipe (venv, lint, pytest) would start; with it, the recipes
    that the check let through are the suite's."""
    make = real("make")
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "MAKEFLAGS", "MAKELEVEL")}
    lacking = subprocess.run(
        [make, "-n", "test"], env={**env, "PATH": str(bin_dir(tmp_path))}, capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    out = (lacking.stdout + lacking.stderr).splitlines()
    assert lacking.returncode != 0 and len(out) == 1, out
    assert "make test needs: chromium (apt-get install chromium)" in out[0]
    full = subprocess.run([make, "-n", "test", f"PYTHON={PYTHON}"], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert full.returncode == 0 and "pytest" in full.stdout and "needs" not in full.stderr, full.stderr


def test_go_and_maven_are_named_only_while_the_stack_is_not_installed(tmp_path: Path) -> None:
    """install/install.sh builds MinIO and Toxiproxy with Go and fetches the S3A jars with Maven,
    once: with an empty cache and neither on PATH both are named in the one line; with this
    machine's cache (installed by `make stack`) neither is needed."""
    path = bin_dir(tmp_path, chromium=True)
    empty = check(path, STATEBED_CACHE=str(tmp_path / "empty-cache"))
    assert empty.returncode == 1 and len(empty.stderr.splitlines()) == 1, empty.stderr
    assert "make test needs: go, to build MinIO and Toxiproxy once" in empty.stderr and "mvn, to fetch the S3A jars once" in empty.stderr
    installed = check(path)
    assert (installed.returncode, installed.stderr) == (0, "")
