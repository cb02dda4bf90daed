"""Building the SparkSession for a run: local mode or a standalone cluster, one place for every conf."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from statebed_model.experimentdir import control_file
from statebed_model.rundir import RunDir
from statebed_store import S3Settings, failpoints
from statebed_store.location import is_remote
from statebed_store.storage.request_log import REQUEST_LOG_ENV

from .config import SPECULATION_CONF, JobOptions
from .jvm_plugin import plugin_confs  # also registers the plug-in's failpoints (native.*)
from .jvm_startup import java_options
from .s3a import s3a_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "CHECKPOINT_FORMAT_CONF",
    "NATIVE_CONF",
    "RETAIN_CONF",
    "STANDALONE_SIZING",
    "build_session",
    "failpoint_control",
    "native_conf",
    "native_extra_conf",
    "spark_conf",
    "submitted_conf",
]

# Spark's own RocksDB store (native mode), checkpoint format V2; native_conf() sets the version.
# Spark's maintenance runs every 2 s (not its 60 s default): with changelog checkpointing a zip
# is uploaded only by maintenance, and a run of a few batches needs one (statebed's reader of
# transformWithState state reads column-family ids from a zip).
NATIVE_CONF = {
    "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
    "spark.sql.streaming.stateStore.maintenanceInterval": "2s",
}
CHECKPOINT_FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"
RETAIN_CONF = "spark.sql.streaming.minBatchesToRetain"


def native_conf(opts: JobOptions, run: RunDir) -> dict[str, str]:
    """Spark's store in the run's checkpoint format version, keeping `--retain` batches (Spark's
    maintenance and its offset / commit logs), plus `native_extra_conf`'s settings."""
    return {
        **NATIVE_CONF,
        CHECKPOINT_FORMAT_CONF: str(opts.format.version),
        RETAIN_CONF: str(opts.retain),
        **native_extra_conf(opts, run),
    }


def native_extra_conf(opts: JobOptions, run: RunDir) -> dict[str, str]:
    """What else a native session loads: in native-v1 / native-v2 the JVM failpoint plug-in
    (`spark.jars`, `spark.sql.streaming.checkpointFileManagerClass`, ...), following the run's
    failpoint control file; a pass-through while nothing is armed. On an s3:// checkpoint the S3A
    twins load too, and `checkpoint_file_manager` picks the Spark manager the plug-in wraps.
    `native` runs as before, without it."""
    if not opts.format.plugin:
        return {}
    return plugin_confs(failpoint_control(run), s3a=is_remote(opts.checkpoint), manager=opts.checkpoint_file_manager)


# Environment the executors' Python workers need (statebed's own settings, S3 credentials).
_FORWARDED_ENV = (
    "STATEBED_LOG_LEVEL",
    "STATEBED_LOG_FORMAT",
    "STATEBED_FAILPOINTS",
    "STATEBED_FAILPOINTS_SEED",
    "STATEBED_S3_ENDPOINT",
    "STATEBED_S3_CONDITIONAL_PUT",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
)


LOG4J = Path(__file__).with_name("log4j2.properties")


def failpoint_control(run: RunDir) -> Path:
    """The run's failpoint control file (STATEBED_FAILPOINTS_CONTROL, else `<run>/failpoints/control.json`):
    every process of the run follows it, so failpoints can be armed mid-run."""
    return Path(os.environ.get(failpoints.CONTROL_ENV) or control_file(run.root)).absolute()


# Executor sizing for the standalone cluster statebed starts. A value spark-submit was given
# (spark-defaults.conf, --conf: the Kubernetes chart sizes executors so) or `--conf` wins over it.
STANDALONE_SIZING = {"spark.executor.memory": "1g", "spark.executor.cores": "1"}


