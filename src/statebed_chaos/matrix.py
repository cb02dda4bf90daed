"""The chaos matrix: run every cell (fault kind × workload × format × seed) as an experiment,
then judge the whole. It passes only when something was proven: at least one statebed V2
cell, every one valid, and a V1 positive control caught (a V1 cell on a nondeterministic
workload found invalid by a state or lineage anomaly, the seed appendix's kinds, not a
harness one: if V1 never fails, the faults are too weak and a V2 "valid" proves nothing). A
selection without a V2 cell or a V1 control fails, saying so. Native Spark cells are
reported, and count against the verdict only when asked (`strict_native`).

A cell whose run crashed is `unknown`, never valid. Each cell runs in `<out>/<cell>/` from
the `experiment.yaml` written there, so `statebed chaos run <out>/<cell>/experiment.yaml
--seed S` replays it; the directories of valid cells are removed at the end unless `keep`.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from statebed_base.entry import EXIT_INTERRUPTED
from statebed_base.errors import StatebedError
from statebed_model.experimentdir import ExperimentDir, MatrixDir
from statebed_store.formats import NATIVE_V1, V1, V2, Format
from statebed_verify import EXIT_CODES, Verdict
from statebed_verify.history import read_history
from statebed_verify.result import is_store_anomaly

from .baseline import baseline_key
from .baseline_cache import Baselines
from .experiment import Experiment, load_experiment
from .experiment_runner import ExperimentResult, run_experiment
from .matrix_presets import FORMATS, NONDETERMINISTIC, Cell, Skipped
from .observed import observed_counts

__all__ = ["CellRun", "MatrixResult", "RunCell", "fault_caused", "run_experiment_cell", "run_matrix"]

EXIT_OK, EXIT_FAILED = EXIT_CODES[True], EXIT_CODES[False]  # pass / fail from the one verdict table


# (experiment, seed, out_dir, shared baselines cache) -> result; tests pass a stand-in
RunCell = Callable[[Experiment, int, Path, Baselines], ExperimentResult]


def run_experiment_cell(exp: Experiment, seed: int, out_dir: Path, baselines: Baselines) -> ExperimentResult:
    """The real cell: the experiment runner (fault-free baseline, faulted run, verifiers)."""
    return run_experiment(exp, seed=seed, out_dir=out_dir, progress=True, baselines=baselines)  # its phases on stderr


@dataclass
class CellRun:
    """One cell's outcome, as the matrix reports it."""

    cell: Cell
    valid: Verdict
    anomalies: list[dict[str, Any]]
    faults_fired: int
    baseline_equal: bool | None
    run_dir: str | None  # None once removed (a valid cell without --keep)
    seconds: float
    cell_dir: Path  # <out>/<cell>: experiment.yaml and everything the runner wrote
    reasons: list[str] = field(default_factory=list)  # the runner's: why not valid (or why unknown)
    observed: dict[str, int] = field(default_factory=dict)  # `observed_counts` of its history, read before any removal
    baseline_itself_invalid: bool = False  # the fault-free baseline's own verifiers found anomalies
    ran: bool = True  # False: no invocation ran it (`--report-only` over journals that lack it)

    @property
    def reproduce(self) -> str:
        return ExperimentDir(self.cell_dir).reproduce(self.cell.seed)

    def record(self) -> dict[str, Any]:
        """What the matrix's journal keeps of a finished cell: enough to rebuild it on `--resume`."""
        return {**self.to_json(), "reasons": self.reasons, "baseline_itself_invalid": self.baseline_itself_invalid}

    @classmethod
    def from_record(cls, cell: Cell, doc: dict[str, Any], cell_dir: Path) -> CellRun:
        """A cell a previous invocation finished, as its journal line says (its directory may be gone: valid cells are removed)."""
        valid = doc.get("valid")
        run_dir = doc.get("run_dir")
        return cls(
            cell,
            valid if isinstance(valid, bool) else "unknown",
            list(doc.get("anomalies") or []),
            int(doc.get("faults_fired") or 0),
            doc.get("baseline_equal"),
            run_dir if isinstance(run_dir, str) and Path(run_dir).exists() else None,
            float(doc.get("seconds") or 0.0),
            cell_dir,
            [str(r) for r in doc.get("reasons") or []],
            {str(k): int(v) for k, v in (doc.get("observed") or {}).items()},
            bool(doc.get("baseline_itself_invalid")),
        )

    def to_json(self) -> dict[str, Any]:
        c = self.cell
        return {
            "fault": c.fault,
            "workload": c.workload,
            "format": c.format,
            "seed": c.seed,
            "valid": self.valid,
            "anomalies": self.anomalies,
            "faults_fired": self.faults_fired,
            "baseline_equal": self.baseline_equal,
            "run_dir": self.run_dir,
            "cell": c.name,
            "seconds": round(self.seconds, 1),
            "observed": self.observed,
        }


