#!/usr/bin/env bash
# statebed: the ONE installer for the real storage stack.
#
#   install/install.sh [minio|toxiproxy|s3a|all]      (default: all)
#   install/install.sh --where minio|toxiproxy|s3a    its path (no check, no network), or exit 1
#
# Builds/fetches, pinned by install/versions.env:
#   minio      <cache>/bin/minio-<MINIO_VERSION>              go install github.com/minio/minio@<ver>
#   toxiproxy  <cache>/bin/toxiproxy-server-<TOXIPROXY_VERSION> go install .../toxiproxy/v2/cmd/server@<ver>
#   s3a        <cache>/jars/s3a-<hadoop>-sdk<sdk>-cloud<shc>/  mvn copy-dependencies of install/s3a/pom.xml
# <cache> is ${STATEBED_CACHE:-$HOME/.cache/statebed}; Go module/build caches and the Maven
# repository live under it too, so a rerun reuses downloads and never touches the repo.
#
# Idempotent: a component already present is only verified against its sha256 manifest
# (<bin>.sha256, <jars>/SHA256SUMS) and its path printed; no network, no toolchain needed.
# A changed file is an error (exit 1). A missing toolchain is one line and exit 2.
# Quiet: one progress line per step on stderr; tool output goes to <cache>/logs/ (shown on
# failure; STATEBED_VERBOSE=1 streams it). Stdout is exactly one line per component:
#   minio /path   |   toxiproxy /path   |   s3a-jars /dir (N jars)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
# shellcheck source=versions.env
. "$HERE/versions.env"

# shellcheck source=paths.sh
. "$HERE/paths.sh"
# shellcheck source=lib.sh
. "$HERE/lib.sh"
VERBOSE="${STATEBED_VERBOSE:-0}"
LOG_DIR="$CACHE/logs"

MINIO_MODULE="github.com/minio/minio"
TOXIPROXY_MODULE="github.com/Shopify/toxiproxy/v2"
# The exact jar set the s3a pom must resolve to (every version is a pin in versions.env).
S3A_EXPECTED=(
  "hadoop-aws-$HADOOP_AWS_VERSION.jar"
  "bundle-$AWS_SDK_BUNDLE_VERSION.jar"
  "analyticsaccelerator-s3-$ANALYTICS_ACCELERATOR_VERSION.jar"
  "wildfly-openssl-$WILDFLY_OPENSSL_VERSION.jar"
  "spark-hadoop-cloud_$SCALA_BINARY_VERSION-$SPARK_HADOOP_CLOUD_VERSION.jar"
)

usage() { echo "usage: install/install.sh [minio|toxiproxy|s3a|all] | --where minio|toxiproxy|s3a" >&2; exit 64; }
where() {  # where <component>: its installed path, or one line saying how to install it (exit 1)
  local path
  case "$1" in minio) path="$MINIO_BIN" ;; toxiproxy) path="$TOXIPROXY_BIN" ;; s3a) path="$S3A_DIR" ;; *) usage ;; esac
  if [ -e "$path.sha256" ] || [ -f "$path/SHA256SUMS" ]; then echo "$path"; exit 0; fi
  echo "$1 is not installed ($path): run install/install.sh $1 (or make stack)" >&2
  exit 1
}
if [ "${1:-}" = --where ]; then [ $# -eq 2 ] || usage; where "$2"; fi
case "${1:-all}" in
  minio|toxiproxy|s3a) COMPONENTS=("${1:-all}") ;;
  all) COMPONENTS=(minio toxiproxy s3a) ;;
  -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
  *) usage ;;
esac
[ $# -le 1 ] || usage

present() {  # is component $1 already installed (files exist; content is verified later)?
  case "$1" in
    minio) [ -x "$MINIO_BIN" ] ;;
    toxiproxy) [ -x "$TOXIPROXY_BIN" ] ;;
    s3a) [ -f "$S3A_DIR/SHA256SUMS" ] ;;
  esac
}

# ---- toolchain check: before anything starts, only for what still has to be built ----------
need=(sha256sum)
for c in "${COMPONENTS[@]}"; do
  present "$c" && continue
  case "$c" in
    minio|toxiproxy) need+=(go) ;;
    s3a) need+=(mvn java) ;;
  esac
done
need_tools "${need[@]}"

mkdir -p "$BIN_DIR" "$JARS_ROOT" "$LOG_DIR"
lock_cache

STAGE=""
cleanup() { [ -z "$STAGE" ] || rm -rf "$STAGE"; }
trap cleanup EXIT

