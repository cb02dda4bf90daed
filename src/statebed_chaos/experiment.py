"""The experiment file: what to run (workload, format, storage, cluster, sizes), which faults
to inject when, and which verifiers judge it. Declarative, like a Chaos Toolkit experiment.

Loading checks everything a run would trip over later (unknown keys, wrong types, unknown
fault kinds, a fault that cannot apply to this format or cluster) and fails with one line
naming the file and the field, before anything starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

import yaml

from statebed_base.durations import parse_duration
from statebed_base.errors import NotRegularFileError, UsageError
from statebed_base.localfs import read_regular
from statebed_base.names import path_segment
from statebed_model.native_state import NATIVE_WORKLOADS
from statebed_model.spark_features import FEATURES, SPARK_DEFAULTS, feature_conf
from statebed_model.workloads import WORKLOADS
from statebed_store.formats import FORMATS, NATIVE_FORMATS, V2, Format, get_format

from .faults import FaultSpec, NotApplicable, Trigger, fault_class
from .faults.toxic_fault import STREAMS
from .limits import MAX_EXPERIMENT_BYTES, MAX_FAULT_S, MAX_PARAM_MS, MAX_SEED, MAX_SIZES, MAX_TIMEOUT_S

__all__ = ["VERIFIERS", "Experiment", "RandomSchedule", "check_fault", "load_experiment", "on_backend", "parse_experiment"]

VERIFIERS = ("lineage", "state", "baseline", "attempts")
_SIZES = ("workers", "partitions", "batches", "rows_per_batch", "keyspace", "snapshot_interval")


STORAGES = ("local", "s3")  # where an experiment's checkpoint lives: local disk, or MinIO behind Toxiproxy


@dataclass(frozen=True)
class RandomSchedule:
    """`schedule: {random: {count, kinds, batches: [first, last], after_s: max, for_s: [lo, hi]}}`."""

    count: int
    kinds: tuple[str, ...]
    batches: tuple[int, int]
    after_s: float = 0.0  # each fault waits a random 0..after_s after its batch started
    for_s: tuple[float, float] | None = None  # duration drawn in [lo, hi]; None: the fault's own default

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "kinds": list(self.kinds),
            "batches": list(self.batches),
            "after_s": self.after_s,
            "for_s": None if self.for_s is None else list(self.for_s),
        }


@dataclass
class Experiment:
    """One experiment; the defaults run in about a minute on a laptop (local[2], no faults)."""

    name: str = "experiment"
    workload: str = "count"
    format: Format = V2  # parsed from the file's `format` name (statebed_store.formats)
    storage: str = "local"  # local | s3
    storage_given: bool = field(default=False, compare=False)  # the file says `storage:` (else the backend's default)
    checkpoint_file_manager: str = "rename"  # native on s3: the Spark manager the plug-in wraps (rename | abortable)
    spark_features: tuple[str, ...] | None = None  # native: Spark's repair features on, the rest set off; None: Spark's defaults
    cluster: str = "local"  # local | standalone
    workers: int = 2
    partitions: int = 2
    batches: int = 4
    rows_per_batch: int = 2000
    keyspace: int = 200
    snapshot_interval: int = 2
    seed: int | None = None  # None: drawn per run (and written to the realised experiment)
    faults: list[FaultSpec] = field(default_factory=list)
    schedule: RandomSchedule | None = None
    verifiers: tuple[str, ...] = VERIFIERS
    proxy_api: str | None = None  # an existing Toxiproxy API URL; None: start ours (s3 storage)
    timeout_s: float = 600.0  # one run (faulted or baseline), then everything is killed: unknown
    max_driver_restarts: int = 3

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "workload": self.workload,
            "format": self.format.name,
            "storage": self.storage,
            "checkpoint_file_manager": self.checkpoint_file_manager,
            "spark_features": None if self.spark_features is None else list(self.spark_features),
            "cluster": self.cluster,
            **{k: getattr(self, k) for k in _SIZES},
            "seed": self.seed,
            "faults": [_spec_json(s) for s in self.faults],
            "verifiers": list(self.verifiers),
            "proxy": {"api": self.proxy_api},
            "timeout_s": self.timeout_s,
            "max_driver_restarts": self.max_driver_restarts,
        }
        if self.schedule is not None:
            doc["schedule"] = {"random": self.schedule.to_json()}
        return doc

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_json(), sort_keys=False, default_flow_style=None)

    def spark_conf(self) -> dict[str, str]:
        """The Spark settings its faults need to be provable (`Fault.spark_conf`, and `run_conf` for
        their params in this format; a scheduled kind with its default params), for the faulted
        run and its baseline alike; in a native run every repair feature, explicitly on or off."""
        specs = [*self.faults, *(FaultSpec("schedule", k) for k in (self.schedule.kinds if self.schedule is not None else ()))]
        conf = {k: v for kind in dict.fromkeys(s.kind for s in specs) for k, v in fault_class(kind).spark_conf.items()}
        for spec in specs:
            conf.update(fault_class(spec.kind)(spec).run_conf(self.format))
        if not self.format.native:
            return conf
        return {**feature_conf(SPARK_DEFAULTS if self.spark_features is None else self.spark_features), **conf}


def _spec_json(s: FaultSpec) -> dict[str, Any]:
    return {"id": s.id, "kind": s.kind, "at": s.at.to_json(), "for_s": s.for_s, "params": dict(s.params)}


def load_experiment(path: str | os.PathLike[str]) -> Experiment:
    """Read and check an experiment file; any problem is a UsageError naming the file and field."""
    p = Path(path)
    try:
        text = read_regular(p, max_bytes=MAX_EXPERIMENT_BYTES).decode()  # a FIFO or /dev/zero is refused, never read
    except NotRegularFileError as e:
        raise UsageError(f"{e}; not an experiment file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{p}: cannot read the experiment file ({getattr(e, 'strerror', None) or e})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{p}: not valid YAML{where} ({getattr(e, 'problem', None) or e})") from None
    return parse_experiment(doc, str(p))


class _Fields:
    """Typed access to one mapping of the file; errors name the file and the dotted field."""

    def __init__(self, doc: Any, file: str, where: str, known: tuple[str, ...]) -> None:
        self.file, self.where = file, where
        if not isinstance(doc, dict):
            self.fail("", f"must be a mapping, got {_type(doc)}")
        unknown = sorted(str(k) for k in doc if k not in known)
        if unknown:
            self.fail(unknown[0], f"unknown key (known: {', '.join(known)})")
        self.doc: dict[str, Any] = doc

    def label(self, name: str) -> str:
        """`<file>: <dotted field>`, the prefix of every error about `name`."""
        return f"{self.file}: {'.'.join(x for x in (self.where, name) if x) or '(top level)'}"

    def fail(self, name: str, why: str) -> NoReturn:
        raise UsageError(f"{self.label(name)}: {why}")

    def int_(self, name: str, default: int | None, lo: int = 1, optional: bool = False, hi: int | None = None, unit: str = "") -> Any:
        """An integer in lo..hi (hi default: the limit of that name in MAX_SIZES, if any)."""
        v = self.doc.get(name, default)
        if v is None and optional:
            return None
        hi = MAX_SIZES.get(name) if hi is None else hi
        if not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi is not None and v > hi):
            self.fail(name, f"must be an integer {f'in {lo}..{hi}' if hi is not None else f'>= {lo}'}{unit}, got {v!r}")
        return v

    def duration(self, name: str, default: float | None, maximum: float, optional: bool = False) -> Any:
        """Seconds, as a number or a Locust timespan (`30s`, `2m`, `1h30m`); 0 allowed."""
        v = self.doc.get(name, default)
        if v is None and optional:
            return None
        return parse_duration(v, self.label(name), maximum=maximum, zero_ok=True)

    def segment(self, name: str, default: str | None) -> Any:
        """A string that becomes a file or directory name (see `statebed_base.names.path_segment`)."""
        v = self.str_(name, default)
        return None if v is None else path_segment(v, self.label(name))

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        v = self.doc.get(name, default)
        if v not in choices:
            self.fail(name, f"must be one of {', '.join(choices)}, got {v!r}")
        return str(v)

    def str_(self, name: str, default: str | None) -> Any:
        v = self.doc.get(name, default)
        if v is not None and (not isinstance(v, str) or not v.strip()):
            self.fail(name, f"must be a non-empty string, got {v!r}")
        return v

    def list_(self, name: str) -> list[Any]:
        v = self.doc.get(name, [])
        if v is None:
            return []
        if not isinstance(v, list):
            self.fail(name, f"must be a list, got {_type(v)}")
        return v


def _type(v: Any) -> str:
    return "null" if v is None else type(v).__name__


_TOP = (
    "name",
    "workload",
    "format",
    "storage",
    "checkpoint_file_manager",
    "spark_features",
    "cluster",
    *_SIZES,
    "seed",
    "faults",
    "schedule",
    "verifiers",
    "proxy",
    "timeout_s",
    "max_driver_restarts",
)


def on_backend(exp: Experiment, backend: str) -> Experiment:
    """`exp` as it runs on `backend`: on Kubernetes a checkpoint is in the chart's MinIO (through
    its Toxiproxy) unless the file says `storage: local`; here the file's storage or local."""
    if backend != "k8s" or exp.storage_given:
        return exp
    out = replace(exp, storage="s3")
    for i, spec in enumerate(out.faults):  # a fault that needs local storage says so before anything starts
        check_fault(
            spec,
            out,
            f"{exp.name}: faults[{i}] (storage: s3, the cluster's default; say storage: local to keep the checkpoint on the runs volume)",
        )
    return out


