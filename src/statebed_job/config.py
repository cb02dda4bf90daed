"""The job's options in one place, with defaults that run on a laptop in under a minute.

Validation lives here, once: a bad value is a `FieldError` naming the field as this class spells
it (`snapshot_interval`); the CLI maps it to its flag (`--snapshot-interval`, `flag_of`), an
experiment file to its key. Each field `statebed run` sets carries its `Flag` (name, help,
choices): the one table the CLI's parser, its error lines and the report's reproduce line derive from."""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from statebed_base.errors import FieldError
from statebed_model.workloads import WORKLOADS
from statebed_store.config import MAX_SNAPSHOT_INTERVAL
from statebed_store.formats import FORMATS, RUN_FORMATS, V2, Format, from_run_json, to_run_json
from statebed_store.location import is_remote

__all__ = ["CONTINUOUS", "SPECULATION_CONF", "Flag", "JobOptions", "flag_of", "run_flags"]

ClusterKind = Literal["local", "standalone"]

# Speculation tuned so a task that stalls gets a copy within seconds (Spark's defaults
# wait for 75% of tasks and a 1.5x median, checked every 100 ms).
SPECULATION_CONF = {
    "spark.speculation": "true",
    "spark.speculation.interval": "200ms",
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.minTaskRuntime": "500ms",
}


FlagKind = Literal["text", "choice", "count", "seed", "seconds", "duration", "path", "conf", "format"]


@dataclass(frozen=True)
class Flag:
    """How `statebed run` sets one JobOptions field: the one table of run options.

    The CLI's parser (`statebed_cli.commands.run`), its error lines (`flag_of`: a FieldError
    on `snapshot_interval` is reported as `--snapshot-interval`) and the report's reproduce line
    (`statebed_report.reproduce.run_argv`) all derive from it. `help` may name `{default}` (the
    field's default) and `{workloads}` (the known workloads, described); `kind` says how the
    CLI parses the text (the job itself knows no flag: it validates by field name)."""

    name: str
    help: str
    kind: FlagKind = "text"
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    group: str | None = None  # an argument group's title; None: the command's own options


CONTINUOUS = "continuous ingest (--source ingest): batches over what keeps landing until one condition holds, then drain"


