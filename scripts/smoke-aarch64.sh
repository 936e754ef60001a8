#!/usr/bin/env bash
# Smoke test of the Raspberry Pi binary under qemu user emulation (CI runs it after the tests):
#
#   scripts/smoke-aarch64.sh [AARCH64_BIN [X86_64_BIN]]
#
# defaults: target/aarch64-unknown-linux-gnu/release/clef (scripts/build-aarch64.sh) and
# target/release/clef (built here if missing), under $CARGO_TARGET_DIR when set.
#
# 1. the binary is a static aarch64 executable under 8 MB;
# 2. under `qemu-aarch64-static -cpu cortex-a72` (a Pi 4; QEMU_CPU=cortex-a53 for a Pi 3),
#    `clef test tables` passes every stored test, and `clef decide` prints the same bytes
#    (timestamps aside) as the x86_64 build, with and without --explain, for every sample in
#    tables/samples/ (a sample NAME.CASE.json is decided by each table file NAME.* in tables/,
#    whatever its kind);
# 3. `clef serve` on the example config, on free ports of 127.0.0.1, says READY=1 on
#    $NOTIFY_SOCKET, answers /health, a /decide per table (the same decision as the x86_64
#    CLI) and concurrent keep-alive requests, reloads on the admin listener, and on SIGTERM
#    says STOPPING=1 and exits 0.
# Every wait is bounded; everything started is stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${CARGO_TARGET_DIR:-target}
ARM=${1:-$OUT/aarch64-unknown-linux-gnu/release/clef}
X86=${2:-$OUT/release/clef}
CPU=${QEMU_CPU:-cortex-a72}
MAX_BYTES=8000000
started=$SECONDS

fail() { echo "smoke-aarch64: FAILED: $*" >&2; exit 1; }
for tool in qemu-aarch64-static python3 file; do
  command -v $tool >/dev/null || fail "$tool is missing (scripts/build-aarch64.sh installs it)"
done
[ -x "$ARM" ] || fail "no aarch64 binary at $ARM: run scripts/build-aarch64.sh first"
if [ ! -x "$X86" ]; then
  [ $# -lt 2 ] || fail "no x86_64 binary at $X86"
  cargo build --release --locked --bin clef
fi
QEMU=(qemu-aarch64-static -cpu "$CPU")

# --- 1. the file -------------------------------------------------------------------------------
desc=$(file -b "$ARM")
case $desc in *"ARM aarch64"*"statically linked"*) ;; *) fail "$ARM is not a static aarch64 executable: $desc" ;; esac
bytes=$(stat -c %s "$ARM")
[ "$bytes" -lt "$MAX_BYTES" ] || fail "$ARM is $bytes bytes, the limit is $MAX_BYTES"
echo "smoke-aarch64: $ARM: $bytes bytes, static aarch64; $("${QEMU[@]}" "$ARM" version)"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# --- 2. stored tests and decisions ---------------------------------------------------------------
"${QEMU[@]}" "$ARM" test tables >"$WORK/test.out" 2>&1 || { cat "$WORK/test.out" >&2; fail "clef test tables under qemu"; }
echo "smoke-aarch64: clef test tables: $(tail -n 1 "$WORK/test.out")"