def parse_experiment(doc: Any, file: str = "<experiment>") -> Experiment:
    """An `Experiment` from a parsed YAML document (see `load_experiment`)."""
    d = Experiment()
    f = _Fields({} if doc is None else doc, file, "", _TOP)
    exp = Experiment(
        name=f.segment("name", d.name),
        workload=f.choice("workload", d.workload, tuple(sorted(WORKLOADS))),
        format=get_format(f.choice("format", d.format.name, tuple(FORMATS))),
        storage=f.choice("storage", d.storage, STORAGES),
        storage_given="storage" in f.doc,
        checkpoint_file_manager=f.choice("checkpoint_file_manager", d.checkpoint_file_manager, ("rename", "abortable")),
        spark_features=_spark_features(f),
        cluster=f.choice("cluster", d.cluster, ("local", "standalone")),
        **{k: f.int_(k, getattr(d, k)) for k in _SIZES},
        seed=f.int_("seed", None, lo=0, optional=True, hi=MAX_SEED),
        verifiers=_verifiers(f),
        proxy_api=_proxy(f),
        timeout_s=f.duration("timeout_s", d.timeout_s, MAX_TIMEOUT_S),
        max_driver_restarts=f.int_("max_driver_restarts", d.max_driver_restarts, lo=0),
    )
    if exp.format.native and exp.workload not in NATIVE_WORKLOADS:
        f.fail("workload", f"native runs support {', '.join(NATIVE_WORKLOADS)} only, got {exp.workload!r}")
    if exp.checkpoint_file_manager == "abortable" and not (exp.format.plugin and exp.storage == "s3"):
        f.fail("checkpoint_file_manager", "abortable needs a plug-in format (native-v1/native-v2) and storage: s3")
    if exp.spark_features is not None and not exp.format.native:
        f.fail(
            "spark_features",
            f"are Spark's own store's: they need a native format ({', '.join(sorted(NATIVE_FORMATS))}), got {exp.format.name}",
        )
    if exp.timeout_s <= 0:
        f.fail("timeout_s", "must be > 0")
    exp.faults = [_fault(item, i, f) for i, item in enumerate(f.list_("faults"))]
    exp.schedule = _schedule(f)
    drawn = 0 if exp.schedule is None else exp.schedule.count
    if len(exp.faults) + drawn > MAX_SIZES["faults"]:
        f.fail("faults", f"{len(exp.faults)} explicit + {drawn} drawn faults: at most {MAX_SIZES['faults']} in one experiment")
    ids = [s.id for s in exp.faults]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        f.fail("faults", f"duplicate fault id {dup[0]!r}")
    for i, spec in enumerate(exp.faults):
        check_fault(spec, exp, f"{file}: faults[{i}]")
    if exp.schedule is not None:
        for kind in exp.schedule.kinds:
            check_fault(FaultSpec("r", kind), exp, f"{file}: schedule.random.kinds")
    return exp


