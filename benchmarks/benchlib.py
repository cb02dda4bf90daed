"""Shared helpers for the statebed benchmarks: arguments, storage, data, stats, reporting, profiling.

Every benchmark measures its baseline in the same process and run as the thing it
judges, and reports ratios with the goal next to them. Speed is measured here, never in
timed tests: the smoke test only checks that `--quick` runs and emits sane JSON.

Output: a human report on stdout (on stderr with `--json`, so stdout is one JSON object).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import math
import os
import pstats
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from statebed_base.entry import sigterm_unwinds
from statebed_base.processes import run_to_end
from statebed_store import CountingStorage, S3Settings, Storage, open_storage
from statebed_store.storage import S3Storage
from statebed_store.storage.base import FileInfo

SCHEMA_VERSION = 1


# -- arguments -----------------------------------------------------------------------------
def parser(name: str, description: str, *, profile: bool = False) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"benchmarks/{name}.py", description=description)
    p.add_argument("--quick", action="store_true", help="small sizes, a few seconds (used by the smoke test)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout (human report goes to stderr)")
    p.add_argument("--workdir", type=Path, default=None, help="where checkpoints and local RocksDB dirs go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work directory afterwards")
    p.add_argument("--seed", type=int, default=20240917, help="data seed")
    p.add_argument("--repeats", type=int, default=None, help="override the number of timed repetitions")
    p.add_argument(
        "--storage",
        choices=("local", "s3"),
        default=None,
        help="checkpoint storage (default local; s3 when --s3-endpoint or STATEBED_BENCH_S3=1)",
    )
    p.add_argument("--s3-endpoint", default=None, help="S3 endpoint, e.g. http://127.0.0.1:9000 (else STATEBED_S3_ENDPOINT)")
    p.add_argument("--s3-bucket", default=os.environ.get("STATEBED_BENCH_S3_BUCKET", "statebed-bench"))
    if profile:
        p.add_argument(
            "--profile",
            nargs="?",
            const="cprofile",
            choices=("cprofile", "pyinstrument"),
            default=None,
            help="after timing, run the store once more under a profiler and print where time goes",
        )
    return p


@dataclass
class Env:
    """Work directory and checkpoint storage factory of one benchmark run."""

    args: argparse.Namespace
    root: Path
    storage_kind: str
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def dir(self, name: str) -> Path:
        d = self.root / f"{name}-{uuid.uuid4().hex[:8]}"
        d.mkdir(parents=True)
        return d

    def storage(self, name: str) -> Storage:
        """A fresh, empty checkpoint root."""
        if self.storage_kind == "s3":
            settings = S3Settings.from_env(endpoint=self.args.s3_endpoint)
            url = f"s3://{self.args.s3_bucket}/bench-{self.run_id}/{name}-{uuid.uuid4().hex[:8]}"
            return S3Storage(url, settings, create_bucket=True)
        return open_storage(self.dir(f"ckpt-{name}"))

    def remove(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        if not self.args.keep:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def environment(args: argparse.Namespace, name: str) -> Iterator[Env]:
    previous = signal.getsignal(signal.SIGTERM)
    sigterm_unwinds()  # a benchmark stopped by SIGTERM still stops the servers it started
    kind = args.storage or ("s3" if args.s3_endpoint or os.environ.get("STATEBED_BENCH_S3") == "1" else "local")
    if args.workdir is not None:
        root = Path(args.workdir) / f"{name}-{uuid.uuid4().hex[:8]}"
        root.mkdir(parents=True)
    else:
        root = Path(tempfile.mkdtemp(prefix=f"statebed-bench-{name}-"))
    env = Env(args, root, kind)
    try:
        yield env
    finally:
        env.close()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)  # main() run in-process (the smoke tests) leaves its caller's handler


# -- data ----------------------------------------------------------------------------------
def progress_row(row: dict[str, Any], line: str, jsonl: Path | None) -> None:
    """One finished run of a repeated-run loop: a progress line on stderr, and its row appended to `jsonl`
    at once (a long loop that is stopped keeps every finished row)."""
    print(line, file=sys.stderr, flush=True)
    if jsonl:
        with open(jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")


def make_keys(n: int, rng: np.random.Generator, prefix: bytes = b"key:") -> list[bytes]:
    """n distinct 16-byte keys in random order (`key:` + 12 digits)."""
    fmt = prefix + b"%0" + str(16 - len(prefix)).encode() + b"d"
    return [fmt % i for i in rng.permutation(n).tolist()]


def make_values(n: int, rng: np.random.Generator, lo: int = 8, hi: int = 16) -> list[bytes]:
    """n random values of lo..hi bytes (uniform lengths)."""
    lens = rng.integers(lo, hi + 1, n)
    blob = rng.bytes(int(lens.sum()))
    ends = np.cumsum(lens).tolist()
    starts = [0] + ends[:-1]
    return [blob[s:e] for s, e in zip(starts, ends)]


def batches(seq: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [seq[i : i + size] for i in range(0, len(seq), size)]


# -- stats ---------------------------------------------------------------------------------
def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def pct(xs: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs, dtype=float), q))


def statebed_json(argv: Sequence[str], label: str, timeout_s: float = 7200) -> tuple[dict[str, Any], float]:
    """`statebed ARGV` in its own process (no failpoints inherited): its last JSON object on stdout and
    its wall seconds. A non-zero exit raises, naming `label`: a benchmark never times a failed run."""
    return json_process([sys.executable, "-m", "statebed_cli.main", *argv], label, timeout_s)


def json_process(cmd: Sequence[str], label: str, timeout_s: float = 7200) -> tuple[dict[str, Any], float]:
    """`cmd` in its own process, as `statebed_json` runs statebed: its last JSON object and wall seconds."""
    environ = {k: v for k, v in os.environ.items() if k not in ("STATEBED_FAILPOINTS", "STATEBED_FAILPOINTS_CONTROL")}
    t0 = time.perf_counter()
    proc = run_to_end(list(cmd), env=environ, timeout=timeout_s)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{label} exited {proc.returncode}: {proc.stderr[-2000:]}")
    out = proc.stdout
    return json.loads(out if out.startswith("{") else out[out.rfind("\n{") + 1 :]), wall


def paired_ratio_ci(num: Sequence[float], den: Sequence[float]) -> tuple[float, float, float]:
    """Geometric mean of the per-pair ratios num[i] / den[i] and its 95% t interval (on the logs).

    Pairs, not pooled samples: each pair ran back to back, so a machine that got slower or
    faster over the run moves both sides of a pair and cancels in its ratio."""
    logs = [math.log(a / b) for a, b in zip(num, den, strict=True)]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    half = _T95.get(len(logs) - 1, 1.96) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


# two-sided 95% Student t quantiles by degrees of freedom (1.96 beyond 30)
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086,
        21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042}  # fmt: skip


def finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


# -- counting storage with listing sizes -----------------------------------------------------
class DetailedCountingStorage(CountingStorage):
    """CountingStorage (requests per kind; a batched delete of up to 1000 paths is one)
    plus what it cannot show: entries returned by LISTs (an S3 LIST page holds 1000),
    bytes read and paths deleted."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.listed_entries = 0
        self.bytes_read = 0
        self.paths_deleted = 0
        self.list_pages = 0

    def reset(self) -> None:
        super().reset()
        self.listed_entries = self.bytes_read = self.paths_deleted = self.list_pages = 0

    def read(self, path: str, start: int = 0, length: int | None = None) -> bytes:
        data = super().read(path, start, length)
        self.bytes_read += len(data)
        return data

    def list(self, directory: str) -> list[FileInfo]:
        out = super().list(directory)
        self.listed_entries += len(out)
        self.list_pages += max(1, math.ceil(len(out) / 1000))
        return out

    def list_dirs(self, directory: str) -> list[str]:
        out = super().list_dirs(directory)
        self.listed_entries += len(out)
        self.list_pages += max(1, math.ceil(len(out) / 1000))
        return out

    def delete(self, paths: Sequence[str]) -> None:
        self.paths_deleted += len(paths)
        super().delete(paths)

    def snapshot(self) -> dict[str, Any]:
        counts = dict(sorted(self.counts.items()))
        return {
            "requests": counts,
            "total": sum(counts.values()),
            "non_delete": sum(v for k, v in counts.items() if k != "delete"),
            "delete_requests": counts.get("delete", 0),
            "paths_deleted": self.paths_deleted,
            "listed_entries": self.listed_entries,
            "s3_list_pages": self.list_pages,
            "bytes_read": self.bytes_read,
        }


