#!/usr/bin/env bash
# A stand-in for debian:bookworm-slim (the Dockerfile's BASE_IMAGE) where no image registry is
# reachable: a Debian bookworm rootfs from debootstrap, imported into podman as $1 (default
# localhost/statebed-smoke-base:bookworm). To keep the build fast it already holds what the
# Dockerfile installs (its apt packages and the pinned pyspark from PyPI), so the Dockerfile's
# own steps still run but find them installed. The host's extra CA certificates are added
# (update-ca-certificates), so apt/pip inside the build trust what the host trusts, e.g. a
# TLS-inspecting proxy. Needs root, debootstrap, podman, a Debian mirror and PyPI.
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
# the Dockerfile's apt packages, read from it (one list, not two)
packages="$(sed -n 's/^ARG APT_PACKAGES="\(.*\)"$/\1/p' Dockerfile | tr ' ' ',')"
[ -n "$packages" ] || { echo "smoke base: no ARG APT_PACKAGES=\"...\" in Dockerfile" >&2; exit 1; }
echo "smoke base: debootstrap bookworm into $work/rootfs ($packages; pyspark $pyspark)"
debootstrap --variant=minbase --include="$packages" bookworm "$work/rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log"; exit 1; }
cp /etc/resolv.conf "$work/rootfs/etc/resolv.conf"
if compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$work/rootfs/usr/local/share/ca-certificates/"
  chroot "$work/rootfs" update-ca-certificates > /dev/null
fi
chroot "$work/rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  python3 -m pip install --no-cache-dir --break-system-packages "pyspark==$pyspark"
chroot "$work/rootfs" sh -c 'apt-get clean; rm -rf /var/lib/apt/lists/* /root/.cache'
: > "$work/rootfs/etc/resolv.conf"
tar -C "$work/rootfs" -c . | podman import --change "WORKDIR /" - "$image"
echo "smoke base: $image"