def check_fault(spec: FaultSpec, exp: Experiment, where: str) -> None:
    """The fault kind exists and applies to this format, cluster and storage (else UsageError naming `where`)."""
    try:
        cls = fault_class(spec.kind)
    except UsageError as e:
        raise UsageError(f"{where}: kind: {e}") from None
    except ImportError as e:
        raise UsageError(f"{where}: kind: fault {spec.kind!r} is not available in this build ({e})") from None
    try:
        cls(spec).check(exp.format, exp.cluster, exp.storage)
    except NotApplicable as e:
        raise UsageError(f"{where}: {e}") from None


def _verifiers(f: _Fields) -> tuple[str, ...]:
    items = f.doc.get("verifiers", list(VERIFIERS))
    if not isinstance(items, list) or not items:
        f.fail("verifiers", f"must be a non-empty list of {', '.join(VERIFIERS)}, got {items!r}")
    for v in items:
        if v not in VERIFIERS:
            f.fail("verifiers", f"unknown verifier {v!r} (known: {', '.join(VERIFIERS)})")
    return tuple(dict.fromkeys(items))


def _spark_features(f: _Fields) -> tuple[str, ...] | None:
    """The features named on (an empty list: all off); None when the key is absent (Spark's defaults)."""
    if f.doc.get("spark_features") is None:
        return None
    items = f.list_("spark_features")
    for v in items:
        if v not in FEATURES:
            f.fail("spark_features", f"unknown feature {v!r} (known: {', '.join(FEATURES)})")
    return tuple(dict.fromkeys(items))


