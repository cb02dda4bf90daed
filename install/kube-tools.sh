#!/usr/bin/env bash
# statebed: builds and caches a single-node Kubernetes cluster's binaries from upstream sources.
#
#   install/kube-tools.sh [kubernetes|etcd|containerd|cni|helm|pause|coredns|mc|all]   (default: all)
#   install/kube-tools.sh --where <component>  its directory, or exit 1
#
# Each component is a directory <cache>/kube/<name>-<version>/ holding its binaries and a
# SHA256SUMS manifest; versions are pinned in install/versions.env:
#   kubernetes  kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl
#               kubeadm, built in the wrapper module install/kube/kubernetes (k8s.io/kubernetes
#               replaces its staging modules with ./staging paths a module download lacks)
#   etcd        etcd, built in the wrapper module install/kube/etcd (etcdmain.Main)
#   containerd  containerd containerd-shim-runc-v2 ctr (go install -tags no_btrfs)
#   cni         bridge host-local loopback portmap (containernetworking/plugins)
#   helm        helm
#   pause       pause, the pod sandbox's process (install/kube/pause; the node stage makes it an image)
#   coredns     coredns, the cluster's DNS (a process in the cluster's namespace, kubernetes plugin)
#   mc          mc, MinIO's client: the chart's bucket Job runs it (the node stage makes it an image)
# runc comes from Debian (/usr/sbin/runc, with seccomp); it is checked when the node starts.
# Idempotent and offline once built (a present component is only verified). A missing toolchain
# is one line and exit 2. Quiet: a progress line per step on stderr, tool output in
# <cache>/logs/. Stdout: one line per component, "<name> <dir>".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$HERE/versions.env"
# shellcheck source=paths.sh
. "$HERE/paths.sh"
# shellcheck source=lib.sh
. "$HERE/lib.sh"
VERBOSE="${STATEBED_VERBOSE:-0}"
LOG_DIR="$CACHE/logs"
ALL=(kubernetes etcd containerd cni helm pause coredns mc)
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl kubeadm)
CONTAINERD_CMDS=(containerd containerd-shim-runc-v2 ctr)
CNI_CMDS=(bridge host-local loopback portmap)

usage() { echo "usage: install/kube-tools.sh [${ALL[*]// /|}|all] | --where <component>" >&2; exit 64; }
dir_of() {
  case "$1" in
    kubernetes) echo "$KUBERNETES_DIR" ;; etcd) echo "$ETCD_DIR" ;; containerd) echo "$CONTAINERD_DIR" ;;
    cni) echo "$CNI_DIR" ;; helm) echo "$HELM_DIR" ;; pause) echo "$PAUSE_DIR" ;;
    coredns) echo "$COREDNS_DIR" ;; mc) echo "$MC_DIR" ;; *) usage ;;
  esac
}
if [ "${1:-}" = --where ]; then
  [ $# -eq 2 ] || usage
  d="$(dir_of "$2")"
  [ -f "$d/SHA256SUMS" ] && { echo "$d"; exit 0; }
  echo "$2 is not installed ($d): run install/kube-tools.sh $2 (or make kube-tools)" >&2
  exit 1
fi
case "${1:-all}" in
  all) COMPONENTS=("${ALL[@]}") ;;
  -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
  *) dir_of "$1" >/dev/null; COMPONENTS=("$1") ;;
esac
[ $# -le 1 ] || usage

need=(sha256sum)
for c in "${COMPONENTS[@]}"; do [ -f "$(dir_of "$c")/SHA256SUMS" ] || need+=(go); done
need_tools "${need[@]}"
mkdir -p "$KUBE_ROOT" "$LOG_DIR"
lock_cache

STAGE=""
trap '[ -z "$STAGE" ] || rm -rf "$STAGE"' EXIT

build_in_module() {  # build_in_module <name> <module dir> <ldflags> pkg...: go build each into STAGE
  local name="$1" mod="$2" ld="$3" pkg; shift 3
  for pkg in "$@"; do
    say "$name: building $pkg"
    (cd "$mod" && run_logged "$LOG_DIR/$name-build.log" \
      go_env go build -trimpath -ldflags="-s -w $ld" -o "$STAGE/" "$pkg")
  done
}

install_at() {  # install_at <name> <pkg@ver>...: go install each into STAGE
  local name="$1" pkgver; shift
  for pkgver in "$@"; do
    say "$name: building $pkgver"
    run_logged "$LOG_DIR/$name-build.log" \
      go_env GOBIN="$STAGE" GOFLAGS="${GOFLAGS:-} -tags=no_btrfs" go install -trimpath -ldflags="-s -w" "$pkgver"
  done
}

build() {  # build <component>: into a staging dir, sealed with SHA256SUMS, moved into place
  local c="$1" dest minor cmd pkg
  dest="$(dir_of "$c")"
  if [ -f "$dest/SHA256SUMS" ]; then
    say "$c: present, verifying $dest"
    verify_dir "$dest" "*"
    return
  fi
  [ ! -e "$dest" ] || die "$dest exists without SHA256SUMS (interrupted?); delete it and rerun"
  say "$c: building (go $(go env GOVERSION), CGO_ENABLED=0; tens of minutes cold on 2 cores)"
  STAGE="$(mktemp -d "$KUBE_ROOT/.stage-$c.XXXXXX")"
  case "$c" in
    kubernetes)
      minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
      build_in_module "$c" "$HERE/kube/kubernetes" \
        "-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
        "${K8S_CMDS[@]/#/k8s.io/kubernetes/cmd/}" ;;
    etcd) build_in_module "$c" "$HERE/kube/etcd" "" . ;;  # the module's last path element names it: etcd
    containerd)
      for cmd in "${CONTAINERD_CMDS[@]}"; do install_at "$c" "github.com/containerd/containerd/v2/cmd/$cmd@$CONTAINERD_VERSION"; done ;;
    cni)
      for pkg in main/bridge ipam/host-local main/loopback meta/portmap; do
        install_at "$c" "github.com/containernetworking/plugins/plugins/$pkg@$CNI_PLUGINS_VERSION"
      done ;;
    helm) install_at "$c" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" ;;
    pause) build_in_module "$c" "$HERE/kube/pause" "" . ;;
    coredns) install_at "$c" "github.com/coredns/coredns@$COREDNS_VERSION" ;;
    mc) install_at "$c" "github.com/minio/mc@$MC_VERSION" ;;
  esac
  seal_dir "$STAGE" "$dest" "*"; STAGE=""
}

for c in "${COMPONENTS[@]}"; do build "$c"; done
for c in "${COMPONENTS[@]}"; do echo "$c $(dir_of "$c")"; done
