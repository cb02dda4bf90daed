#!/bin/sh
# What `make test` needs that pip cannot install, checked before anything starts: a missing
# one is ONE line naming it and the Debian package that provides it, never a failure minutes
# into the suite. Silent and exit 0 when everything is there.
#
#   tests/prereqs.sh PYTHON VENV_DIR
#
# - Python 3.11+ (pyspark 4.3 requires it), with its venv module when VENV_DIR does not exist
#   yet (Debian ships it separately: python3-venv);
# - Java 17+ (Spark's JVM: $JAVA_HOME/bin/java when JAVA_HOME is set, else java on PATH,
#   as pyspark looks for it), and its javac (the JVM failpoint plug-in in jvm/ is compiled
#   against pyspark's jars: the JDK, openjdk-17-jdk-headless);
# - Chromium (tests/report/ drive the reports in headless Chromium; they fail, never skip);
# - Prometheus (tests/dashboards/ evaluate the dashboard's queries on a real one; Debian's prometheus);
# - Go and Maven, only until install/install.sh has built MinIO and Toxiproxy (Go) and fetched
#   the S3A jars (Maven) into its cache: then they are never needed again.
# `make` itself is one more; Spark, Helm and Locust come from PyPI.
py=${1:-python3}
venv=${2:-.venv}
missing=""

add() {
    missing="${missing:+$missing; }$1"
}

if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    add "Python 3.11+ as '$py' (apt-get install python3, or make test PYTHON=/path/to/python3.11)"
elif [ ! -x "$venv/bin/python" ] && ! "$py" -c 'import ensurepip, venv' 2>/dev/null; then
    add "Python's venv module (apt-get install python3-venv)"
fi

java=java
[ -n "${JAVA_HOME:-}" ] && java="$JAVA_HOME/bin/java"
version=$("$java" -version 2>&1) || version=""
version=${version#*version \"}  # openjdk version "17.0.15" 2025-04-15 -> 17.0.15" ...
major=${version%%[!0-9]*}
[ "$major" = 1 ] && major=8  # "1.8.0_402": Java 8
if [ -z "$major" ] || [ "$major" -lt 17 ]; then
    add "Java 17+ as '$java' (apt-get install openjdk-17-jre-headless)"
elif ! "${java%java}javac" -version >/dev/null 2>&1; then
    add "javac as '${java%java}javac' (apt-get install openjdk-17-jdk-headless)"
fi

if ! command -v chromium >/dev/null 2>&1; then
    add "chromium (apt-get install chromium)"
fi

if ! command -v prometheus >/dev/null 2>&1; then
    add "prometheus (apt-get install prometheus)"
fi

# What install/install.sh still has to build or fetch needs its toolchain (paths: install/paths.sh).
here=${0%/*}/../install
if [ -f "$here/versions.env" ] && [ -n "${HOME:-}${STATEBED_CACHE:-}" ]; then
    . "$here/versions.env"
    . "$here/paths.sh"
    if { [ ! -x "$MINIO_BIN" ] || [ ! -x "$TOXIPROXY_BIN" ]; } && ! command -v go >/dev/null 2>&1; then
        add "go, to build MinIO and Toxiproxy once (Go 1.24+: https://go.dev/dl, or apt-get install golang-go where it is that new)"
    fi
    if [ ! -f "$S3A_DIR/SHA256SUMS" ] && ! command -v mvn >/dev/null 2>&1; then
        add "mvn, to fetch the S3A jars once from Maven Central (apt-get install maven)"
    fi
fi

if [ -n "$missing" ]; then
    echo "make test needs: $missing" >&2
    exit 1
fi
