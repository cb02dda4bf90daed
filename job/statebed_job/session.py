"""Building the SparkSession for a run: local mode or a standalone cluster, one place for every conf."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from statebed_model.rundir import RunDir
from statebed_store import failpoints

from .config import SPECULATION_CONF, JobOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["NATIVE_CONF", "build_session", "failpoint_control", "spark_conf"]

# Spark's own RocksDB store with checkpoint format V2 (native mode).
NATIVE_CONF = {
    "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
    "spark.sql.streaming.stateStore.maintenanceInterval": "2s",
}

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
    return Path(os.environ.get(failpoints.CONTROL_ENV) or run.root / "failpoints" / "control.json").absolute()


def spark_conf(opts: JobOptions, run: RunDir, master: str) -> dict[str, str]:
    scratch = run.root / "spark-local"
    quiet = f"-Dlog4j2.configurationFile=file:{LOG4J}"
    conf = {
        "spark.master": master,
        "spark.app.name": f"statebed-{opts.workload}-{opts.mode}",
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
        conf.update(
            {
                "spark.executor.memory": "1g",
                "spark.executor.cores": "1",
                "spark.task.maxFailures": "4",
                "spark.locality.wait": "200ms",  # Spark's 3 s default stalls every shuffle stage on 1-core executors
            }
        )
    if opts.mode == "native":
        conf.update(NATIVE_CONF)
    for name in _FORWARDED_ENV:
        if os.environ.get(name):
            conf[f"spark.executorEnv.{name}"] = os.environ[name]
    conf[f"spark.executorEnv.{failpoints.CONTROL_ENV}"] = str(failpoint_control(run))
    conf.update(opts.extra_conf)
    return conf


def build_session(opts: JobOptions, run: RunDir, master: str) -> SparkSession:
    """A session for the run (PYSPARK_PYTHON pinned to this interpreter, scratch under the run dir)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    run.events.mkdir(parents=True, exist_ok=True)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for k, v in spark_conf(opts, run, master).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("STATEBED_SPARK_LOG_LEVEL", "ERROR"))
    return spark
