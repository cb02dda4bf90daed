"""The image ships the JVM failpoint plug-in (native-v1/native-v2 runs load it), checked without
building the image: the Dockerfile compiles it with statebed's own build (`python -m
statebed_job.jvm_plugin`, the one owner of the javac command) into the jar STATEBED_JVM_JAR names,
with a JDK that lives only in that layer. `make image-smoke` then runs native-v2 in the image."""

from __future__ import annotations

import fnmatch
import re
import shlex
from pathlib import Path

from k8s_render import ROOT

from statebed_job import jvm_plugin

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of each instruction, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).strip().partition(" ")
        out.append((keyword.upper(), " ".join(args.split())))
        pending = ""
    return out


STEPS = _instructions(DOCKERFILE)
BUILD_CALL = re.compile(r"python3 -m statebed_job\.jvm_plugin ([^;]*);")


def _index(keyword: str, pattern: str) -> int:
    hits = [i for i, (k, args) in enumerate(STEPS) if k == keyword and re.search(pattern, args)]
    assert len(hits) == 1, f"Dockerfile: {len(hits)} {keyword} instructions match {pattern!r}"
    return hits[0]


def _build_step() -> tuple[int, str, dict[str, Path]]:
    """The RUN that builds the plug-in, and its --sources/--jar as jvm_plugin's own parser reads them."""
    i = _index("RUN", BUILD_CALL.pattern)
    run = STEPS[i][1]
    call = BUILD_CALL.search(run)
    assert call
    args = jvm_plugin._parser().parse_args(shlex.split(call.group(1)))
    assert args.sources is not None and args.jar is not None, call.group(0)
    return i, run, {"sources": args.sources, "jar": args.jar}


def _env(name: str) -> tuple[int, str]:
    i = _index("ENV", rf"(^| ){name}=")
    m = re.search(rf"(?:^| ){name}=(\S+)", STEPS[i][1])
    assert m
    return i, m.group(1)


def test_the_instruction_parser_joins_continued_lines_and_drops_comments() -> None:
    text = "# c\nFROM x\nRUN a; \\\n    b\n\nENV K=v\n"
    assert _instructions(text) == [("FROM", "x"), ("RUN", "a; b"), ("ENV", "K=v")]


def test_the_image_builds_the_plugin_with_jvm_plugins_entry_point_into_the_jar_it_names() -> None:
    i, _, build = _build_step()
    env_at, jar = _env(jvm_plugin.JAR_ENV)
    assert Path(jar) == build["jar"] == Path("/opt/statebed/statebed-jvm.jar")
    assert env_at > i  # named once it exists (the build itself ignores the variable: --jar)
    copy = STEPS[_index("COPY", r"^jvm/src ")][1].split()
    assert copy == ["jvm/src", str(build["sources"])] and copy[1] != "/opt/statebed/src"
    runs = " ".join(args for k, args in STEPS if k == "RUN")
    assert not re.search(r"(?:^|;|&&|\|\|)\s*(?:\S*/)?javac\s", runs)  # javac has one owner: jvm_plugin
    assert re.search(r"(?:^|;|&&|\|\|)\s*(?:\S*/)?javac\s", "set -e; /opt/java/bin/javac -d x A.java")  # the check can fail


def test_the_jdk_exists_only_inside_the_build_layer_and_the_jre_stays() -> None:
    i, run, _ = _build_step()
    m = re.search(r"^ARG JDK_PACKAGE=(\S+)$", DOCKERFILE, re.M)
    assert m and m.group(1) == jvm_plugin.JDK_PACKAGE  # the package jvm_plugin's missing-javac error names
    install = run.index("apt-get install -y --no-install-recommends ${JDK_PACKAGE};")
    build = run.index("python3 -m statebed_job.jvm_plugin")
    purge = run.index("apt-get purge -y --auto-remove ${JDK_PACKAGE};")
    assert run.index("apt-get update;") < install < build < purge < run.index("rm -rf /var/lib/apt/lists/*;")
    assert 'test ! -e "$JAVA_HOME/bin/javac"' in run[purge:]  # the build fails if the JDK outlived its layer
    apt = re.search(r'^ARG APT_PACKAGES="([^"]+)"$', DOCKERFILE, re.M)
    assert apt and "openjdk-17-jre-headless" in apt.group(1).split() and jvm_plugin.JDK_PACKAGE not in apt.group(1)
    assert "${JDK_PACKAGE}" not in " ".join(args for k, args in STEPS[:i] + STEPS[i + 1 :] if k == "RUN")


def test_the_plugin_layers_come_after_the_expensive_ones() -> None:
    """A change to the Java sources rebuilds only the plug-in's layer: pip and the S3A download stay cached."""
    i, _, _ = _build_step()
    copy = _index("COPY", r"^jvm/src ")
    pip = _index("RUN", r"pip install /opt/statebed/src")
    s3a = _index("RUN", r"S3A_JARS")
    assert pip < s3a < copy < i, (pip, s3a, copy, i)
    assert _env("JAVA_HOME")[0] < i  # jvm_plugin.find_javac looks in $JAVA_HOME/bin first


def test_the_build_context_keeps_the_plugin_sources() -> None:
    ignored = [p.rstrip("/") for p in (ROOT / ".dockerignore").read_text().split()]
    sources = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "jvm" / "src").rglob("*.java"))
    assert sources, "no Java sources in jvm/src"
    shut_out = [s for s in sources for pat in ignored if any(fnmatch.fnmatch(part, pat) for part in _prefixes(s))]
    assert not shut_out, f".dockerignore leaves out {shut_out}"
    assert _prefixes("jvm/src/a/B.java") == ["jvm", "jvm/src", "jvm/src/a", "jvm/src/a/B.java"]


def _prefixes(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[: n + 1]) for n in range(len(parts))]
