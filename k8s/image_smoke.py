"""`make image-smoke`: run `statebed run` inside statebed's image against a real S3 server
(SeaweedFS) on the host's loopback, and fail unless the run and both verifiers pass.

Usage: python k8s/image_smoke.py IMAGE. The container shares the host's network (podman
--network host), so the S3 server stays bound to 127.0.0.1; it is stopped by PID at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from statebed_chaos.infra.seaweedfs import ACCESS_KEY, READY_BUCKET, SECRET_KEY, start_s3_server

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


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: image_smoke.py IMAGE", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = Path("runs") / f"image-smoke-{stamp}"
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
        cmd = [*PODMAN_RUN, *env, argv[0], *run]
        print("image-smoke:", " ".join(cmd), flush=True)
        t0 = time.monotonic()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        (work / "stdout.json").write_text(out.stdout)
        (work / "stderr.log").write_text(out.stderr)
        print(f"image-smoke: exit {out.returncode} after {time.monotonic() - t0:.0f} s (S3 {s3.kind} at {s3.endpoint}); output in {work}")
        try:
            summary = json.loads(out.stdout)
        except ValueError:
            print(out.stderr[-3000:], file=sys.stderr)
            return out.returncode or 1
        print(
            json.dumps(
                {k: summary.get(k) for k in ("workload", "mode", "batches", "records", "verdicts", "valid") if k in summary}, indent=2
            )
        )
        return out.returncode
    finally:
        s3.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