@dataclass
class MatrixResult:
    """Every cell run (in order), the inapplicable combinations, and the verdict rules."""

    preset: str
    runs: list[CellRun]
    skipped: list[Skipped]
    seconds: float
    strict_native: bool = False
    interrupted: str | None = None  # the cell that was running when Ctrl-C came
    notes: list[str] = field(default_factory=list)

    def of(self, format: Format) -> list[CellRun]:
        return [r for r in self.runs if r.cell.format == format]

    def natives(self) -> list[CellRun]:
        """Cells on Spark's own store (native-v1, native-v2, native)."""
        return [r for r in self.runs if r.cell.format.native]

    def v1_controls(self, format: Format = V1) -> list[CellRun]:
        """V1 cells (statebed's, or `native-v1`: Spark's own) whose workload makes V1's anomalies
        visible (random choices per attempt)."""
        return [r for r in self.of(format) if r.cell.workload in NONDETERMINISTIC]

    def native_v2(self) -> list[CellRun]:
        """Cells on Spark's store in checkpoint format 2 (`native-v2`, `native`)."""
        return [r for r in self.natives() if r.cell.format.version == 2]

    @property
    def v2_all_valid(self) -> bool:
        return all(r.valid is True for r in self.of(V2))

    @property
    def v1_caught(self) -> bool | None:
        """A V1 control found invalid by a state or lineage anomaly; None: no V1 control cell ran."""
        controls = self.v1_controls()
        return None if not controls else any(_caught(r) for r in controls)

    @property
    def native_ok(self) -> bool:
        """Every cell on Spark's store in checkpoint format 2 is valid (native-v1 is a control, like V1)."""
        return all(r.valid is True for r in self.native_v2())

    @property
    def exit_code(self) -> int:
        if self.interrupted is not None:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if self.reasons() else EXIT_OK

    def reasons(self) -> list[str]:
        """Why the matrix does not pass (empty: it does): each rule it breaks, in words."""
        v2, controls = self.of(V2), self.v1_controls()
        out = []
        if not v2:
            out.append("no statebed V2 cell ran: nothing shows V2 holds under these faults")
        elif not self.v2_all_valid:
            out.append(f"{sum(r.valid is not True for r in v2)} of {len(v2)} statebed V2 cell(s) not valid")
        if not controls:
            out.append(
                f"no V1 control ran (a V1 cell on {' or '.join(sorted(NONDETERMINISTIC))}): nothing shows the faults can break a store"
            )
        elif not self.v1_caught:
            out.append(
                f"the V1 control was not caught: no V1 cell on {' or '.join(sorted(NONDETERMINISTIC))} was found invalid by a state "
                f"or lineage anomaly with its faults fired and a valid baseline ({len(controls)} ran{_not_caught(controls)})"
            )
        if self.strict_native:
            out += self._native_reasons()
        return out

    def _native_reasons(self) -> list[str]:
        """--strict-native: every format-2 native cell valid and, when native-v1 controls ran, one caught."""
        out = []
        v2 = self.native_v2()
        if not self.native_ok:
            out.append(f"{sum(r.valid is not True for r in v2)} of {len(v2)} native V2 cell(s) not valid (--strict-native)")
        controls = self.v1_controls(NATIVE_V1)
        if controls and not any(_caught(r) for r in controls):
            out.append(f"no native-v1 control was caught ({len(controls)} ran{_not_caught(controls)}; --strict-native)")
        return out

    def failing(self) -> list[CellRun]:
        """Cells not valid: their directories are kept and their commands printed."""
        return [r for r in self.runs if r.valid is not True]

    def summary(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            **_counts(self.runs, total="cells"),
            "v2_all_valid": self.v2_all_valid,
            "v1_caught": self.v1_caught,
            "v1_controls": len(self.v1_controls()),
            "native": _counts(self.natives(), total="cells"),
            "strict_native": self.strict_native,
            "seconds": round(self.seconds, 1),
            "cell_seconds": _cell_seconds(self.runs),
            "skipped": [s.to_json() for s in self.skipped],
            "failing": [{"cell": r.cell.name, "valid": r.valid, "reasons": r.reasons, "reproduce": r.reproduce} for r in self.failing()],
            "interrupted": self.interrupted,
            "notes": self.notes,
            "reasons": self.reasons(),
            "exit_code": self.exit_code,
        }

    def to_json(self) -> dict[str, Any]:
        return {"runs": [r.to_json() for r in self.runs], "summary": self.summary()}


