"""Run every statebed benchmark and print one summary table.

Each benchmark runs in its own process (`python benchmarks/<name>.py --json ...`): its
human report is streamed here as it runs, its JSON result collected; then one table of
every ratio against its goal. Options are forwarded (`--quick`, storage, seed, workdir;
`--profile` goes to put_commit and recovery).

    python benchmarks/run_all.py [--quick] [--only put_commit,recovery] [--json] [--json-out FILE] [--strict]

`job_throughput` starts Spark and runs only when named in `--only`.

Exit status: 0, or 1 when a benchmark failed to run (or, with --strict, missed a goal).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402

# hedged_commit starts MinIO and the proxy (full: about 25 min on this machine)
BENCHMARKS = ("put_commit", "commit_latency", "recovery", "cleanup_requests", "verify_lineage", "cross_partition", "hedged_commit")
SPARK_BENCHMARKS = ("job_throughput", "chaos_overhead")  # start Spark (job_throughput full: about an hour): only with --only
PROFILED = ("put_commit", "recovery")


def run_one(name: str, forwarded: list[str], out: Any) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE / f"{name}.py"), "--json", *forwarded]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            print(line, end="", file=out, flush=True)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    assert proc.stdout is not None
    stdout = proc.stdout.read()
    proc.wait()
    t.join()
    if proc.returncode != 0:
        return {"benchmark": name, "error": f"exit status {proc.returncode}", "elapsed_s": time.perf_counter() - t0}
    try:
        return json.loads(stdout)
    except ValueError as e:
        return {"benchmark": name, "error": f"no JSON result ({e})", "elapsed_s": time.perf_counter() - t0}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/run_all.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default="", help="comma-separated benchmark names")
    p.add_argument("--json", action="store_true", help="print the list of results as JSON on stdout")
    p.add_argument("--json-out", type=Path, default=None, help="also write the results to this file")
    p.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed")
    p.add_argument("--profile", nargs="?", const="cprofile", choices=("cprofile", "pyinstrument"), default=None)
    p.add_argument("--workdir", default=None)
    p.add_argument("--seed", default=None)
    p.add_argument("--storage", choices=("local", "s3"), default=None)
    p.add_argument("--s3-endpoint", default=None)
    p.add_argument("--s3-bucket", default=None)
    args = p.parse_args(argv)
    names = [n for n in (args.only.split(",") if args.only else BENCHMARKS) if n]
    unknown = set(names) - set(BENCHMARKS) - set(SPARK_BENCHMARKS)
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}; known: {', '.join(BENCHMARKS + SPARK_BENCHMARKS)}")
    common: list[str] = []
    if args.quick:
        common.append("--quick")
    for opt in ("workdir", "seed", "storage", "s3_endpoint", "s3_bucket"):
        val = getattr(args, opt)
        if val is not None:
            common += [f"--{opt.replace('_', '-')}", str(val)]
    out = sys.stderr if args.json else sys.stdout
    results = []
    t0 = time.perf_counter()
    for name in names:
        fwd = list(common)
        if args.profile and name in PROFILED:
            fwd += ["--profile", args.profile]
        results.append(run_one(name, fwd, out))
    print(f"\n== summary ({'quick' if args.quick else 'full'}, {time.perf_counter() - t0:.0f} s)", file=out)
    print(benchlib.summary_table(results), file=out, flush=True)
    if args.json:
        print(json.dumps(results, indent=1, default=str))
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1, default=str))
    failed = any("error" in r for r in results)
    missed = any(r2.get("met") is False for r in results for r2 in r.get("ratios", []))
    return 1 if failed or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