# -- reporting -----------------------------------------------------------------------------
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda v, g: v >= g,
    "<=": lambda v, g: v <= g,
}
_OP_SHOWN = {">=": "≥", "<=": "≤"}


class Report:
    """Collects parameters, tables, metrics and goal ratios; prints and returns JSON."""

    def __init__(self, name: str, title: str, args: argparse.Namespace, env: Env | None = None) -> None:
        self.name = name
        self.title = title
        self.args = args
        self.mode = "quick" if args.quick else "full"
        self.storage = env.storage_kind if env else "local"
        self.params: dict[str, Any] = {}
        self.metrics: dict[str, Any] = {}
        self.ratios: list[dict[str, Any]] = []
        self.tables: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.profile: dict[str, Any] | None = None
        self.headline = ""  # one line for run_all's summary
        self.t0 = time.perf_counter()
        self.out = sys.stderr if args.json else sys.stdout

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def ratio(self, name: str, value: float, op: str | None, goal: float | None, *, baseline: str, note: str = "") -> None:
        met = None if op is None or goal is None or not finite(value) else bool(_OPS[op](value, goal))
        self.ratios.append({"name": name, "value": value, "goal_op": op, "goal": goal, "met": met, "baseline": baseline, "note": note})

    def table(self, title: str, headers: list[str], rows: list[list[Any]]) -> None:
        self.tables.append({"title": title, "headers": headers, "rows": rows})

    def result(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "benchmark": self.name,
            "title": self.title,
            "mode": self.mode,
            "storage": self.storage,
            "params": self.params,
            "metrics": self.metrics,
            "ratios": self.ratios,
            "tables": self.tables,
            "notes": self.notes,
            "headline": self.headline,
            "profile": self.profile,
            "elapsed_s": round(time.perf_counter() - self.t0, 3),
        }

    def finish(self) -> dict[str, Any]:
        res = self.result()
        self.say(render(res))
        if self.args.json:
            print(json.dumps(res, indent=1, default=str), flush=True)
        return res


def fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return "-" if v is None else str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 100:
            return f"{v:.1f}"
        if abs(v) >= 1:
            return f"{v:.3f}"
        return f"{v:.4f}"
    return str(v)


def grid(headers: list[str], rows: list[list[Any]], indent: str = "  ") -> str:
    cells = [[fmt(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    # numbers right-aligned, text left-aligned
    numeric = [any(isinstance(r[i], (int, float)) and not isinstance(r[i], bool) for r in rows) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        return indent + "  ".join(c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    return "\n".join([line(headers), indent + "  ".join("-" * w for w in widths)] + [line(r) for r in cells])


def goal_text(r: dict[str, Any]) -> str:
    if r["goal_op"] is None:
        return "(info)"
    return f"{_OP_SHOWN[r['goal_op']]} {r['goal']:g}"


def verdict(r: dict[str, Any]) -> str:
    return {True: "OK", False: "MISSED", None: ""}[r["met"]]


def render(res: dict[str, Any]) -> str:
    out = [f"\n== {res['benchmark']}: {res['title']}  [{res['mode']}, storage {res['storage']}]"]
    if res["params"]:
        out.append("  params: " + ", ".join(f"{k}={fmt(v)}" for k, v in res["params"].items()))
    for t in res["tables"]:
        out.append(f"\n  {t['title']}")
        out.append(grid(t["headers"], t["rows"], "    "))
    if res["ratios"]:
        out.append("\n  ratios (baseline measured in this run)")
        out.append(
            grid(
                ["ratio", "value", "goal", "", "baseline", "note"],
                [[r["name"], r["value"], goal_text(r), verdict(r), r["baseline"], r.get("note", "")] for r in res["ratios"]],
                "    ",
            )
        )
    if res.get("profile"):
        p = res["profile"]
        out.append(f"\n  profile ({p['tool']}, {p['what']}, {p['total_s']:.2f} s under the profiler)")
        if p.get("top"):
            out.append(
                grid(
                    ["function (self time)", "self s", "self %", "cum s", "calls"],
                    [[t["function"], t["self_s"], t["self_pct"], t["cum_s"], t["calls"]] for t in p["top"]],
                    "    ",
                )
            )
        if p.get("groups"):
            out.append("    by stage (cumulative): " + ", ".join(f"{k} {v:.3f}s" for k, v in p["groups"].items()))
        if p.get("text"):
            out.append(p["text"])
    if res.get("headline"):
        out.append(f"\n  summary: {res['headline']}")
    for n in res["notes"]:
        out.append(f"  note: {n}")
    out.append(f"  ({res['elapsed_s']:.1f} s)")
    return "\n".join(out)


# -- profiling -----------------------------------------------------------------------------
def _short(func: tuple[str, int, str]) -> str:
    file, line, name = func
    if file == "~":
        return name  # builtins, e.g. {method 'write' of 'builtins.Rdict' objects}
    parts = Path(file).parts
    if "statebed_store" in parts:
        file = "/".join(parts[parts.index("statebed_store") :])
    elif "site-packages" in parts:
        file = "/".join(parts[parts.index("site-packages") + 1 :])
    else:
        file = Path(file).name
    return f"{file}:{line}({name})"


class Profile:
    """A profiler switched on only inside `window()` (the timed part of a run), then summarised.

    tool "cprofile" (stdlib; per-function self/cumulative time incl. C builtins) or
    "pyinstrument" (a call tree, if installed; falls back to cProfile otherwise).
    """

    def __init__(self, tool: str, what: str) -> None:
        self.what = what
        self.tool = tool
        self.seconds = 0.0
        self._pi: Any = None
        if tool == "pyinstrument":
            try:
                from pyinstrument import Profiler  # type: ignore[import-not-found]
            except ImportError:
                self.tool = "cprofile"
            else:
                self._pi = Profiler(interval=0.0005)
        self._cp = cProfile.Profile() if self.tool == "cprofile" else None

    @contextlib.contextmanager
    def window(self) -> Iterator[None]:
        t0 = time.perf_counter()
        if self._cp is not None:
            self._cp.enable()
        else:
            self._pi.start()
        try:
            yield
        finally:
            if self._cp is not None:
                self._cp.disable()
            else:
                self._pi.stop()
            self.seconds += time.perf_counter() - t0

    def summary(self, *, top: int = 15, groups: dict[str, str | tuple[str, ...]] | None = None) -> dict[str, Any]:
        """`groups`: label -> substring(s) that a function's name must all contain, reported as
        cumulative seconds (the largest among matching functions, i.e. the outermost match)."""
        if self._cp is None:
            text = self._pi.output_text(unicode=True, color=False, show_all=False)
            return {"tool": "pyinstrument", "what": self.what, "total_s": self.seconds, "top": [], "groups": {}, "text": text}
        stats = pstats.Stats(self._cp, stream=io.StringIO()).stats  # type: ignore[attr-defined]
        rows = [{"function": _short(func), "self_s": tt, "cum_s": ct, "calls": nc} for func, (_cc, nc, tt, ct, _callers) in stats.items()]
        rows.sort(key=lambda r: r["self_s"], reverse=True)
        prof_total = sum(r["self_s"] for r in rows) or 1.0
        for r in rows:
            r["self_pct"] = round(100.0 * r["self_s"] / prof_total, 1)
            r["self_s"] = round(r["self_s"], 4)
            r["cum_s"] = round(r["cum_s"], 4)

        def match(name: str, needle: str | tuple[str, ...]) -> bool:
            return all(n in name for n in ((needle,) if isinstance(needle, str) else needle))

        grouped = {
            label: round(max((r["cum_s"] for r in rows if match(r["function"], needle)), default=0.0), 3)
            for label, needle in (groups or {}).items()
        }
        return {"tool": "cprofile", "what": self.what, "total_s": self.seconds, "top": rows[:top], "groups": grouped, "text": ""}


@contextlib.contextmanager
def no_window() -> Iterator[None]:
    yield


def summary_table(results: Sequence[dict[str, Any]]) -> str:
    """One table over several benchmark results: every ratio with its goal and verdict."""
    rows = []
    for res in results:
        if "error" in res:
            rows.append([res["benchmark"], "ERROR: " + res["error"], float("nan"), "", "FAILED"])
            continue
        for r in res["ratios"]:
            rows.append([res["benchmark"], r["name"], r["value"], goal_text(r), verdict(r)])
    out = [grid(["benchmark", "ratio", "value", "goal", ""], rows)]
    for res in results:
        if res.get("headline"):
            out.append(f"  {res['benchmark']}: {res['headline']}")
    return "\n".join(out)


def by_kind(counts: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "none"
