"""The judge: what a run started by the launcher (`launcher.py`) proved. Used by `statebed chaos
run` (`experiment_runner.py`) and, for the verifiers and the fault accounting, by `statebed load
run` (`statebed_load.load_run`, which adds its acknowledgement accounting).

A scheduled fault without proof that it fired makes a run unknown, never valid; the verifiers
(lineage, state, attempts) and the baseline comparison decide the rest, false > unknown > true,
and the exit code comes from the one table (`EXIT_CODES`). A verifier that cannot judge says
unknown, never true (Jepsen's composed checkers).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statebed_base.errors import StatebedError
from statebed_model.rundir import RunDir
from statebed_store import S3Settings
from statebed_verify import EXIT_CODES, Verdict, merge_verdicts, summarise, verify_run
from statebed_verify.attempts_check import check_attempts
from statebed_verify.history import History
from statebed_verify.history_build import add_run_ops
from statebed_verify.result import Anomaly

from .baseline import Baseline, compare_views, state_view
from .driver_process import DriverExit
from .experiment import Experiment
from .launcher import Say
from .nemesis import Nemesis

__all__ = ["EXIT_HARNESS", "Checked", "ExperimentResult", "check_run", "judge", "unfired"]

EXIT_HARNESS = 2  # the run could not be judged: a harness or input error, not a verdict


@dataclass
class ExperimentResult:
    name: str
    seed: int
    valid: Verdict
    anomalies: list[dict[str, Any]]
    faults: list[dict[str, Any]]
    faults_fired: int
    faults_scheduled: int
    baseline_equal: bool | None
    run_dir: str
    seconds: float
    exit_code: int
    reproduce: str
    checks: dict[str, Any] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)  # why not valid (or why unknown)
    error: str | None = None  # a harness failure

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def baseline_itself_invalid(self) -> bool:
        """The fault-free baseline's own verifiers found anomalies (see `_compare`)."""
        return bool(self.checks.get("baseline", {}).get("itself_invalid"))

    def settle(self, verdicts: list[Verdict]) -> None:
        """The verdict over every check, and its exit code from the one table."""
        self.valid = merge_verdicts(verdicts)
        self.exit_code = EXIT_CODES[self.valid]


def unfired(faults: list[dict[str, Any]]) -> list[str]:
    """Why each scheduled fault without proof that it fired makes the run unknown."""
    return [
        f"fault {f['id']} {f['kind']} did not provably fire ({f.get('fired')}): {f.get('detail')}"
        for f in faults
        if f.get("fired") is not True
    ]


@dataclass
class Checked:
    """What the verifiers found on one run, for the caller to fold into its own result."""

    summary: dict[str, Any]  # per check: verdict, anomaly count and kinds (`summarise`), and attempts
    verdicts: list[Verdict] = field(default_factory=list)  # the counted checks'
    anomalies: dict[str, list[Anomaly]] = field(default_factory=dict)  # the counted checks', by check
    reasons: list[str] = field(default_factory=list)  # why a check could not judge


def check_run(run: RunDir, s3: S3Settings | None, counted: Collection[str] | None = None) -> Checked:
    """The verifiers on a finished run: lineage and state (`verify_run`), then the attempts check if
    counted. `counted`: the checks whose verdict counts (an experiment's `verifiers`); None: every
    check `verify_run` makes, as a load run counts them. One function, so both runs judge alike."""
    composite = verify_run(run.root, s3)
    checked = Checked(summarise(composite))
    for name, report in composite.reports.items():
        if counted is None or name in counted:
            checked.verdicts.append(report.valid)
            checked.anomalies[name] = list(report.anomalies)
            if report.valid == "unknown":
                checked.reasons.append(_undecided(name, report.notes))
    if counted is not None and "attempts" in counted:
        orphans = getattr(composite.reports.get("lineage"), "orphans", None)
        try:
            att = check_attempts(run, orphans or [])
        except StatebedError as e:
            checked.verdicts.append("unknown")
            checked.reasons.append(f"attempts check: {e}")
        else:
            checked.summary["attempts"] = att.to_json()
            checked.verdicts.append(att.valid)
            checked.anomalies["attempts"] = list(att.anomalies)
            if att.valid == "unknown":
                checked.reasons.append(_undecided("attempts", att.notes))
    return checked


