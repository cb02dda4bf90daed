#!/usr/bin/env bash
# statebed: checks of what install/install.sh built (run install.sh first).
#
#   install/check.sh
#
#   (a) minio: start the pinned server on 127.0.0.1:<free port> with a temp data dir, make a
#       bucket with the `minio` client, PUT an object, then PUT the same key again with
#       `If-None-Match: *` -> must be HTTP 412 PreconditionFailed (create-only writes), and the
#       object must still hold the first write; a create-only PUT of a new key must succeed.
#   (b) toxiproxy: start toxiproxy-server on 127.0.0.1:<free port>, proxy MinIO through it with
#       toxiproxy-python, add a latency toxic, see a GET slowed, remove it, see it fast again.
#   (c) s3a jars: S3AFileSystem and AbortableStreamBasedCheckpointFileManager are in the cached
#       jars (unzip -l), and load + link on a JVM classpath of pyspark/jars + the s3a jars
#       (class loading only; Spark is not started).
# Everything started here is stopped by its recorded PID on exit. Servers bind 127.0.0.1 only.
# Last line: "check: N passed, N failed"; exit 1 if any failed, 2 if something is not installed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
# shellcheck source=versions.env
. "$HERE/versions.env"
# shellcheck source=paths.sh
. "$HERE/paths.sh"
PY="${STATEBED_PYTHON:-$REPO/.venv/bin/python}"

for f in "$MINIO_BIN" "$TOXIPROXY_BIN" "$S3A_DIR/SHA256SUMS"; do
  [ -e "$f" ] || { echo "check: $f missing; run install/install.sh first" >&2; exit 2; }
done
[ -x "$PY" ] || { echo "check: no python at $PY (set STATEBED_PYTHON)" >&2; exit 2; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/statebed-check.XXXXXX")"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]:-}"; do
    [ -n "$p" ] || continue
    kill "$p" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_http() {  # wait_http <url> <pid> <what>
  for _ in $(seq 150); do
    kill -0 "$2" 2>/dev/null || { echo "check: $3 exited early" >&2; return 1; }
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  echo "check: $3 not answering at $1 after 30 s" >&2; return 1
}

PASSED=0; FAILED=0
result() { if [ "$1" = 0 ]; then PASSED=$((PASSED+1)); echo "check ($2): PASS"; else FAILED=$((FAILED+1)); echo "check ($2): FAIL"; fi; }

# ---- servers ------------------------------------------------------------------------------
MINIO_PORT="$(free_port)"; MINIO_CONSOLE_PORT="$(free_port)"; TOXI_PORT="$(free_port)"
export MINIO_ROOT_USER="statebed-check"
MINIO_ROOT_PASSWORD="$("$PY" -c 'import secrets; print(secrets.token_hex(16))')"; export MINIO_ROOT_PASSWORD
mkdir -p "$TMP/minio-data"
HOME="$TMP" MINIO_UPDATE=off MINIO_BROWSER=off "$MINIO_BIN" server --quiet --certs-dir "$TMP/minio-certs" \
  --address "127.0.0.1:$MINIO_PORT" --console-address "127.0.0.1:$MINIO_CONSOLE_PORT" \
  "$TMP/minio-data" >"$TMP/minio.log" 2>&1 &
MINIO_PID=$!; PIDS+=("$MINIO_PID")
"$TOXIPROXY_BIN" -host 127.0.0.1 -port "$TOXI_PORT" >"$TMP/toxiproxy.log" 2>&1 &
TOXI_PID=$!; PIDS+=("$TOXI_PID")
echo "check: minio pid $MINIO_PID on 127.0.0.1:$MINIO_PORT, toxiproxy pid $TOXI_PID on 127.0.0.1:$TOXI_PORT"

servers_ok=0
wait_http "http://127.0.0.1:$MINIO_PORT/minio/health/live" "$MINIO_PID" minio || { servers_ok=1; tail -n 20 "$TMP/minio.log" >&2; }
wait_http "http://127.0.0.1:$TOXI_PORT/version" "$TOXI_PID" toxiproxy-server || { servers_ok=1; tail -n 20 "$TMP/toxiproxy.log" >&2; }

export MINIO_PORT TOXI_PORT

# ---- (a) create-only PUT -> 412 ---------------------------------------------------------------
rc=1
if [ "$servers_ok" = 0 ]; then
  set +e
  "$PY" - <<'EOF'
import io, os, sys
from minio import Minio
from minio.error import S3Error

c = Minio(f"127.0.0.1:{os.environ['MINIO_PORT']}", access_key=os.environ["MINIO_ROOT_USER"],
          secret_key=os.environ["MINIO_ROOT_PASSWORD"], secure=False, region="us-east-1")
b, k = "statebed-check", "create-only/key"
c.make_bucket(b)
r1 = c.put_object(b, k, io.BytesIO(b"first"), 5)
print(f"  PUT {b}/{k} -> 200 etag={r1.etag}")
try:
    # put_object() turns unknown headers into x-amz-meta-*; _put_object sends them as-is (signed).
    c._put_object(b, k, b"second", headers={"If-None-Match": "*"})
