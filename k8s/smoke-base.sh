#!/usr/bin/env bash
# A stand-in for apache/spark:4.3.0-python3 where no registry is reachable: a Debian bookworm
# rootfs from debootstrap with Java 17, Python 3.11, procps and pyspark 4.3.0 (Spark's jars come
# with the pip package), user spark = uid 185, imported into podman as $1
# (default localhost/statebed-smoke-base:bookworm). Needs root, debootstrap, podman, a Debian mirror.
set -euo pipefail
image="${1:-localhost/statebed-smoke-base:bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
work="$(mktemp -d /var/tmp/statebed-smoke-base.XXXXXX)"
trap 'rm -rf "$work"' EXIT
pyspark="$(python3 - <<'PY'
import re, pathlib
print(re.search(r'"pyspark==([\d.]+)"', pathlib.Path("pyproject.toml").read_text()).group(1))
PY
)"
echo "smoke base: debootstrap bookworm into $work/rootfs (pyspark $pyspark)"
debootstrap --variant=minbase --include=openjdk-17-jre-headless,python3,python3-pip,procps,ca-certificates \
  bookworm "$work/rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }
cp /etc/resolv.conf "$work/rootfs/etc/resolv.conf"
# the host's CA bundle: pip (here and in the image build) trusts what the host trusts, e.g. a TLS-inspecting proxy
cp /etc/ssl/certs/ca-certificates.crt "$work/rootfs/etc/ssl/certs/ca-certificates.crt"
chroot "$work/rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  python3 -m pip install --no-cache-dir --break-system-packages "pyspark==$pyspark"
chroot "$work/rootfs" useradd --uid 185 --create-home --shell /bin/bash spark
chroot "$work/rootfs" sh -c 'apt-get clean; rm -rf /var/lib/apt/lists/* /root/.cache'
: > "$work/rootfs/etc/resolv.conf"
java_home="$(chroot "$work/rootfs" sh -c 'dirname "$(dirname "$(readlink -f /usr/bin/java)")"')"
tar -C "$work/rootfs" -c . | podman import --change "ENV JAVA_HOME=$java_home" --change "WORKDIR /tmp" - "$image"
echo "smoke base: $image"