def _proxy(f: _Fields) -> str | None:
    doc = f.doc.get("proxy")
    if doc is None:
        return None
    p = _Fields(doc, f.file, "proxy", ("api",))
    api = p.str_("api", None)
    if api is not None and not api.startswith(("http://", "https://")):
        p.fail("api", f"must be an http(s):// URL, got {api!r}")
    return api  # type: ignore[no-any-return]


def _fault(item: Any, i: int, top: _Fields) -> FaultSpec:
    f = _Fields(item, top.file, f"faults[{i}]", ("id", "kind", "at", "for_s", "params"))
    kind = f.str_("kind", None)
    if kind is None:
        f.fail("kind", "is required")
    at = _Fields(f.doc.get("at") or {}, top.file, f"faults[{i}].at", ("batch", "after_s", "on_commit"))
    on_commit = at.doc.get("on_commit", False)
    if not isinstance(on_commit, bool):
        at.fail("on_commit", f"must be true or false, got {on_commit!r}")
    params = f.doc.get("params") or {}
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        f.fail("params", f"must be a mapping of names to values, got {params!r}")
    return FaultSpec(
        id=f.segment("id", f"f{i + 1}"),
        kind=kind,
        at=Trigger(
            batch=at.int_("batch", 1, lo=0, hi=MAX_SIZES["batches"]), after_s=at.duration("after_s", 0.0, MAX_FAULT_S), on_commit=on_commit
        ),
        for_s=f.duration("for_s", None, MAX_FAULT_S, optional=True),
        params=_params(_Fields(params, top.file, f"faults[{i}].params", tuple(params))),
    )