@dataclass
class JobOptions:
    workload: str = field(
        default="count", metadata={"flag": Flag("--workload", "{workloads} (default: {default})", "choice", tuple(sorted(WORKLOADS)))}
    )
    batches: int = field(default=6, metadata={"flag": Flag("--batches", "micro-batches in total (default: {default})", "count")})
    partitions: int = field(default=3, metadata={"flag": Flag("--partitions", "state partitions (default: {default})", "count")})
    rows_per_batch: int = field(
        default=20_000, metadata={"flag": Flag("--rows-per-batch", "records per batch (default: {default})", "count")}
    )
    keyspace: int = field(default=5_000, metadata={"flag": Flag("--keyspace", "distinct keys (default: {default})", "count")})
    format: Format = field(  # a name given here is parsed on construction
        default=V2,
        metadata={
            "flag": Flag(
                "--format",
                "statebed checkpoint format v1/v2 (default: v2; v1 is the positive control), or Spark's own RocksDB store "
                "with checkpointFormatVersion 1/2 (native-v1/native-v2)",
                "format",
                RUN_FORMATS,
            )
        },
    )
    cluster: ClusterKind = field(
        default="local",
        metadata={
            "flag": Flag(
                "--cluster", "local[2], or a standalone cluster started for the run (default: {default})", "choice", ("local", "standalone")
            )
        },
    )
    workers: int = field(
        default=2, metadata={"flag": Flag("--workers", "standalone workers, one per loopback address (default: {default})", "count")}
    )  # standalone only
    # relative to the run directory, or a path / s3:// URL
    checkpoint: str = field(
        default="checkpoint",
        metadata={"flag": Flag("--checkpoint", "statebed checkpoint: a directory or s3://bucket/prefix (default: <run-dir>/checkpoint)")},
    )
    snapshot_interval: int = field(
        default=10, metadata={"flag": Flag("--snapshot-interval", "versions between snapshots (default: {default})", "count")}
    )
    # hedged create-only uploads: off | on | adaptive (StoreOptions.hedge)
    hedge: str = field(
        default="off",
        metadata={
            "flag": Flag(
                "--hedge",
                "hedged create-only uploads of changelogs and commit-log entries (default: off; see StoreOptions.hedge)",
                "choice",
                ("off", "on", "adaptive"),
            )
        },
    )
    # Make attempt 0 of one task slow but alive after its commit ("batch:partition:ms"):
    # Spark then launches a speculative copy and both attempts write files.
    slow_task: str | None = field(
        default=None,
        metadata={
            "flag": Flag(
                "--slow-task", "make attempt 0 of batch B, partition P sleep MS after its commit (provokes speculation)", metavar="B:P:MS"
            )
        },
    )
    # "ingest": read what has landed in `landing` (see statebed_model.sources)
    source: str = field(
        default="generated",
        metadata={
            "flag": Flag(
                "--source",
                "generated: deterministic records, one file per batch (default); ingest: what has landed in --landing",
                "choice",
                ("generated", "ingest"),
            )
        },
    )
    # the ingest landing area (a local directory: Spark reads its data/)
    landing: str | None = field(
        default=None, metadata={"flag": Flag("--landing", "the ingest landing area (data/ and acks/) for --source ingest", metavar="DIR")}
    )
    # A continuous ingest run (any stop condition set): micro-batches every `trigger_ms` over
    # whatever has landed, until `duration_s` passed, `until_records` were committed or
    # `stop_file` exists; then it drains what has landed and stops.
    duration_s: float | None = field(
        default=None, metadata={"flag": Flag("--duration", "stop after S: 30, 30s, 2m, 1h30m", "duration", metavar="S", group=CONTINUOUS)}
    )
    until_records: int | None = field(
        default=None,
        metadata={"flag": Flag("--until-records", "stop once N records are committed", "count", metavar="N", group=CONTINUOUS)},
    )
    stop_file: str | None = field(
        default=None, metadata={"flag": Flag("--stop-file", "stop once PATH exists", "path", metavar="PATH", group=CONTINUOUS)}
    )
    trigger_ms: int = field(
        default=500,
        metadata={"flag": Flag("--trigger-ms", "a micro-batch every MS (default: {default})", "count", metavar="MS", group=CONTINUOUS)},
    )
    extra_conf: dict[str, str] = field(
        default_factory=dict,
        metadata={"flag": Flag("--conf", "extra Spark configuration (repeatable)", "conf", metavar="KEY=VALUE")},
    )
    # Every random choice of a task derives from (seed, batch, partition, attempt), so a run
    # replays; None draws one (saved in run.json). Checkpoint ids stay random: they must be unique.
    seed: int | None = field(
        default=None,
        metadata={
            "flag": Flag(
                "--seed",
                "seed of every task's random choices, from (seed, batch, partition, attempt): a run replays (default: drawn, saved in run.json)",
                "seed",
            )
        },
    )
    # Maintenance (`maintenance.py`): committed versions each store keeps loadable (Spark's
    # minBatchesToRetain, 100), and seconds between passes (Spark's maintenanceInterval, 60 s;
    # 0: a pass after every committed batch).
    retain: int = field(
        default=100,
        metadata={
            "flag": Flag(
                "--retain",
                "committed versions maintenance keeps loadable per store; native: Spark's minBatchesToRetain (default: {default})",
                "count",
                metavar="N",
            )
        },
    )
    maintenance_interval_s: float = field(
        default=60.0,
        metadata={
            "flag": Flag(
                "--maintenance-interval",
                "seconds between maintenance passes; 0: after every committed batch (default: {default:g})",
                "seconds",
                metavar="S",
            )
        },
    )
    # Seconds an SST no kept snapshot names is left alone (an upload in flight publishes its SSTs
    # before the zip that names them): StoreOptions.sst_orphan_grace_s.
    sst_grace_s: float = field(
        default=600.0,
        metadata={
            "flag": Flag(
                "--sst-grace",
                "seconds maintenance leaves an SST no kept snapshot names (an upload may be in flight; default: {default:g})",
                "seconds",
                metavar="S",
            )
        },
    )
    # Which of Spark's checkpoint file managers the plug-in wraps (native-v1/native-v2): "rename"
    # (the default FileContext one: temp file, then rename = copy + delete on S3) or "abortable"
    # (spark-hadoop-cloud's, which Spark's docs recommend on S3: written in place; s3:// only).
    checkpoint_file_manager: str = field(
        default="rename",
        metadata={
            "flag": Flag(
                "--checkpoint-file-manager",
                "native-v1/native-v2: the Spark checkpoint file manager the plug-in wraps: rename (Spark's default) or, "
                "on an s3:// checkpoint, abortable (spark-hadoop-cloud's, written in place; default: rename)",
                "choice",
                ("rename", "abortable"),
            )
        },
    )

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise FieldError("format", f"must be a format statebed knows ({', '.join(FORMATS)}), got {self.format!r}")
        object.__setattr__(self, "format", FORMATS[self.format])  # the Format of that name
        self._check_choices()
        for name in ("batches", "partitions", "rows_per_batch", "keyspace", "workers", "snapshot_interval"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise FieldError(name, f"must be an integer >= 1, got {value!r}")
        if self.snapshot_interval > MAX_SNAPSHOT_INTERVAL:
            raise FieldError(
                "snapshot_interval", f"must be <= {MAX_SNAPSHOT_INTERVAL} (a lineage must fit 64 KiB), got {self.snapshot_interval}"
            )
        if self.workers > 20:
            raise FieldError("workers", f"must be 1..20, got {self.workers}")
        for name in ("workload", "checkpoint"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise FieldError(name, f"must be a non-empty string, got {getattr(self, name)!r}")
        if not isinstance(self.extra_conf, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in self.extra_conf.items()):
            raise FieldError("extra_conf", f"must be KEY=VALUE strings, got {self.extra_conf!r}")
        if self.slow_task is not None:
            self.slow_task_spec()
        if self.seed is None:
            self.seed = secrets.randbits(32)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**63:
            raise FieldError("seed", f"must be an integer in 0..2^63-1, got {self.seed!r}")
        self._check_maintenance()
        if (self.source == "ingest") != (self.landing is not None):
            raise FieldError("landing", "is needed by the ingest source, and only by it")
        self._check_continuous()
        self._check_file_manager()

    def _check_choices(self) -> None:
        """A field offered as a choice (its Flag's `choices`) holds one of them. The workload is
        checked where it is looked up (the known workloads, described)."""
        for f in fields(self):
            flag = f.metadata.get("flag")
            if flag is None or flag.kind != "choice" or f.name == "workload":
                continue
            value = getattr(self, f.name)
            if value not in flag.choices:
                *rest, last = flag.choices
                raise FieldError(f.name, f"must be {', '.join(rest)} or {last}, got {value!r}")

    def _check_maintenance(self) -> None:
        if not isinstance(self.retain, int) or isinstance(self.retain, bool) or not 1 <= self.retain <= 10**9:
            raise FieldError("retain", f"must be an integer in 1..1000000000, got {self.retain!r}")
        i = self.maintenance_interval_s
        if not isinstance(i, int | float) or isinstance(i, bool) or not 0 <= i <= 86_400:
            raise FieldError("maintenance_interval_s", f"must be 0..86400 seconds, got {i!r}")
        g = self.sst_grace_s
        if not isinstance(g, int | float) or isinstance(g, bool) or not 0 <= g <= 7 * 86_400:
            raise FieldError("sst_grace_s", f"must be 0..604800 seconds, got {g!r}")

    def _check_file_manager(self) -> None:
        if self.checkpoint_file_manager == "abortable" and not (self.format.plugin and is_remote(self.checkpoint)):
            plugin = ", ".join(f.name for f in FORMATS.values() if f.plugin)
            raise FieldError(
                "checkpoint_file_manager", f"abortable needs Spark's own store with the plug-in ({plugin}) on an s3:// checkpoint"
            )

    def _check_continuous(self) -> None:
        if self.continuous and self.source != "ingest":
            raise FieldError("source", "must be ingest for a stop condition (a duration, a record count or a stop file)")
        d, n = self.duration_s, self.until_records
        if d is not None and (not isinstance(d, int | float) or isinstance(d, bool) or not 0 < d < 1e7):
            raise FieldError("duration_s", f"must be a number of seconds > 0, got {d!r}")
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise FieldError("until_records", f"must be an integer >= 1, got {n!r}")
        if not isinstance(self.trigger_ms, int) or isinstance(self.trigger_ms, bool) or not 0 < self.trigger_ms <= 3_600_000:
            raise FieldError("trigger_ms", f"must be 1..3600000, got {self.trigger_ms!r}")

    @property
    def continuous(self) -> bool:
        """Batches over what keeps landing until a stop condition (else: the files there at start)."""
        return self.duration_s is not None or self.until_records is not None or self.stop_file is not None

    @property
    def native(self) -> bool:
        """On Spark's own RocksDB store rather than statebed's (`Format.native`)."""
        return self.format.native

    def slow_task_spec(self) -> tuple[int, int, int] | None:
        if self.slow_task is None:
            return None
        try:
            b, p, ms = (int(x) for x in str(self.slow_task).split(":"))
            if min(b, p, ms) < 0:
                raise ValueError
        except ValueError:
            raise FieldError("slow_task", f"wants BATCH:PARTITION:MILLISECONDS, got {self.slow_task!r}") from None
        return b, p, ms

    def to_json(self) -> dict[str, Any]:
        """As run.json's `params` keeps them (the format under `mode`)."""
        return to_run_json(asdict(self))

    @classmethod
    def from_json(cls, params: dict[str, Any]) -> JobOptions:
        """The options run.json's `params` hold (`to_json`'s inverse; FieldError names a bad field)."""
        return cls(**from_run_json(params))


def run_flags() -> dict[str, Flag]:
    """JobOptions field -> its `statebed run` flag, in the order the fields are declared."""
    return {f.name: f.metadata["flag"] for f in fields(JobOptions) if "flag" in f.metadata}


def flag_of(name: str) -> str:
    """The `statebed run` flag of a JobOptions field (the field itself when no flag sets it)."""
    flag = run_flags().get(name)
    return name if flag is None else flag.name