def _cell_seconds(runs: Iterable[CellRun]) -> dict[str, float | None]:
    """The cells' own wall times, over every invocation that ran them (`seconds` is this
    invocation's alone): their sum and median, cells that never ran left out."""
    ran = [r.seconds for r in runs if r.ran]
    return {"total": round(sum(ran), 1), "median": round(statistics.median(ran), 1) if ran else None}


def _counts(runs: Iterable[CellRun], *, total: str) -> dict[str, int]:
    n = Counter(_label(r.valid) for r in runs)
    return {total: sum(n.values()), "valid": n["valid"], "invalid": n["invalid"], "unknown": n["unknown"]}


def _fired(run: CellRun) -> bool:
    return run.faults_fired == len(run.cell.experiment.faults)


def _not_caught(controls: list[CellRun]) -> str:
    """Why the invalid V1 controls do not count, as `; N ...` parts."""
    bad = [r for r in controls if r.valid is False]
    unfired = [r for r in bad if not _fired(r)]
    itself = [r for r in bad if _fired(r) and r.baseline_itself_invalid and not _caught(r)]
    rest = [r for r in bad if _fired(r) and not r.baseline_itself_invalid]
    parts = [f"{len(rest)} invalid only by other anomalies: {_kinds(rest)}"] if rest else []
    parts += [f"{len(unfired)} invalid with a fault that did not fire"] if unfired else []
    parts += [f"{len(itself)} invalid with a baseline invalid on its own and no anomaly where a fault struck"] if itself else []
    return "".join(f"; {p}" for p in parts)


def _caught(run: CellRun) -> bool:
    """Caught by the faults: invalid, every fault fired, and a state or lineage anomaly the faults
    can answer for (`fault_caused`)."""
    struck = {f.at.batch for f in run.cell.experiment.faults}
    return run.valid is False and _fired(run) and fault_caused(run.anomalies, struck, run.baseline_itself_invalid)


def fault_caused(anomalies: Iterable[dict[str, Any]], struck: set[int], baseline_itself_invalid: bool) -> bool:
    """A state or lineage anomaly the faults can answer for. With a valid fault-free baseline, any;
    when the baseline was invalid on its own (V1 under speculation alone), only one in the state
    after a batch a fault struck (its `batches`): the others may need no fault at all."""
    found = [a for a in anomalies if is_store_anomaly(a)]
    if not baseline_itself_invalid:
        return bool(found)
    return any(struck & set(a.get("batches") or ()) for a in found)


def _kinds(runs: Iterable[CellRun]) -> str:
    found = {f"{a.get('check', '?')}/{a.get('kind', '?')}" for r in runs if r.valid is False for a in r.anomalies}
    return ", ".join(sorted(found)) or "none"


def _label(v: Verdict) -> str:
    return "valid" if v is True else "invalid" if v is False else "unknown"


