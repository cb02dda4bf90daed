#!/bin/bash
# The image's entrypoint. Spark on Kubernetes starts every executor container with the single
# argument `executor` and hands it its settings as SPARK_* variables (Spark's
# BasicExecutorFeatureStep); the image must turn that into the executor JVM. apache/spark's images
# do it in /opt/entrypoint.sh; this image is built on Debian with pyspark from PyPI, which ships
# no entrypoint, so this is statebed's own. tini is PID 1 (it reaps the Python workers), the JVM
# its child: the chaos backend's targets (targets/k8s.py EXECUTOR_MAINS) find it by main class.
# Anything else runs as given (the chart's containers set their own command).
set -euo pipefail

if [ "${1:-}" != executor ]; then
  exec "$@"
fi
shift
: "${SPARK_HOME:?}" "${JAVA_HOME:?}" "${SPARK_EXECUTOR_MEMORY:?}" "${SPARK_DRIVER_URL:?}" "${SPARK_EXECUTOR_ID:?}"
classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*${SPARK_CLASSPATH:+:$SPARK_CLASSPATH}:$PWD"
java_opts=()
for name in "${!SPARK_JAVA_OPT_@}"; do java_opts+=("${!name}"); done
exec /usr/bin/tini -s -- "$JAVA_HOME/bin/java" "${java_opts[@]}" \
  -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" -cp "$classpath" \
  org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
  --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" --cores "${SPARK_EXECUTOR_CORES:-1}" \
  --app-id "${SPARK_APPLICATION_ID:-}" --hostname "${SPARK_EXECUTOR_POD_IP:-127.0.0.1}" \
  --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" --podName "${SPARK_EXECUTOR_POD_NAME:-}" "$@"