install_go_bin() {  # install_go_bin <name> <pkg@ver> <built-name> <dest> [extra -ldflags]
  local name="$1" pkgver="$2" built="$3" dest="$4" ldx="${5:-}"
  if [ -x "$dest" ]; then
    say "$name: present, verifying $dest"
    verify_bin "$dest"
    return
  fi
  say "$name: building $pkgver (go $(go env GOVERSION), CGO_ENABLED=0, -trimpath)"
  STAGE="$(mktemp -d "$BIN_DIR/.stage-$name.XXXXXX")"
  run_logged "$LOG_DIR/$name-build.log" \
    go_env GOBIN="$STAGE" go install -trimpath -ldflags="-s -w${ldx:+ $ldx}" "$pkgver"
  [ -x "$STAGE/$built" ] || die "$name: go install produced no $built in $STAGE"
  mv "$STAGE/$built" "$dest"
  (cd "$BIN_DIR" && sha256sum "$(basename "$dest")" >"$(basename "$dest").sha256")
  rm -rf "$STAGE"; STAGE=""
}

pyspark_jars_dir() {
  local d
  for d in "${PYSPARK_JARS:-}" "$REPO"/.venv/lib/python3*/site-packages/pyspark/jars; do
    [ -n "$d" ] && [ -d "$d" ] && { echo "$d"; return; }
  done
}

install_s3a() {
  if [ -f "$S3A_DIR/SHA256SUMS" ]; then
    say "s3a: present, verifying $S3A_DIR/SHA256SUMS"
    verify_dir "$S3A_DIR" "*.jar"
    return
  fi
  [ ! -e "$S3A_DIR" ] || die "$S3A_DIR exists without SHA256SUMS (interrupted?); delete it and rerun"
  say "s3a: resolving hadoop-aws $HADOOP_AWS_VERSION + awssdk bundle $AWS_SDK_BUNDLE_VERSION + spark-hadoop-cloud $SPARK_HADOOP_CLOUD_VERSION (Maven)"
  STAGE="$(mktemp -d "$JARS_ROOT/.stage-s3a.XXXXXX")"
  run_logged "$LOG_DIR/s3a-mvn.log" \
    mvn -B -q -f "$HERE/s3a/pom.xml" \
      -Dmaven.repo.local="$CACHE/m2" \
      -Dhadoop.aws.version="$HADOOP_AWS_VERSION" \
      -Daws.sdk.bundle.version="$AWS_SDK_BUNDLE_VERSION" \
      -Dspark.hadoop.cloud.version="$SPARK_HADOOP_CLOUD_VERSION" \
      -Dscala.binary.version="$SCALA_BINARY_VERSION" \
      "org.apache.maven.plugins:maven-dependency-plugin:$MAVEN_DEPENDENCY_PLUGIN_VERSION:copy-dependencies" \
      -DincludeScope=runtime -DoutputDirectory="$STAGE"

  # The resolved set must be exactly the pinned one (catches a pin that drifted from hadoop-aws's pom).
  local got want
  got="$(cd "$STAGE" && ls -1 -- *.jar | sort)"
  want="$(printf '%s\n' "${S3A_EXPECTED[@]}" | sort)"
  [ "$got" = "$want" ] || die "s3a: resolved jars differ from versions.env pins:
$(diff <(echo "$want") <(echo "$got") | sed -n 's/^[<>]/  &/p')"

  # No jar pyspark already ships (same artifact name, any version).
  local pj j base dup=""
  pj="$(pyspark_jars_dir || true)"
  if [ -n "$pj" ]; then
    for j in "$STAGE"/*.jar; do
      base="$(basename "$j" .jar)"; base="${base%-*}"   # strip -<version>
      if compgen -G "$pj/$base-[0-9]*.jar" >/dev/null; then dup+=" $(basename "$j")"; fi
    done
    [ -z "$dup" ] || die "s3a: would duplicate jars pyspark already ships ($pj):$dup"
  else
    say "s3a: pyspark/jars not found (set PYSPARK_JARS); duplicate check skipped"
  fi

  seal_dir "$STAGE" "$S3A_DIR" "*.jar"; STAGE=""
}

for c in "${COMPONENTS[@]}"; do
  case "$c" in
    minio) install_go_bin minio "$MINIO_MODULE@$MINIO_VERSION" minio "$MINIO_BIN" ;;
    toxiproxy) install_go_bin toxiproxy "$TOXIPROXY_MODULE/cmd/server@$TOXIPROXY_VERSION" server "$TOXIPROXY_BIN" \
                 "-X $TOXIPROXY_MODULE.Version=${TOXIPROXY_VERSION#v}" ;;
    s3a) install_s3a ;;
  esac
done

for c in "${COMPONENTS[@]}"; do
  case "$c" in
    minio) echo "minio $MINIO_BIN" ;;
    toxiproxy) echo "toxiproxy $TOXIPROXY_BIN" ;;
    s3a) echo "s3a-jars $S3A_DIR ($(awk 'END{print NR}' "$S3A_DIR/SHA256SUMS") jars)" ;;
  esac
done