def run_matrix(
    cells: list[Cell],
    skipped: list[Skipped],
    out: Path,
    *,
    preset: str,
    run_cell: RunCell = run_experiment_cell,
    keep: bool = False,
    strict_native: bool = False,
    baselines_dir: Path | None = None,
    resume: bool = False,
    run_missing: bool = True,
    log: TextIO = sys.stderr,
) -> MatrixResult:
    """Run `cells` one after another under `out`; one baselines cache for all of them (also kept
    in `baselines_dir` when given: `Baselines`). Each finished cell is appended to the matrix's
    journal at once; with `resume`, the cells it lists are taken from it, not run again, and the
    directory of a cell that was running when a previous invocation stopped is run afresh.
    Without `run_missing` (the journals of a matrix's shards, judged as one) no cell runs: a
    cell the journal lacks is `unknown`, "not run".

    Ctrl-C stops at the running cell (the runner stops its processes) and returns a result
    marked interrupted; the directories of valid cells are removed at the end unless `keep`."""
    started = time.monotonic()
    result = MatrixResult(preset, [], skipped, 0.0, strict_native)
    baselines = Baselines(baselines_dir)
    journal = MatrixDir(out)
    finished = journal.finished() if resume else {}
    try:
        for i, cell in enumerate(cells, 1):
            tag = f"[{i}/{len(cells)}] {cell.fault}/{cell.workload}/{cell.format} seed {cell.seed}"
            if cell.name in finished:
                result.runs.append(CellRun.from_record(cell, finished[cell.name], out / cell.name))
                print(f"{tag}: finished before, {_label(result.runs[-1].valid)} (resumed from {journal.journal})", file=log, flush=True)
                continue
            if not run_missing:
                result.runs.append(_not_run(cell, out / cell.name, journal))
                print(f"{tag}: UNKNOWN: not run (no line in {journal.journal})", file=log, flush=True)
                continue
            if resume and (out / cell.name).exists():
                shutil.rmtree(out / cell.name)  # the cell a previous invocation was running when it stopped
            print(f"{tag}: running ({cell.experiment.cluster} cluster, {cell.experiment.storage} storage)", file=log, flush=True)
            try:
                run = _run_one(cell, out / cell.name, run_cell, baselines)
            except KeyboardInterrupt:
                result.interrupted = cell.name
                print(f"{tag}: interrupted; its directory is kept: {out / cell.name}", file=log, flush=True)
                break
            result.runs.append(run)
            journal.append_finished(run.record())
            print(f"{tag}: {_describe(run)}", file=log, flush=True)
    finally:
        if not keep:
            _remove_valid(result, baselines)
        result.seconds = time.monotonic() - started
    return result


def _run_one(cell: Cell, cell_dir: Path, run_cell: RunCell, baselines: Baselines) -> CellRun:
    """Write the cell's experiment file, run what it says; a crash is an unknown cell."""
    started = time.monotonic()
    path = ExperimentDir(cell_dir).experiment
    try:
        cell_dir.mkdir(parents=True, exist_ok=False)
        ExperimentDir(cell_dir).write_experiment(cell.experiment.to_yaml())
        res = run_cell(load_experiment(path), cell.seed, cell_dir, baselines)  # the file, as a replay reads it
    except Exception as e:  # the harness crashed in this cell: it proves nothing either way
        crash = {"kind": "harness-error", "detail": f"{type(e).__name__}: {e}"}
        return CellRun(cell, "unknown", [crash], 0, None, str(cell_dir), time.monotonic() - started, cell_dir, [crash["detail"]])
    valid: Verdict = res.valid if isinstance(res.valid, bool) else "unknown"
    return CellRun(
        cell,
        valid,
        list(res.anomalies),
        int(res.faults_fired),
        res.baseline_equal,
        str(res.run_dir),
        time.monotonic() - started,
        cell_dir,
        list(res.reasons),
        _observed(cell_dir),
        res.baseline_itself_invalid,
    )