def spark_conf(opts: JobOptions, run: RunDir, master: str, submitted: Collection[str] = (), s3: S3Settings | None = None) -> dict[str, str]:
    scratch = run.root / "spark-local"
    quiet = f"-Dlog4j2.configurationFile=file:{LOG4J}"
    conf = {
        "spark.master": master,
        "spark.app.name": f"statebed-{opts.workload}-{opts.format}",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.local.dir": str(scratch),
        "spark.sql.warehouse.dir": str(scratch / "warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={scratch / 'derby'} {quiet}",
        "spark.executor.extraJavaOptions": quiet,
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": str(run.events),
        "spark.eventLog.compress": "false",  # plain JSON lines: tests and reports read task attempts from it
        "spark.eventLog.rolling.enabled": "false",
        "spark.python.worker.reuse": "true",
        "spark.sql.shuffle.partitions": str(opts.partitions),
        "spark.sql.adaptive.enabled": "false",  # keep exactly `partitions` state tasks
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": str(opts.snapshot_interval),
        "spark.driver.maxResultSize": "2g",
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
    }
    if opts.cluster == "standalone":
        conf.update(SPECULATION_CONF)
        conf.update({k: v for k, v in STANDALONE_SIZING.items() if k not in submitted})
        conf.update(
            {
                "spark.task.maxFailures": "4",
                "spark.locality.wait": "200ms",  # Spark's 3 s default stalls every shuffle stage on 1-core executors
            }
        )
    if opts.native:
        conf.update(native_conf(opts, run))
        if is_remote(opts.checkpoint):  # Spark's own store in a bucket: S3A on the class path, statebed's S3 settings as S3A's
            conf.update(s3a_conf(s3 or S3Settings.from_env(), conf.get("spark.driver.extraClassPath", "")))
    for name in _FORWARDED_ENV:
        if os.environ.get(name):
            conf[f"spark.executorEnv.{name}"] = os.environ[name]
    conf[f"spark.executorEnv.{failpoints.CONTROL_ENV}"] = str(failpoint_control(run))
    conf[f"spark.executorEnv.{REQUEST_LOG_ENV}"] = str(run.s3_requests)
    conf.update(opts.extra_conf)
    return _with_startup_options(conf)


def _with_startup_options(conf: dict[str, str]) -> dict[str, str]:
    """The driver's and executors' JVM options plus `jvm_startup`'s, for the classpath each starts with."""
    for role in ("driver", "executor"):
        extra = java_options(conf.get(f"spark.{role}.extraClassPath", ""))
        key = f"spark.{role}.extraJavaOptions"
        if extra:
            conf[key] = f"{conf.get(key, '')} {extra}".strip()
    return conf


def submitted_conf() -> frozenset[str]:
    """The Spark settings given outside statebed: under spark-submit (its JVM is up, PYSPARK_GATEWAY_PORT)
    those it holds (spark-defaults.conf, --conf); else the keys of the spark-defaults.conf that the JVM
    statebed launches will read (SPARK_CONF_DIR, else $SPARK_HOME/conf), e.g. the chaos controller's drivers."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        conf_dir = os.environ.get("SPARK_CONF_DIR") or (os.environ["SPARK_HOME"] + "/conf" if os.environ.get("SPARK_HOME") else None)
        path = Path(conf_dir) / "spark-defaults.conf" if conf_dir else None
        if path is None or not path.is_file():
            return frozenset()
        lines = (line.strip() for line in path.read_text(errors="replace").splitlines())
        return frozenset(re.split(r"[\s=:]", line, maxsplit=1)[0] for line in lines if line and not line.startswith(("#", "!")))
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM; launches nothing
    return frozenset(k for k, _ in SparkConf().getAll())


def build_session(opts: JobOptions, run: RunDir, master: str, s3: S3Settings | None = None) -> SparkSession:
    """A session for the run (PYSPARK_PYTHON pinned to this interpreter, scratch under the run dir)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ[REQUEST_LOG_ENV] = str(run.s3_requests)  # the driver's and local[N] workers' S3 requests
    run.events.mkdir(parents=True, exist_ok=True)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for k, v in spark_conf(opts, run, master, submitted_conf(), s3).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("STATEBED_SPARK_LOG_LEVEL", "ERROR"))
    return spark
