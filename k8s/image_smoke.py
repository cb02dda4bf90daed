"""`make image-smoke`: run `statebed run` inside statebed's image against a real S3 server
(MinIO, as install/install.sh built it) on the host's loopback, and fail unless the run and both verifiers pass. Then a
native-v2 run on a local checkpoint, which loads the JVM failpoint plug-in the image ships
(STATEBED_JVM_JAR; the image has no javac): it must pass too, with Spark's conf naming the
image's jar and a harmless armed point (a 10 ms delay at the first commit-log write) recorded
as fired by the plug-in in the run's JVM, so the plug-in provably ran, not just loaded.

Usage: python k8s/image_smoke.py IMAGE. The container shares the host's network (podman
--network host), so the S3 server stays bound to 127.0.0.1; it is stopped by PID at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from statebed_chaos.infra.minio_server import ACCESS_KEY, READY_BUCKET, SECRET_KEY, start_s3_server
from statebed_job import jvm_plugin
from statebed_store.failpoint_control import Control
from statebed_store.formats import NATIVE_V2

PODMAN_RUN = [
    "podman",
    "run",
    "--rm",
    "--runtime",
    "runc",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
    "--network",
    "host",
]
IMAGE_JAR = "/opt/statebed/statebed-jvm.jar"  # the Dockerfile's STATEBED_JVM_JAR
NATIVE_PROBE = "native.commitlog.write=1*delay(10)"  # fires once, changes nothing the verifiers see


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: image_smoke.py IMAGE", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = Path("runs") / f"image-smoke-{stamp}"
    s3_rc = s3_run(argv[0], work, stamp)
    native_rc = native_run(argv[0], work / "spark-store")
    return s3_rc or native_rc


def s3_run(image: str, work: Path, stamp: str) -> int:
    """`statebed run` (v2) in the image against MinIO on loopback."""
    s3 = start_s3_server(work / "s3")
    try:
        env = [
            "-e",
            f"STATEBED_S3_ENDPOINT={s3.endpoint}",
            "-e",
            f"AWS_ACCESS_KEY_ID={ACCESS_KEY}",
            "-e",
            f"AWS_SECRET_ACCESS_KEY={SECRET_KEY}",
        ]
        run = ["statebed", "run", "--checkpoint", f"s3://{READY_BUCKET}/image-smoke-{stamp}", "--run-dir", "/tmp/run"]
        run += ["--batches", "3", "--rows-per-batch", "2000", "--json"]
        return _run_in_image([*PODMAN_RUN, *env, image, *run], work, f"S3 {s3.kind} at {s3.endpoint}")
    finally:
        s3.stop()


def native_run(image: str, work: Path) -> int:
    """native-v2 in the image (local checkpoint in a host directory mounted at /out), the plug-in's
    commit-log point armed through the control file the run follows: exit 0 and valid, Spark's conf
    names the image's jar, and the plug-in recorded the firing (a run that never fired it fails)."""
    work.mkdir(parents=True)
    control = Control(work / "control" / "control.json")
    control.arm(NATIVE_PROBE)
    run = ["statebed", "run", "--format", NATIVE_V2.name, "--run-dir", "/out/run", "--batches", "3", "--rows-per-batch", "500"]
    run += ["--partitions", "2", "--keyspace", "200", "--json"]
    env = ["-e", f"STATEBED_FAILPOINTS_CONTROL=/out/control/{control.path.name}"]
    rc = _run_in_image([*PODMAN_RUN, "-v", f"{work.absolute()}:/out:U", *env, image, *run], work, "native-v2, local checkpoint")
    problems = _native_evidence(work / "run", control)
    for problem in problems:
        print(f"image-smoke: native-v2: {problem}", file=sys.stderr)
    return rc or (1 if problems else 0)


def _native_evidence(run_dir: Path, control: Control) -> list[str]:
    """What is missing for the native run to count: the image's jar in Spark's conf, the plug-in's firing."""
    problems = []
    props: dict[str, str] = {}
    for log in sorted(p for p in (run_dir / "events").glob("*") if p.is_file()):
        for line in log.read_text(errors="replace").splitlines():
            event = json.loads(line) if '"SparkListenerEnvironmentUpdate"' in line else {}
            props.update(dict(event.get("Spark Properties", [])))
    for key, want in (("spark.jars", IMAGE_JAR), ("spark.sql.streaming.checkpointFileManagerClass", jvm_plugin.MANAGER_CLASS)):
        if props.get(key) != want:
            problems.append(f"Spark conf {key} = {props.get(key)!r}, expected {want!r} (event log under {run_dir / 'events'})")
    point = NATIVE_PROBE.split("=", 1)[0]
    fired = [f for f in control.firings() if f.get("failpoint") == point]
    if not fired:
        problems.append(f"{point} armed but no firing recorded in {control.directory}: the plug-in did not run")
    else:
        print(f"image-smoke: native-v2: {point} fired {len(fired)}x (pid {fired[0].get('pid')}, {fired[0].get('file')})")
    return problems


def _run_in_image(cmd: list[str], work: Path, what: str) -> int:
    """Run `statebed run ... --json` in a container, keep its output in `work`, print the verdicts."""
    work.mkdir(parents=True, exist_ok=True)
    print("image-smoke:", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    (work / "stdout.json").write_text(out.stdout)
    (work / "stderr.log").write_text(out.stderr)
    print(f"image-smoke: exit {out.returncode} after {time.monotonic() - t0:.0f} s ({what}); output in {work}")
    try:
        summary = json.loads(out.stdout)
    except ValueError:
        print(out.stderr[-3000:], file=sys.stderr)
        return out.returncode or 1
    print(
        json.dumps({k: summary.get(k) for k in ("workload", "mode", "batches", "records", "verdicts", "valid") if k in summary}, indent=2)
    )
    return out.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
