"""The matrix's presets: which cells (fault kind × workload × format × seed) `--quick` and
`--full` run, and how each cell becomes an `Experiment`.

One table (`FAULTS`) says how each fault kind is scheduled in a matrix cell (trigger batch,
duration, params, cluster), so both presets and any `--faults` selection build a kind's
cell the same way. A cell a fault cannot apply to (a statebed failpoint on native Spark, a
network fault without S3, a workload native mode cannot read) is not run: it is listed as
skipped with the fault's own reason, never counted as valid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from statebed_base.errors import UsageError
from statebed_base.names import path_segment
from statebed_model.native_state import NATIVE_WORKLOADS
from statebed_model.workloads import WORKLOADS
from statebed_store.formats import RUN_FORMATS, V1, V2, Format

from .experiment import STORAGES, Experiment
from .faults import KINDS, FaultSpec, NotApplicable, Trigger, fault_class

__all__ = ["FAULTS", "FORMATS", "PRESETS", "Cell", "FaultPlan", "Preset", "Skipped", "plan_cells"]

FORMATS = RUN_FORMATS  # the matrix's columns: v1, v2, native-v1, native-v2 (statebed_store.formats)
# the workloads whose V1 anomalies show: a random choice per attempt (the seed appendix's cases)
NONDETERMINISTIC = frozenset({"bucket-collect", "sample3"})
# restart-driver in statebed modes: each seed kills the driver at the next protocol step
_DRIVER_STEPS = ("after-task-commits", "before-commit-log", "after-commit-log", "before-spark-commit")


@dataclass(frozen=True)
class FaultPlan:
    """How one fault kind is scheduled in a cell: trigger batch, duration, params, cluster."""

    batch: int = 2
    for_s: float | None = None
    params: Callable[[Format, int, str], dict[str, Any]] = lambda _format, _seed, _workload: {}  # (format, seed, workload) -> params
    cluster: str | None = None  # None: standalone when the fault needs it, else the preset's
    sizes: dict[str, int] = field(default_factory=dict)  # overrides of the preset's sizes for this fault
    native_sizes: dict[str, int] | None = None  # native-v1 / native-v2 cells' instead (None: the same)
    # Faults scheduled with it to give it a target, not under test (the cell's first fault is):
    # each joins only the cells it applies to, where its own proof is required like any fault's.
    companions: tuple[FaultSpec, ...] = ()
    native_companions: tuple[FaultSpec, ...] | None = None  # native-v1 / native-v2 cells' instead (None: the same)

    def companions_for(self, format: Format) -> tuple[FaultSpec, ...]:
        return self.native_companions if format.native and self.native_companions is not None else self.companions

    def sizes_for(self, format: Format) -> dict[str, int]:
        return self.native_sizes if format.native and self.native_sizes is not None else self.sizes

    def spec(self, kind: str, format: Format, seed: int, workload: str = "") -> FaultSpec:
        return FaultSpec(id="f1", kind=kind, at=Trigger(batch=self.batch), for_s=self.for_s, params=self.params(format, seed, workload))


# A state task of batch 2 held 2 s after loading its state (its input fetched): a straggler for
# a pause to freeze once its sibling has finished, so Spark copies it during the pause. With
# millisecond tasks there is rarely one (pause-executor fired 1 / 3 without it, issue 24 #19).
_HOLD = FaultSpec(id="hold", kind="slow-attempt", at=Trigger(batch=2), params={"partition": 0, "ms": 2000, "when": "before"})

# Spark's store has no task points: there the state task of batch 2 is held 4 s in its commit,
# at its changelog's close (the plug-in's `native.changelog.upload`), and the pause finds it
# by that delay's firing record (its JVM pid). 4 s: the pause waits for the sibling to write
# its state first, and the sibling may start late (seen 0.75 s after the delay began).
_NATIVE_HOLD = replace(_HOLD, params={"partition": 0, "ms": 4000, "when": "after"})

# Two held attempts: a pass deletes once a snapshot lets an old version go, and snapshots upload
# asynchronously, so the pass at batch 3 may have nothing to delete yet; the one at batch 4 then has.
_CLEANUP_HOLDS = tuple(
    FaultSpec(id=f"hold{b}", kind="slow-attempt", at=Trigger(batch=b), params={"partition": 0, "ms": 3000, "when": "before"})
    for b in (4, 5)
)
# Spark's store: its maintenance deletes a version once a newer snapshot lets it go, and it
# uploads snapshots itself, after the commit: a snapshot of every version (interval 1) gives
# deletes from batch 3 on, while the held attempts of batches 4 and 5 (at their changelog
# close, the plug-in's only task point) are still writing.
_NATIVE_CLEANUP_HOLDS = tuple(replace(h, params={"partition": 0, "ms": 3000, "when": "after"}) for h in _CLEANUP_HOLDS)


def _restart_params(format: Format, seed: int, _workload: str) -> dict[str, Any]:
    return {"step": "at-trigger"} if format.native else {"step": _DRIVER_STEPS[seed % len(_DRIVER_STEPS)]}


def _pause_params(format: Format, _seed: int, _workload: str) -> dict[str, Any]:
    """Native tasks start later after the trigger (the map stage, Python workers): wait longer for the held one."""
    return {"wait_s": 60} if format.native else {}


def _zombie_params(format: Format, _seed: int, workload: str) -> dict[str, Any]:
    """bucket-collect on Spark's store: a retry reads the same shuffle blocks, so the zombie must
    outlive its driver and the batch be planned again (`zombie_replan`) for the bucket anomaly."""
    return {"replan": True, "hold_ms": 120000} if format.plugin and workload == "bucket-collect" else {}


FAULTS: dict[str, FaultPlan] = {
    "kill-executor": FaultPlan(),
    "pause-executor": FaultPlan(for_s=8.0, params=_pause_params, companions=(_HOLD,), native_companions=(_NATIVE_HOLD,)),
    "slow-attempt": FaultPlan(cluster="standalone"),  # speculation: the slow attempt's copy commits too
    "kill-python-worker": FaultPlan(cluster="standalone"),  # the killed attempt is retried (local[2] never retries)
    "restart-driver": FaultPlan(params=_restart_params),
    "delay-snapshot-upload": FaultPlan(),
    "drop-snapshot-upload": FaultPlan(),
    "fail-changelog-upload": FaultPlan(cluster="standalone"),  # likewise
    # No snapshot after the zombie's version: every later load replays its changelog by name
    # (a V1 snapshot of the winner's state taken next would hide the overwrite from readers).
    "zombie-upload": FaultPlan(params=_zombie_params, sizes={"snapshot_interval": 100}),
    # Kill at batch 4, rewind to 2, reprocess 3..5 (diverging, snapshots dropped); a snapshot at
    # version 4 (batch 3) of the abandoned timeline is what a V1 rerun loads by name.
    "rewind-reprocess": FaultPlan(batch=4, cluster="standalone", sizes={"snapshot_interval": 2}),
    "storage-latency": FaultPlan(for_s=5.0),
    "storage-jitter": FaultPlan(for_s=5.0),
    "storage-bandwidth": FaultPlan(for_s=5.0),
    "storage-outage": FaultPlan(for_s=3.0),
    "storage-reset": FaultPlan(for_s=3.0),
    # maintenance after every commit (retain 2) racing the held attempts of batches 4 and 5
    "cleanup-race": FaultPlan(
        batch=1, companions=_CLEANUP_HOLDS, native_companions=_NATIVE_CLEANUP_HOLDS, native_sizes={"snapshot_interval": 1}
    ),
    # the driver killed as batch 3 starts, the snapshot the restarted load reads damaged before the
    # restart; Spark's defaults, so its auto snapshot repair is on (off, the query fails: the positive
    # control `examples/experiments/corrupt-snapshot-count-native-v2.yaml`)
    "corrupt-snapshot": FaultPlan(batch=3, native_sizes={"snapshot_interval": 1}),
    # the driver killed as batch 3 starts, one value in the changelog the restarted load replays
    # changed and the file re-encoded: damage no store can undo, so the cell is invalid by design; what
    # it measures is Spark's answer (Spark's defaults: no row checksums, the changed value is served)
    "corrupt-row": FaultPlan(batch=3, native_sizes={"snapshot_interval": 100}),
}


@dataclass(frozen=True)
class Cell:
    """One matrix cell: a fault kind on a workload and format, with one seed, as an experiment."""

    fault: str
    workload: str
    format: Format
    seed: int
    experiment: Experiment = field(compare=False)
    where: str = ""  # "-s3" when `--storage s3` moved the cell into the bucket: its name says so

    @property
    def name(self) -> str:
        """The cell's directory name under the matrix's (a path segment, checked as one)."""
        return path_segment(f"{self.fault}-{self.workload}-{self.format}{self.where}-s{self.seed}", "matrix cell name")


@dataclass(frozen=True)
class Skipped:
    """A (fault, workload, format) the fault cannot apply to, with its reason."""

    fault: str
    workload: str
    format: Format
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"fault": self.fault, "workload": self.workload, "format": self.format, "reason": self.reason}


@dataclass(frozen=True)
class Preset:
    """Named cells: `combos` lists (fault, workload, format); every combo runs with every seed."""

    name: str
    combos: tuple[tuple[str, str, Format], ...]
    seeds: int  # default --seeds
    base: Experiment  # sizes, cluster and storage of every cell (a fault's plan may change cluster/storage)


def _product(faults: Sequence[str], workloads: Sequence[str], formats: Sequence[Format]) -> tuple[tuple[str, str, Format], ...]:
    return tuple((f, w, m) for f in faults for w in workloads for m in formats)


PRESETS: dict[str, Preset] = {
    # inside `make test`: four small cells, eight Spark runs (each cell its own baseline: no two share a key)
    "quick": Preset(
        name="quick",
        combos=(
            ("zombie-upload", "sample3", V1),  # the V1 positive control
            ("zombie-upload", "sample3", V2),
            ("restart-driver", "sample3", V2),
            ("fail-changelog-upload", "bucket-collect", V2),
        ),
        seeds=1,
        base=Experiment(cluster="local", batches=4, rows_per_batch=2000, keyspace=200, partitions=2, workers=2, timeout_s=300.0),
    ),
    # nightly: every fault kind × every workload × v1 / v2 / native-v1 / native-v2
    "full": Preset(
        name="full",
        combos=_product(tuple(FAULTS), ("count", "bucket-collect", "sample3"), FORMATS),
        seeds=12,
        base=Experiment(cluster="local", batches=6, rows_per_batch=2000, keyspace=200, partitions=2, workers=2, timeout_s=600.0),
    ),
}


def plan_cells(
    preset: Preset,
    seeds: int,
    *,
    faults: Sequence[str] | None = None,
    workloads: Sequence[str] | None = None,
    formats: Sequence[str] | None = None,
    storage: str | None = None,
) -> tuple[list[Cell], list[Skipped]]:
    """The preset's cells (narrowed by the filters) for seeds 1..`seeds`, and the inapplicable ones.
    `storage` ("local" or "s3"; None: the preset's) is where every cell's checkpoint lives; the
    storage faults are on S3 whatever it says.

    A filter value that is not a known name, or that selects nothing in the preset, is a
    UsageError naming the flag and the value."""
    if storage not in (None, *STORAGES):
        raise UsageError(f"--storage: expected one of {', '.join(STORAGES)}, got {storage!r}")
    where = "-s3" if storage == "s3" and preset.base.storage != "s3" else ""
    combos = [
        c
        for c in preset.combos
        if (faults is None or c[0] in faults) and (workloads is None or c[1] in workloads) and (formats is None or c[2] in formats)
    ]
    for flag, values, known, i in (
        ("--faults", faults, KINDS, 0),
        ("--workloads", workloads, WORKLOADS, 1),
        ("--formats", formats, FORMATS, 2),
    ):
        for v in values or ():
            if v not in known:
                raise UsageError(f"{flag}: unknown name {v!r} (known: {', '.join(sorted(known))})")
            if not any(c[i] == v for c in combos):
                raise UsageError(f"{flag}: {v!r} selects no cell of the {preset.name} preset with the other filters")
    cells: list[Cell] = []
    skipped: list[Skipped] = []
    for fault, workload, format in combos:
        exps = [_experiment(preset, fault, workload, format, seed, storage, where) for seed in range(1, seeds + 1)]
        reason = _not_applicable(exps[0])
        if reason is not None:
            skipped.append(Skipped(fault, workload, format, reason))
            continue
        cells += [Cell(fault, workload, format, e.seed or 0, e, where) for e in exps]
    return cells, skipped


def _experiment(
    preset: Preset, kind: str, workload: str, format: Format, seed: int, storage: str | None = None, where: str = ""
) -> Experiment:
    plan = FAULTS[kind]
    cls = _fault_class(kind)
    cluster = plan.cluster or ("standalone" if "standalone" in cls.needs else preset.base.cluster)
    storage = "s3" if "s3-proxy" in cls.needs else (storage or preset.base.storage)
    return replace(
        preset.base,
        name=f"{kind}-{workload}-{format}{where}",
        workload=workload,
        format=format,
        cluster=cluster,
        storage=storage,
        seed=seed,
        faults=[
            plan.spec(kind, format, seed, workload),
            *(c for c in plan.companions_for(format) if _why_not(c, format, cluster, storage) is None),
        ],
        **plan.sizes_for(format),  # type: ignore[arg-type]
    )


def _fault_class(kind: str) -> Any:
    try:
        return fault_class(kind)
    except ImportError as e:  # a catalogue entry whose module is not in this build
        raise UsageError(f"fault {kind!r} is not available in this build ({e})") from None


def _not_applicable(exp: Experiment) -> str | None:
    """Why this cell cannot run (None: it can)."""
    if exp.format.native and exp.workload not in NATIVE_WORKLOADS:
        return f"native runs support {', '.join(NATIVE_WORKLOADS)} only (no state reader for {exp.workload})"
    return _why_not(exp.faults[0], exp.format, exp.cluster, exp.storage)


def _why_not(spec: FaultSpec, format: Format, cluster: str, storage: str) -> str | None:
    """Why `spec` cannot apply to this format, cluster and storage (None: it can)."""
    try:
        _fault_class(spec.kind)(spec).check(format, cluster, storage)
    except NotApplicable as e:
        return str(e)
    return None
