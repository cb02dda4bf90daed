# syntax=docker/dockerfile:1
# statebed's image: Apache Spark 4.3.0 with Python 3, statebed installed with its pinned
# dependencies, and the S3A connector for native mode. The entrypoint is the base image's
# (tini as PID 1, then Spark's driver/executor launcher), unchanged; it runs as uid 185.
#
# BASE_IMAGE pins the base. DIGEST-UNVERIFIED: no published digest of apache/spark:4.3.0-python3
# could be verified from the machine this was written on, so the default is the tag alone.
# Pin it with --build-arg BASE_IMAGE=apache/spark:4.3.0-python3@sha256:<digest>; the nightly
# prints the digest it resolved. `make image-smoke` passes a locally built base (Java 17 +
# Python + pyspark 4.3.0) here instead.
ARG BASE_IMAGE=apache/spark:4.3.0-python3
FROM ${BASE_IMAGE}

# Spark 4.3.0 bundles hadoop-client 3.5.0 (pyspark 4.3.0's jars/hadoop-client-api-3.5.0.jar);
# hadoop-aws must be the same version, with the AWS SDK v2 bundle that hadoop-aws 3.5.0 declares.
ARG HADOOP_AWS_VERSION=3.5.0
ARG AWS_SDK_BUNDLE_VERSION=2.35.4
ARG MAVEN=https://repo1.maven.org/maven2

USER root
RUN set -eux; \
    python3 -c 'import sys; assert sys.version_info >= (3, 11), f"statebed needs Python 3.11+, the base has {sys.version}"'; \
    spark_home="${SPARK_HOME:-/opt/spark}"; \
    if [ -d "$spark_home/jars" ]; then \
      cd "$spark_home/jars"; \
      for path in "org/apache/hadoop/hadoop-aws/${HADOOP_AWS_VERSION}/hadoop-aws-${HADOOP_AWS_VERSION}.jar" \
                  "software/amazon/awssdk/bundle/${AWS_SDK_BUNDLE_VERSION}/bundle-${AWS_SDK_BUNDLE_VERSION}.jar"; do \
        jar="$(basename "$path")"; \
        python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$MAVEN/$path" "$jar"; \
        python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$MAVEN/$path.sha1" "/tmp/$jar.sha1"; \
        echo "$(cut -c1-40 "/tmp/$jar.sha1")  $jar" | sha1sum -c -; \
        rm "/tmp/$jar.sha1"; \
      done; \
    else \
      echo "no $spark_home/jars (not an apache/spark base): S3A jars not added, native mode cannot use s3a://"; \
    fi

# statebed and its pinned dependencies (pyproject.toml), installed from the source tree.
COPY pyproject.toml README.md /opt/statebed/src/
COPY store /opt/statebed/src/store
COPY model /opt/statebed/src/model
COPY job /opt/statebed/src/job
COPY chaos /opt/statebed/src/chaos
COPY loadtests /opt/statebed/src/loadtests
COPY report /opt/statebed/src/report
COPY cli /opt/statebed/src/cli
COPY examples /opt/statebed/examples
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
RUN set -eux; \
    python3 -m pip install /opt/statebed/src; \
    printf '%s\n' '"""spark-submit entry: the statebed command (spark-submit needs a file)."""' \
        'import sys' 'from statebed_cli.main import main' 'sys.exit(main())' > /opt/statebed/statebed.py; \
    statebed --help > /dev/null; \
    mkdir -p /runs && chown 185:185 /runs

USER 185