mask() { sed -E 's/"timestamp":"[^"]*"/"timestamp":"-"/g' "$1"; }
compared=0 samples=0
for sample in tables/samples/*.json; do
  [ -e "$sample" ] || continue
  name=$(basename "$sample")
  name=${name%%.*}
  tables=()
  for t in tables/"$name".*; do
    case $(basename "$t") in *.tests.*) continue ;; esac
    [ -f "$t" ] && tables+=("$t")
  done
  [ ${#tables[@]} -gt 0 ] || fail "$sample: no table tables/$name.* for it"
  samples=$((samples + 1))
  for table in "${tables[@]}"; do
    for explain in "" --explain; do
      set +e
      "$X86" decide "$table" "$sample" $explain >"$WORK/x86.out" 2>"$WORK/x86.err"
      x86_rc=$?
      "${QEMU[@]}" "$ARM" decide "$table" "$sample" $explain >"$WORK/arm.out" 2>"$WORK/arm.err"
      arm_rc=$?
      set -e
      what="clef decide $table $sample $explain"
      [ "$x86_rc" = "$arm_rc" ] || fail "$what: exit $x86_rc on x86_64, $arm_rc on aarch64"
      [ -s "$WORK/x86.out" ] || [ "$x86_rc" != 0 ] || fail "$what: no output"
      if ! diff <(mask "$WORK/x86.out") <(mask "$WORK/arm.out") >"$WORK/diff"; then
        cat "$WORK/diff" >&2
        fail "$what: the aarch64 output differs"
      fi
      cmp -s "$WORK/x86.err" "$WORK/arm.err" || fail "$what: stderr differs: $(cat "$WORK/x86.err") / $(cat "$WORK/arm.err")"
      compared=$((compared + 1))
    done
  done
done
[ "$samples" -gt 0 ] || fail "no samples in tables/samples"
echo "smoke-aarch64: clef decide: $compared outputs byte-identical to x86_64 ($samples samples, with and without --explain)"

# --- 3. the server -----------------------------------------------------------------------------
timeout 300 python3 - "$X86" "${QEMU[@]}" "$ARM" <<'PY' || fail "clef serve under qemu"
import glob, http.client, json, os, shutil, signal, socket, subprocess, sys, tempfile, threading, time

x86, run = sys.argv[1], sys.argv[2:]
# `timeout` stops this script with SIGTERM: leave through `finally`, which stops the server.
signal.signal(signal.SIGTERM, lambda *_: sys.exit("smoke-aarch64: timed out"))

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def fail(msg):
    print("smoke-aarch64: " + msg, file=sys.stderr)
    log.flush()
    log.seek(0)
    print("----- the server's log -----\n" + log.read()[-4000:], file=sys.stderr)
    sys.exit(1)

def request(port, method, path, body=None, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    c.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
    r = c.getresponse()
    data = r.read()
    if conn is None:
        c.close()
    return r.status, data

def decision(d):
    return {k: d.get(k) for k in ("rule_id", "matched", "action", "table", "version")}

tmp = tempfile.mkdtemp()
notify_path = os.path.join(tmp, "notify")
notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
notify.bind(notify_path)
port, admin = free_port(), free_port()
log = open(os.path.join(tmp, "server.log"), "w+")
env = dict(os.environ, NOTIFY_SOCKET=notify_path, CLEF_ADMIN__LISTEN="127.0.0.1:%d" % admin, CLEF_LOGGING__LEVEL="info")
t0 = time.monotonic()
proc = subprocess.Popen(run + ["serve", "-c", "config.yaml", "--host", "127.0.0.1", "--port", str(port)],
                        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)

def messages(until, within):
    notify.settimeout(within)
    seen = []
    try:
        while True:
            m = notify.recv(4096).decode()
            seen.append(m)
            if until in m.splitlines():
                return seen
    except socket.timeout:
        return None

try:
    seen = messages("READY=1", 60)
    if seen is None:
        log.seek(0)
        fail("no READY=1 within 60 s\n" + log.read())
    ready_ms = (time.monotonic() - t0) * 1e3
    status, body = request(port, "GET", "/health")
    if status != 200 or json.loads(body)["status"] != "ok":
        fail("/health: %d %r" % (status, body))
    status, body = request(admin, "GET", "/health")
    if status != 200:
        fail("admin /health: %d" % status)
    # one decision per table, each the same as the x86_64 CLI's
    tables = sorted({os.path.basename(p).split(".")[0] for p in glob.glob("tables/samples/*.json")})
    for name in tables:
        sample = sorted(glob.glob("tables/samples/%s.*.json" % name))[0]
        body = open(sample, "rb").read()
        status, got = request(port, "POST", "/decide/%s" % name, body)
        if status != 200:
            fail("POST /decide/%s: %d %r" % (name, status, got))
        table = [t for t in sorted(glob.glob("tables/%s.*" % name)) if ".tests." not in t][0]
        cli = subprocess.run([x86, "decide", table, sample], capture_output=True, timeout=30, check=True).stdout
        if decision(json.loads(got)) != decision(json.loads(cli)):
            fail("POST /decide/%s with %s: %s, the x86_64 CLI says %s" % (name, sample, got, cli))
    status, got = request(port, "POST", "/decide", open("tables/samples/risk.vip_cn.json", "rb").read())
    if status != 200 or json.loads(got)["table"] != "risk":
        fail("POST /decide (default table): %d %r" % (status, got))
    # concurrent keep-alive connections: coroutines switching on aarch64. A connection reset
    # is retried once on a new connection and reported (seen once, in a CI run on a loaded
    # machine, not reproduced since); a wrong answer or a second failure fails the test.
    errors, resets = [], []
    body = b'{"user_tier": "vip", "order_amount_usd": 1500, "country_code": "CN"}'
    def client(n):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            for i in range(50):
                try:
                    s, b = request(port, "POST", "/decide/risk", body, c)
                except (ConnectionError, http.client.RemoteDisconnected) as e:
                    resets.append("client %d, request %d: %r" % (n, i, e))
                    c.close()
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    s, b = request(port, "POST", "/decide/risk", body, c)
                if s != 200 or json.loads(b)["rule_id"] != "rule_001":
                    errors.append("%d %r" % (s, b))
        except Exception as e:
            errors.append(repr(e))
        finally:
            c.close()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads: t.start()
    for t in threads: t.join(120)
    if errors or any(t.is_alive() for t in threads):
        fail("concurrent requests: %r (resets: %r)" % (errors[:5], resets[:5]))
    if resets:
        log.flush(); log.seek(0)
        print("smoke-aarch64: WARNING: %d connection resets, each retried: %r\n%s" % (len(resets), resets[:8], log.read()[-3000:]),
              file=sys.stderr)
    status, got = request(admin, "POST", "/reload")
    if status != 200:
        fail("POST /reload on the admin listener: %d %r" % (status, got))
    proc.send_signal(signal.SIGTERM)
    if messages("STOPPING=1", 20) is None:
        fail("no STOPPING=1 within 20 s of SIGTERM")
    try:
        code = proc.wait(20)
    except subprocess.TimeoutExpired:
        fail("clef serve did not exit within 20 s of SIGTERM")
    if code != 0:
        fail("clef serve exited %d on SIGTERM" % code)
    print("smoke-aarch64: clef serve: READY=1 after %.0f ms under qemu, /health, %d tables decided as on x86_64, "
          "400 concurrent keep-alive requests, /reload, STOPPING=1 and exit 0 on SIGTERM" % (ready_ms, len(tables)))
finally:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    log.seek(0)
    text = log.read()
    if "panicked" in text:
        print(text, file=sys.stderr)
        sys.exit(1)
    notify.close()
    shutil.rmtree(tmp, ignore_errors=True)
PY
echo "smoke-aarch64: passed in $((SECONDS - started)) s"