def _undecided(check: str, notes: list[str]) -> str:
    """Why a check said unknown, in one line: a cell or load run that is unknown names its cause
    (a V1 checkpoint has no lineage to check; a checker crashed) rather than showing no reason."""
    shown = "; ".join(notes[:2]) + (f" (+{len(notes) - 2} more notes)" if len(notes) > 2 else "")
    return f"{check}: could not decide" + (f": {shown}" if shown else " (it left no note)")


def judge(
    exp: Experiment,
    run_dir: Path,
    s3: S3Settings | None,
    exits: list[DriverExit],
    nemesis: Nemesis,
    base: Baseline | None,
    history: History,
    result: ExperimentResult,
    say: Say,
) -> None:
    """The faulted run's verdict into `result`: how its drivers ended, whether every fault fired,
    the verifiers and the baseline comparison (the history gains the run's batches and attempts)."""
    verdicts: list[Verdict] = []
    last = exits[-1]
    if last.timed_out:
        verdicts.append("unknown")
        result.reasons.append(f"the run did not finish within timeout_s={exp.timeout_s:g}: everything was stopped")
    elif last.code != 0:
        verdicts.append("unknown")
        why = "no scheduled fault restarts drivers" if not nemesis.restarts_driver() else f"after {len(exits) - 1} restart(s)"
        result.reasons.append(f"the driver exited {last.code} ({why}); see {last.stderr}")
    run = RunDir(run_dir, s3)
    for note in add_run_ops(history, run) if run.exists() else []:  # (no run.json: nothing to add, and read_info raises)
        result.reasons.append(f"history: {note}")
    result.faults = nemesis.evidence()
    result.faults_fired = sum(1 for f in result.faults if f["fired"] is True)
    for why in unfired(result.faults):
        verdicts.append("unknown")
        result.reasons.append(why)
    if not run.exists():
        result.settle([*verdicts, "unknown"])
        result.reasons.append("the faulted run left no run directory")
        return
    verdicts += _verifiers(exp, run, s3, result)
    if base is not None and last.code == 0:
        verdicts.append(_compare(run, base, result))
    elif base is not None:
        result.reasons.append("baseline: not compared (the faulted run did not finish)")
    result.settle(verdicts)
    if result.valid is not True and not result.reasons and result.anomalies:
        result.reasons.append(f"{len(result.anomalies)} anomal{'y' if len(result.anomalies) == 1 else 'ies'}")
    say("checks: " + ", ".join(f"{k} {v.get('valid')}" for k, v in result.checks.items()) + f"; baseline_equal {result.baseline_equal}")


def _verifiers(exp: Experiment, run: RunDir, s3: S3Settings | None, result: ExperimentResult) -> list[Verdict]:
    """The experiment's verifiers (lineage, state, attempts) on the faulted run."""
    checked = check_run(run, s3, exp.verifiers)
    result.checks = checked.summary
    result.anomalies += [{"check": name, **a.to_json()} for name, found in checked.anomalies.items() for a in found]
    result.reasons += checked.reasons
    return checked.verdicts


def _compare(run: RunDir, base: Baseline, result: ExperimentResult) -> Verdict:
    """The faulted run's final state against the fault-free baseline's; a baseline invalid by
    itself is named, so its anomalies are not blamed on the faults."""
    itself = sorted(name for name, v in base.verdicts.items() if isinstance(v, dict) and v.get("valid") is False)
    result.checks["baseline"] = {"run_dir": base.run_dir, "verdicts": base.verdicts, "error": base.error, "itself_invalid": itself}
    if itself:  # e.g. V1 under speculation alone: its anomalies need no fault, so a finding proves no fault
        result.reasons.append(f"the fault-free baseline is itself invalid ({', '.join(itself)}): not every anomaly is the faults' doing")
    if base.view is None:
        result.reasons.append(f"baseline: {base.error}")
        return "unknown"
    try:
        diffs = compare_views(state_view(run), base.view)
    except StatebedError as e:
        result.reasons.append(f"baseline: the faulted run's final state is unreadable: {e}")
        return "unknown"
    result.baseline_equal = not diffs
    result.checks["baseline"]["valid"] = not diffs
    if diffs:
        result.anomalies.append({"check": "baseline", "kind": "baseline-mismatch", "detail": "; ".join(diffs)})
    return not diffs
