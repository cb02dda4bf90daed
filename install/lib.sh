# statebed installers' shared helpers: logging, quiet tool runs, sha256 manifests, Go with the cache.
# Sourced by install.sh and kube-tools.sh after versions.env and paths.sh; uses CACHE, LOG_DIR,
# VERBOSE and STAGE (a staging directory the caller's EXIT trap removes).

say() { printf 'install: %s\n' "$*" >&2; }
die() { printf 'install: error: %s\n' "$*" >&2; exit 1; }

need_tools() {  # need_tools tool...: one line naming every missing tool, exit 2
  local t missing=()
  for t in "$@"; do
    command -v "$t" >/dev/null 2>&1 || case " ${missing[*]:-} " in *" $t "*) ;; *) missing+=("$t") ;; esac
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "install: missing toolchain: ${missing[*]} (not on PATH)" >&2
    exit 2
  fi
}

lock_cache() {  # one installer at a time per cache
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE/.install.lock"
    flock -w 1800 9 || die "another installer holds $CACHE/.install.lock"
  fi
}

run_logged() {  # run_logged <logfile> cmd...: quiet unless STATEBED_VERBOSE=1; tail on failure
  local log="$1"; shift
  if [ "$VERBOSE" = 1 ]; then
    "$@" 2>&1 | tee "$log" >&2
    return "${PIPESTATUS[0]}"
  fi
  if ! "$@" >"$log" 2>&1; then
    tail -n 25 "$log" >&2
    say "failed; full log: $log"
    return 1
  fi
}

verify_bin() {  # verify_bin <path>: compare with <path>.sha256 written at install time
  local bin="$1"
  [ -f "$bin.sha256" ] || die "$bin has no manifest $bin.sha256; delete the binary and rerun"
  (cd "$(dirname "$bin")" && sha256sum --quiet -c "$(basename "$bin").sha256" >/dev/null 2>&1) \
    || die "$bin does not match $bin.sha256 (changed since install); delete both and rerun"
}

verify_dir() {  # verify_dir <dir> <glob>: SHA256SUMS matches and lists exactly the files present
  local dir="$1" glob="$2" listed present bad
  if ! bad="$(cd "$dir" && sha256sum --quiet -c SHA256SUMS 2>/dev/null)"; then
    die "$dir: does not match SHA256SUMS (${bad//$'\n'/; }); delete the directory and rerun"
  fi
  listed="$(awk '{sub(/^\*/, "", $2); print $2}' "$dir/SHA256SUMS" | sort)"
  # shellcheck disable=SC2086  # the glob is meant to expand
  present="$(cd "$dir" && ls -1 -- $glob 2>/dev/null | grep -vx SHA256SUMS | sort)"
  [ "$listed" = "$present" ] \
    || die "$dir: files differ from SHA256SUMS (extra or missing file); delete the directory and rerun"
}

seal_dir() {  # seal_dir <stage> <dest> <glob>: write SHA256SUMS of the staged files, move into place
  local stage="$1" dest="$2" glob="$3"
  # shellcheck disable=SC2086
  (cd "$stage" && sha256sum -- $glob >"$stage.sums" && mv "$stage.sums" SHA256SUMS)
  chmod 755 "$stage"
  mv "$stage" "$dest"
}

go_env() {  # Go caches under the statebed cache; never switch toolchains behind our back.
  # The module cache is tried first as a file:// proxy, so a rebuild of a downloaded pin is
  # offline (a plain `go install pkg@v` would still ask the network about candidate module paths).
  local modcache="$CACHE/go/pkg/mod" upstream
  upstream="$(go env GOPROXY)"
  env GOPATH="$CACHE/go" GOMODCACHE="$modcache" GOCACHE="$CACHE/go/build-cache" \
      GOPROXY="file://$modcache/cache/download,$upstream" \
      GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -modcacherw" "$@"
}