# Params whose type the file checks before a fault sees them (the catalogue's numeric ones):
# name -> (kind, upper bound). Any other must be a scalar; the fault's own checks do the rest.
_PARAMS: dict[str, tuple[str, float]] = {
    **{n: ("ms", MAX_PARAM_MS) for n in ("ms", "hold_ms", "slow_ms", "latency", "jitter", "timeout")},
    "partition": ("int", MAX_SIZES["partitions"] - 1),
    "to_batch": ("int", MAX_SIZES["batches"]),
    "rate": ("int", 10**9),  # storage-bandwidth's KB/s
    "wait_s": ("duration", MAX_FAULT_S),
    "toxicity": ("fraction", 1.0),
    "stream": ("stream", 0.0),  # the storage faults' direction (`toxic_fault.STREAMS`)
}


def _params(p: _Fields) -> dict[str, Any]:
    """The fault's params, type-checked where the catalogue says what they are (durations in seconds)."""
    out = dict(p.doc)
    for name, v in p.doc.items():
        kind, hi = _PARAMS.get(name, ("scalar", 0.0))
        if kind in ("ms", "int"):
            out[name] = p.int_(name, None, lo=0, hi=int(hi), unit=" (milliseconds)" if kind == "ms" else "")
        elif kind == "duration":
            out[name] = p.duration(name, None, hi)
        elif kind == "fraction" and (not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= hi):
            p.fail(name, f"must be a number in 0..1, got {v!r}")
        elif kind == "stream" and v not in STREAMS:
            p.fail(name, f"must be one of {', '.join(STREAMS)}, got {v!r}")
        elif kind == "scalar" and not (v is None or isinstance(v, (str, int, float, bool))):
            p.fail(name, f"must be a string, number or boolean, got {v!r}")
    return out


def _schedule(top: _Fields) -> RandomSchedule | None:
    doc = top.doc.get("schedule")
    if doc is None:
        return None
    s = _Fields(doc, top.file, "schedule", ("random",))
    r = _Fields(s.doc.get("random"), top.file, "schedule.random", ("count", "kinds", "batches", "after_s", "for_s"))
    kinds = r.list_("kinds")
    if not kinds or not all(isinstance(k, str) for k in kinds):
        r.fail("kinds", f"must be a non-empty list of fault kinds, got {kinds!r}")
    batches = r.doc.get("batches", [1, 1])
    if not (isinstance(batches, list) and len(batches) == 2 and all(isinstance(b, int) and not isinstance(b, bool) for b in batches)):
        r.fail("batches", f"must be [first, last] batch ids, got {batches!r}")
    if not 0 <= batches[0] <= batches[1] <= MAX_SIZES["batches"]:
        r.fail("batches", f"must be 0 <= first <= last <= {MAX_SIZES['batches']}, got {batches!r}")
    for_s = _range(r, "for_s")
    return RandomSchedule(
        count=r.int_("count", None, hi=MAX_SIZES["faults"]),
        kinds=tuple(kinds),
        batches=(batches[0], batches[1]),
        after_s=r.duration("after_s", 0.0, MAX_FAULT_S),
        for_s=for_s,
    )


def _range(r: _Fields, name: str) -> tuple[float, float] | None:
    """`[min, max]` durations (each a number or timespan), or None when absent."""
    v = r.doc.get(name)
    if v is None:
        return None
    if not (isinstance(v, list) and len(v) == 2):
        r.fail(name, f"must be [min, max] seconds, got {v!r}")
    lo, hi = (parse_duration(x, f"{r.label(name)}[{i}]", maximum=MAX_FAULT_S, zero_ok=True) for i, x in enumerate(v))
    if lo > hi:
        r.fail(name, f"must be 0 <= min <= max, got {v!r}")
    return lo, hi
