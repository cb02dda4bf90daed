# syntax=docker/dockerfile:1
# statebed's image: Debian bookworm with its Python 3.11 and OpenJDK 17, pyspark 4.3.0 from PyPI
# (it carries Spark's jars and bin/), statebed installed with its pinned dependencies, the S3A
# connector for native mode and the JVM failpoint plug-in's jar (native-v1/native-v2). Non-root
# (uid 185, as apache/spark's images); the entrypoint (k8s/entrypoint.sh) starts
# Spark-on-Kubernetes executors, everything else runs as given.
#
# Why not apache/spark:4.3.0-python3: statebed and pyspark 4.3 need Python >= 3.11, and
# apache/spark's 4.x images (apache/spark-docker, e.g. 4.0.0/scala2.13-java17-ubuntu) are
# `FROM eclipse-temurin:17-jammy` (Ubuntu 22.04) with `apt-get install python3`, i.e. Python 3.10.
# Debian bookworm's python3 is 3.11 and its openjdk-17-jre-headless is the Java Spark 4 supports.
#
# BASE_IMAGE pins the base. DIGEST-UNVERIFIED: no published digest of debian:bookworm-slim could
# be verified from the machine this was written on, so the default is the tag alone. Pin it with
# --build-arg BASE_IMAGE=debian:bookworm-slim@sha256:<digest>; the nightly prints the digest it
# resolved. `make image-smoke` passes a debootstrapped bookworm (k8s/smoke-base.sh) instead.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

# Debian's packages: Java 17, Python 3.11 + pip, tini (PID 1 of executor pods), procps, CAs.
ARG APT_PACKAGES="openjdk-17-jre-headless python3 python3-pip tini procps ca-certificates"
# Spark 4.3.0 bundles hadoop-client 3.5.0 (pyspark 4.3.0's jars/hadoop-client-api-3.5.0.jar);
# hadoop-aws must be the same version, with the AWS SDK v2 bundle that hadoop-aws 3.5.0 declares.
# S3A_JARS=false leaves them out (where Maven Central cannot be reached: `make image-smoke`).
ARG HADOOP_AWS_VERSION=3.5.0
ARG AWS_SDK_BUNDLE_VERSION=2.35.4
ARG MAVEN=https://repo1.maven.org/maven2
ARG S3A_JARS=true

USER root
ENV DEBIAN_FRONTEND=noninteractive
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends ${APT_PACKAGES}; \
    rm -rf /var/lib/apt/lists/*; \
    python3 -c 'import sys; assert sys.version_info >= (3, 11), f"statebed needs Python 3.11+, the base has {sys.version}"'; \
    getent group 185 > /dev/null || groupadd --gid 185 spark; \
    getent passwd 185 > /dev/null || useradd --uid 185 --gid 185 --create-home --shell /bin/bash spark

# statebed and its pinned dependencies (pyproject.toml, pyspark among them), from the source tree.
COPY pyproject.toml README.md /opt/statebed/src/
COPY src /opt/statebed/src/src
COPY examples /opt/statebed/examples
COPY loadtests/locustfile.py /opt/statebed/locustfile.py
COPY k8s/entrypoint.sh /opt/entrypoint.sh
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
RUN set -eux; \
    python3 -m pip install /opt/statebed/src; \
    ln -sfn "$(python3 -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark; \
    ln -sfn "$(dirname "$(dirname "$(readlink -f /usr/bin/java)")")" /opt/java; \
    printf '%s\n' '"""spark-submit entry: the statebed command (spark-submit needs a file)."""' \
        'import sys' 'from statebed_cli.main import main' 'sys.exit(main())' > /opt/statebed/statebed.py; \
    statebed --help > /dev/null; \
    mkdir -p /runs && chown 185:185 /runs
ENV SPARK_HOME=/opt/spark JAVA_HOME=/opt/java PYSPARK_PYTHON=python3

RUN set -eux; \
    if [ "$S3A_JARS" = true ]; then \
      cd "$SPARK_HOME/jars"; \
      for path in "org/apache/hadoop/hadoop-aws/${HADOOP_AWS_VERSION}/hadoop-aws-${HADOOP_AWS_VERSION}.jar" \
                  "software/amazon/awssdk/bundle/${AWS_SDK_BUNDLE_VERSION}/bundle-${AWS_SDK_BUNDLE_VERSION}.jar"; do \
        jar="$(basename "$path")"; \
        python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$MAVEN/$path" "$jar"; \
        python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$MAVEN/$path.sha1" "/tmp/$jar.sha1"; \
        echo "$(cut -c1-40 "/tmp/$jar.sha1")  $jar" | sha1sum -c -; \
        rm "/tmp/$jar.sha1"; \
      done; \
    else \
      echo "S3A_JARS=$S3A_JARS: hadoop-aws not added, native mode cannot use s3a://"; \
    fi

# The JVM failpoint plug-in (jvm/src; docs/native-failpoints.md), which native-v1/native-v2 runs load:
# compiled by statebed's own build (statebed_job.jvm_plugin: javac against the installed pyspark's
# jars) into a fixed path that STATEBED_JVM_JAR names, so runs use it instead of compiling (an
# installed statebed has no jvm/ and the image no javac). The JDK is installed for this step only
# and purged in the same layer; the JRE installed above stays. After the pip and S3A layers, so a
# change to the Java sources rebuilds only this one.
ARG JDK_PACKAGE=openjdk-17-jdk-headless
COPY jvm/src /opt/statebed/jvm/src
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends ${JDK_PACKAGE}; \
    python3 -m statebed_job.jvm_plugin --sources /opt/statebed/jvm/src --jar /opt/statebed/statebed-jvm.jar; \
    apt-get purge -y --auto-remove ${JDK_PACKAGE}; \
    rm -rf /var/lib/apt/lists/*; \
    test ! -e "$JAVA_HOME/bin/javac"; \
    java -version
ENV STATEBED_JVM_JAR=/opt/statebed/statebed-jvm.jar

WORKDIR /tmp
USER 185
ENTRYPOINT ["/opt/entrypoint.sh"]