def _not_run(cell: Cell, cell_dir: Path, journal: MatrixDir) -> CellRun:
    """A planned cell no invocation finished: it proves nothing either way."""
    return CellRun(cell, "unknown", [], 0, None, None, 0.0, cell_dir, [f"not run: no line for it in {journal.journal}"], ran=False)


def _observed(cell_dir: Path) -> dict[str, int]:
    """The cell's observed counts; an unreadable history counts nothing (its verdict already says why)."""
    try:
        return observed_counts(read_history(ExperimentDir(cell_dir).history))
    except StatebedError:
        return {}


def _describe(run: CellRun) -> str:
    kinds = Counter(str(a.get("kind", "?")) for a in run.anomalies)
    what = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(kinds.items())) or "none"
    baseline = {True: "equal to baseline", False: "differs from baseline", None: "no baseline comparison"}[run.baseline_equal]
    why = "".join(f"; because {r}" for r in run.reasons[:3])
    return f"{_label(run.valid).upper()}: anomalies {what}; faults fired {run.faults_fired}; {baseline}; {run.seconds:.1f} s{why}"


def _remove_valid(result: MatrixResult, baselines: Baselines) -> None:
    """Remove valid cells' directories, except one holding the baseline a kept cell was compared with."""
    used = [b.run_dir for r in result.failing() if (b := baselines.get(baseline_key(r.cell.experiment, r.cell.seed))) is not None]
    for r in result.runs:
        if r.valid is not True or r.run_dir is None:
            continue
        holds = [b for b in used if Path(b).absolute().is_relative_to(r.cell_dir.absolute())]
        if holds:
            result.notes.append(f"kept {r.cell_dir}: it holds the baseline {holds[0]} of a cell that is not valid")
            continue
        shutil.rmtree(r.cell_dir, ignore_errors=True)
        r.run_dir = None


def render_table(result: MatrixResult) -> str:
    """fault × workload rows, one column per format: valid/invalid/unknown counts, n/a when skipped."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for r in result.runs:
        rows.setdefault((r.cell.fault, r.cell.workload), {})
    for s in result.skipped:
        rows.setdefault((s.fault, s.workload), {})[s.format] = "n/a"
    for (fault, workload), cols in rows.items():
        for format in FORMATS:
            mine = [r for r in result.runs if (r.cell.fault, r.cell.workload, r.cell.format) == (fault, workload, format)]
            if mine:
                c = _counts(mine, total="n")
                cols[format] = f"{c['valid']}/{c['invalid']}/{c['unknown']}"
    width = max([len(f) for f, _ in rows] + [5])
    lines = [f"{'fault':<{width}}  {'workload':<14}  " + "  ".join(f"{m:<10}" for m in FORMATS) + "  (valid/invalid/unknown)"]
    for (fault, workload), cols in rows.items():
        lines.append(f"{fault:<{width}}  {workload:<14}  " + "  ".join(f"{cols.get(m, '-'):<10}" for m in FORMATS))
    return "\n".join(line.rstrip() for line in lines)


def render_verdict(result: MatrixResult) -> str:
    """One line: PASS/FAIL and why, the counts, the V1 control, native."""
    s = result.summary()
    v2 = _counts(result.of(V2), total="cells")
    caught = {True: "caught", False: "NOT caught", None: "not in this selection"}[result.v1_caught]
    n = s["native"]
    verdict = "INTERRUPTED" if result.interrupted else "PASS" if result.exit_code == EXIT_OK else "FAIL"
    return (
        f"matrix {result.preset}: {verdict} — {s['cells']} cells ({s['valid']} valid, {s['invalid']} invalid, {s['unknown']} unknown) "
        f"in {s['seconds']:.0f} s; statebed V2 {v2['valid']}/{v2['cells']} valid; V1 positive control {caught} "
        f"({sum(r.valid is False for r in result.v1_controls())} of {len(result.v1_controls())} nondeterministic V1 cells invalid); "
        f"native {n['valid']}/{n['cells']} valid{' (strict)' if result.strict_native else ' (reported only)'}; "
        f"{len(result.skipped)} combination(s) not applicable"
        + "".join(f"; FAIL because {r}" for r in ([] if result.interrupted else result.reasons()))
    )