except S3Error as e:
    st = e.response.status
    print(f"  PUT {b}/{k} If-None-Match: * -> HTTP {st} code={e.code} message={e.message!r}")
    ok = st == 412 and e.code == "PreconditionFailed"
else:
    print("  PUT with If-None-Match: * SUCCEEDED (overwrote): create-only NOT enforced")
    ok = False
body = c.get_object(b, k).read()
print(f"  GET {b}/{k} -> {body!r}")
ok = ok and body == b"first"
r3 = c._put_object(b, k + "-new", b"fresh", headers={"If-None-Match": "*"})
print(f"  PUT {b}/{k}-new If-None-Match: * (new key) -> 200 etag={r3.etag}")
sys.exit(0 if ok else 1)
EOF
  rc=$?
  set -e
fi
result "$rc" "a: minio If-None-Match: * -> 412"

# ---- (b) toxiproxy latency ---------------------------------------------------------------------
rc=1
if [ "$servers_ok" = 0 ]; then
  PROXY_PORT="$(free_port)"; export PROXY_PORT
  set +e
  "$PY" - <<'EOF'
import io, os, sys, time
from minio import Minio
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer

APIConsumer.host, APIConsumer.port = "127.0.0.1", int(os.environ["TOXI_PORT"])
tp = Toxiproxy()
print(f"  toxiproxy-server version {tp.version().decode().strip()}")
proxy = tp.create(upstream=f"127.0.0.1:{os.environ['MINIO_PORT']}", name="minio",
                  listen=f"127.0.0.1:{os.environ['PROXY_PORT']}")
c = Minio(proxy.listen, access_key=os.environ["MINIO_ROOT_USER"],
          secret_key=os.environ["MINIO_ROOT_PASSWORD"], secure=False, region="us-east-1")
b = "statebed-toxic"
c.make_bucket(b)
c.put_object(b, "k", io.BytesIO(b"x" * 1024), 1024)

def timed_get():
    t = time.monotonic(); data = c.get_object(b, "k").read(); dt = time.monotonic() - t
    assert len(data) == 1024
    return dt

base = min(timed_get() for _ in range(3))
LAT = 400
proxy.add_toxic(type="latency", name="slow", stream="downstream", attributes={"latency": LAT, "jitter": 0})
print(f"  toxics while on: {sorted(proxy.toxics())}")
slow = timed_get()
proxy.destroy_toxic("slow")
after = min(timed_get() for _ in range(3))
remaining = sorted(proxy.toxics())
proxy.destroy()
print(f"  GET via proxy {proxy.listen}: baseline {base*1000:.0f} ms, latency {LAT} ms toxic {slow*1000:.0f} ms, "
      f"after removal {after*1000:.0f} ms (toxics left: {remaining})")
ok = slow >= LAT / 1000 and base < LAT / 2000 and after < LAT / 2000 and not remaining
sys.exit(0 if ok else 1)
EOF
  rc=$?
  set -e
fi
result "$rc" "b: toxiproxy latency toxic slows, removal restores"

# ---- (c) s3a jars contain and link the classes --------------------------------------------------
rc=0
S3A_CLASS=org.apache.hadoop.fs.s3a.S3AFileSystem
CKPT_CLASS=org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager
for cls in "$S3A_CLASS" "$CKPT_CLASS"; do
  entry="${cls//.//}.class"; found=""
  for j in "$S3A_DIR"/*.jar; do
    if unzip -Z1 "$j" "$entry" >/dev/null 2>&1; then found="$(basename "$j")"; break; fi
  done
  if [ -n "$found" ]; then echo "  $entry in $found"; else echo "  $entry in NO jar of $S3A_DIR"; rc=1; fi
done
PYSPARK_JARS="${PYSPARK_JARS:-$(ls -d "$REPO"/.venv/lib/python3*/site-packages/pyspark/jars 2>/dev/null | head -n1)}"
if [ -n "$PYSPARK_JARS" ] && command -v java >/dev/null 2>&1; then
  cat >"$TMP/LinkCheck.java" <<'EOF'
public class LinkCheck {
  public static void main(String[] names) {
    int bad = 0;
    for (String n : names) {
      try {
        Class<?> c = Class.forName(n, true, LinkCheck.class.getClassLoader());
        int m = c.getDeclaredMethods().length;  // resolves every signature type
        String src = c.getProtectionDomain().getCodeSource().getLocation().getPath();
        System.out.println("  linked " + n + " (" + m + " methods) from " + src.substring(src.lastIndexOf('/') + 1));
      } catch (Throwable t) {
        bad++;
        System.out.println("  FAILED to link " + n + ": " + t);
      }
    }
    System.exit(bad == 0 ? 0 : 1);
  }
}
EOF
  java -cp "$PYSPARK_JARS/*:$S3A_DIR/*" "$TMP/LinkCheck.java" "$S3A_CLASS" "$CKPT_CLASS" \
    org.apache.spark.internal.io.cloud.PathOutputCommitProtocol || rc=1
else
  echo "  (java or pyspark/jars not found: link check skipped)"
fi
result "$rc" "c: s3a jars hold and link S3AFileSystem + AbortableStreamBasedCheckpointFileManager"

echo "check: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
