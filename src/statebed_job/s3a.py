"""Spark's own store on S3: what a native session needs to keep its checkpoint in a bucket.

pyspark ships no S3 connector; `install/install.sh s3a` fetches hadoop-aws (for pyspark's
Hadoop 3.5), the AWS SDK bundle and their runtime dependencies into one directory, which goes on
the driver's and the executors' class path (`extraClassPath`: the bundle is hundreds of MB, never
copied to executors by `spark.jars`). The store's own settings (`S3Settings`: endpoint, keys,
timeouts) become S3A's, path-style for MinIO, with retries and timeouts as short as statebed's
own client so a storage fault surfaces in seconds. statebed names a bucket `s3://`; Hadoop's
connector is `s3a://` (`hadoop_url`).
"""

from __future__ import annotations

import math

from statebed_base.installed import installed
from statebed_store import S3Settings
from statebed_store.location import parse_location

__all__ = ["hadoop_url", "s3a_conf"]


def hadoop_url(location: str) -> str:
    """A checkpoint location as Spark's Hadoop file systems name it (`s3://b/p` -> `s3a://b/p`)."""
    return parse_location(location).hadoop_url


def s3a_conf(settings: S3Settings, class_path: str = "") -> dict[str, str]:
    """Spark confs for S3A against `settings`' endpoint; `class_path`: what the session already
    puts on the class path (the plug-in's jar), kept first."""
    jars = f"{installed('s3a')}/*"
    path = f"{class_path}:{jars}" if class_path else jars
    hadoop = {
        "fs.s3a.endpoint": settings.endpoint,
        "fs.s3a.endpoint.region": settings.region or "us-east-1",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": str(settings.endpoint.startswith("https://")).lower(),
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "fs.s3a.access.key": settings.access_key,
        "fs.s3a.secret.key": settings.secret_key,
        "fs.s3a.connection.establish.timeout": f"{math.ceil(settings.connect_timeout_s * 1000)}ms",
        "fs.s3a.connection.timeout": f"{math.ceil(settings.read_timeout_s * 1000)}ms",
        "fs.s3a.attempts.maximum": str(settings.retries),
        "fs.s3a.retry.limit": str(settings.retries),
        "fs.s3a.retry.interval": "200ms",
        "fs.s3a.connection.request.timeout": f"{math.ceil(settings.deadline_s * 1000)}ms",
    }
    return {
        "spark.driver.extraClassPath": path,
        "spark.executor.extraClassPath": path,
        **{f"spark.hadoop.{k}": v for k, v in hadoop.items()},
    }
