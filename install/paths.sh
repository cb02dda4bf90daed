# Where the installer puts what it builds: the one place both install.sh and check.sh read it from.
# Sourced after versions.env; STATEBED_CACHE overrides the cache root.
CACHE="${STATEBED_CACHE:-$HOME/.cache/statebed}"
BIN_DIR="$CACHE/bin"
JARS_ROOT="$CACHE/jars"
MINIO_BIN="$BIN_DIR/minio-$MINIO_VERSION"
TOXIPROXY_BIN="$BIN_DIR/toxiproxy-server-$TOXIPROXY_VERSION"
S3A_DIR="$JARS_ROOT/s3a-$HADOOP_AWS_VERSION-sdk$AWS_SDK_BUNDLE_VERSION-cloud$SPARK_HADOOP_CLOUD_VERSION"
