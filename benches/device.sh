#!/usr/bin/env bash
# How fast and how small is clef on this box? Run it on the Raspberry Pi, against the running
# service (the default), or against a clef it starts itself (--start).
#
#   bash device.sh                     # the running service: systemd's clef, http://127.0.0.1:8080
#   bash benches/device.sh --start     # a clef of its own on free loopback ports (from a checkout)
#
# For each table that has samples (TABLES/samples/NAME.*.json: every kind of table, whatever
# its file name), it measures with wrk: decisions per second, p50/p99 latency, server CPU time
# per request (from /proc/PID/stat: independent of the load wrk itself puts on the box); and the
# resident memory idle, after the load and at its peak (and the cgroup's peak and limit, such as
# the unit's MemoryMax=), the start-up time (exec to READY=1 and to the first answered
# /health, median of a few starts of a second clef on free loopback ports: the service is not
# touched), and `clef bench` for each table. It prints a short report, then one JSON line.
#
# Options:
#   --url URL          the service (default http://127.0.0.1:8080)
#   --pid PID          the service's process (default: systemd's MainPID of clef, else pidof clef)
#   --bin PATH         the clef binary for start-up and `clef bench` (default: clef on PATH,
#                      /usr/local/bin/clef; with --start target/release/clef)
#   --config PATH      config.yaml for the starts (default /etc/clef/config.yaml; --start: ./config.yaml)
#   --tables DIR       the tables and their samples/ (default: tables beside the config)
#   --token-file FILE  bearer token for decision calls (server.token_file)
#   --start            start a clef of its own (loopback, free ports) and measure that one
#   --wrap "CMD"       run clef through CMD, e.g. --wrap "qemu-aarch64-static -cpu cortex-a72"
#   --memory-max SIZE  with --start: run the server in a memory cgroup with this limit (64M)
#   --duration S       seconds of load per table (default 10)
#   --connections N    wrk connections (default 64); --threads N  wrk threads (default 2)
#   --starts N         start-up measurements (default 5); --bench-n N  decisions per clef bench
#
# Needs wrk (apt-get install wrk), curl and python3. Sends traffic only to the --url given
# (loopback by default) and to the clefs it starts on 127.0.0.1.
set -euo pipefail

URL=http://127.0.0.1:8080 PID='' BIN='' CONFIG='' TABLES='' TOKEN_FILE='' START=0 WRAP='' MEMMAX=''
DURATION=10 CONNS=64 THREADS=2 STARTS=5 BENCH_N=20000
while [ $# -gt 0 ]; do
  case $1 in
    --url) URL=$2; shift ;;
    --pid) PID=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --config) CONFIG=$2; shift ;;
    --tables) TABLES=$2; shift ;;
    --token-file) TOKEN_FILE=$2; shift ;;
    --start) START=1 ;;
    --wrap) WRAP=$2; shift ;;
    --memory-max) MEMMAX=$2; shift ;;
    --duration) DURATION=$2; shift ;;
    --connections) CONNS=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --starts) STARTS=$2; shift ;;
    --bench-n) BENCH_N=$2; shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "device.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
die() { echo "device.sh: $*" >&2; exit 1; }
for tool in wrk curl python3; do
  command -v $tool >/dev/null || die "$tool is required (apt-get install $tool)"
done
[ -z "$MEMMAX" ] || [ "$START" = 1 ] || die "--memory-max needs --start (the service has its unit's MemoryMax=)"

HERE=$(cd "$(dirname "$0")" && pwd)
if [ "$START" = 1 ]; then
  ROOT=$(cd "$HERE/.." && pwd)
  : "${BIN:=$ROOT/target/release/clef}" "${CONFIG:=$ROOT/config.yaml}"
else
  : "${CONFIG:=/etc/clef/config.yaml}"
  [ -n "$BIN" ] || BIN=$(command -v clef || echo /usr/local/bin/clef)
fi
: "${TABLES:=$(dirname "$CONFIG")/tables}"
[ -x "$BIN" ] || die "no clef binary at $BIN (--bin)"
[ -r "$CONFIG" ] || die "cannot read $CONFIG (--config)"
[ -d "$TABLES/samples" ] || die "no samples in $TABLES/samples (--tables): copy tables/samples/ from the repository"
read -r -a RUN <<<"$WRAP"
RUN+=("$BIN")

WORK=$(mktemp -d)
SERVER='' CGROUP=''
cleanup() {
  if [ -n "$SERVER" ]; then
    kill -TERM "$SERVER" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
  fi
  [ -z "$CGROUP" ] || rmdir "$CGROUP" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
AUTH=()
[ -z "$TOKEN_FILE" ] || AUTH=(-H "Authorization: Bearer $(tr -d '\r\n' <"$TOKEN_FILE")")

# --- a memory cgroup for --memory-max --------------------------------------------------------
# A child of this shell's own memory cgroup (so it stays within whatever limits this one):
# cgroup v2 `memory.max` where the unified hierarchy lets us, else v1 `memory.limit_in_bytes`.
make_cgroup() {
  local bytes v2 v1
  bytes=$(python3 -c "import sys; s=sys.argv[1].upper(); m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(float(s[:-1])*m[s[-1]]) if s[-1] in m else int(s))" "$1")
  v2=$(awk -F: '$1=="0" {print $3}' /proc/self/cgroup)
  v1=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
  if [ -n "$v1" ] && [ -d /sys/fs/cgroup/memory ]; then
    CGROUP=/sys/fs/cgroup/memory${v1%/}/clef-device-$$
    mkdir "$CGROUP" && echo "$bytes" >"$CGROUP/memory.limit_in_bytes" || die "cannot make a memory cgroup at $CGROUP (root needed)"
    CG_LIMIT=memory.limit_in_bytes CG_PEAK=memory.max_usage_in_bytes
  elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    CGROUP=/sys/fs/cgroup${v2%/}/clef-device-$$
    { mkdir "$CGROUP" && echo "$bytes" >"$CGROUP/memory.max"; } 2>/dev/null || die "cannot make a memory cgroup at $CGROUP
  (cgroup v2 allows it only below a delegated group; under systemd run this script with
   systemd-run --scope -p MemoryMax=$1 bash $0 --start ... instead of --memory-max)"
    CG_LIMIT=memory.max CG_PEAK=memory.peak
  else
    die "no memory cgroup controller here"
  fi
  echo "memory cgroup: $CGROUP ($CG_LIMIT = $bytes)"
}

# --- the server under test -------------------------------------------------------------------
if [ "$START" = 1 ]; then
  PORT=$(free_port) ADMIN=$(free_port)
  URL=http://127.0.0.1:$PORT
  [ -z "$MEMMAX" ] || make_cgroup "$MEMMAX"
  CLEF_ADMIN__LISTEN=127.0.0.1:$ADMIN CLEF_LOGGING__LEVEL=warn \
    sh -c '[ -z "$1" ] || echo $$ >"$1/cgroup.procs" || exit 99; shift; exec "$@"' sh "$CGROUP" \
    "${RUN[@]}" serve -c "$CONFIG" --host 127.0.0.1 --port "$PORT" 2>"$WORK/server.log" &
  SERVER=$!
  PID=$SERVER
  for _ in $(seq 300); do
    curl -sf -o /dev/null "$URL/health" && break
    kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/server.log" >&2; die "the server did not start"; }
    sleep 0.1
  done
  curl -sf -o /dev/null "$URL/health" || die "the server did not answer /health in 30 s"
elif [ -z "$PID" ]; then
  if command -v systemctl >/dev/null; then PID=$(systemctl show -p MainPID --value clef 2>/dev/null || true); fi
  [ -n "$PID" ] && [ "$PID" != 0 ] || PID=$(pidof -s clef || true)
  [ -n "$PID" ] || die "no running clef (start it: systemctl start clef; or --pid, or --start)"
fi
[ -r "/proc/$PID/stat" ] || die "cannot read /proc/$PID (--pid)"
curl -sf -o /dev/null "${AUTH[@]}" "$URL/health" || die "$URL/health does not answer (--url)"

rss_kb() { awk -v k="$2" '$1==k":" {print $2}' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
cgroup_of() { # the memory cgroup folder of PID (v2, else v1)
  local v2 v1
  v2=$(awk -F: '$1=="0" {print $3}' "/proc/$1/cgroup")
  v1=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' "/proc/$1/cgroup")
  if [ -n "$v1" ] && [ -d "/sys/fs/cgroup/memory$v1" ]; then echo "/sys/fs/cgroup/memory$v1 memory.limit_in_bytes memory.max_usage_in_bytes"
  elif [ -n "$v2" ] && [ -f "/sys/fs/cgroup$v2/memory.max" ]; then echo "/sys/fs/cgroup$v2 memory.max memory.peak"
  fi
}
# Only a cgroup of the server's own (the unit's, or --memory-max) says anything about it.
read -r CG CG_LIMIT CG_PEAK <<<"$(cgroup_of "$PID")" || true
case $CG in
  "$CGROUP" | *clef.service) ;;
  *) CG= ;;
esac
[ -z "$CGROUP" ] || CG=$CGROUP

sleep 1
RSS_IDLE=$(rss_kb "$PID" VmRSS)

# --- the tables and their samples ------------------------------------------------------------
# A sample NAME.CASE.json belongs to the table file NAME.* in TABLES (any kind but *.tests.*).
declare -A SAMPLES TABLE_FILE
for s in "$TABLES"/samples/*.json; do
  [ -e "$s" ] || continue
  name=$(basename "$s"); name=${name%%.*}
  if [ -z "${TABLE_FILE[$name]:-}" ]; then
    for t in "$TABLES/$name".*; do
      case $(basename "$t") in *.tests.*) continue ;; esac
      [ -f "$t" ] && TABLE_FILE[$name]=$t && break
    done
  fi
  [ -n "${TABLE_FILE[$name]:-}" ] || { echo "note: $s has no table in $TABLES; skipped" >&2; continue; }
  SAMPLES[$name]="${SAMPLES[$name]:+${SAMPLES[$name]} }$s"
done
NAMES=$(printf '%s\n' "${!SAMPLES[@]}" | sort)
[ -n "$NAMES" ] || die "no samples for any table in $TABLES/samples"

# --- load, per table -------------------------------------------------------------------------
: >"$WORK/results"
for name in $NAMES; do
  # wrk sends the table's samples in turn
  {
    echo 'local bodies = {}'
    for s in ${SAMPLES[$name]}; do printf 'bodies[#bodies + 1] = io.open("%s"):read("*a")\n' "$s"; done
    echo 'local i = 0'
    echo 'wrk.method = "POST"'
    echo 'wrk.headers["Content-Type"] = "application/json"'
    [ -z "$TOKEN_FILE" ] || printf 'wrk.headers["Authorization"] = "Bearer %s"\n' "$(tr -d '\r\n' <"$TOKEN_FILE")"
    echo 'request = function() i = i % #bodies + 1; return wrk.format(nil, nil, nil, bodies[i]) end'
  } >"$WORK/$name.lua"
  target="$URL/decide/$name"
  code=$(curl -s -o /dev/null -w '%{http_code}' "${AUTH[@]}" -X POST --data-binary @"${SAMPLES[$name]%% *}" "${target}" || true)
  [ "$code" = 200 ] || die "POST $target answered $code (is table $name served there?)"
  wrk -t1 -c8 -d1s -s "$WORK/$name.lua" "$target" >/dev/null # warm-up
  before=$(cpu_ticks "$PID")
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -s "$WORK/$name.lua" "$target")
  after=$(cpu_ticks "$PID")
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  errors=$(awk '/Non-2xx/ {n += $NF} /Socket errors/ {for (i = 4; i <= NF; i += 2) n += $i} END {print n + 0}' <<<"$out")
  bench=$("${RUN[@]}" bench "${TABLE_FILE[$name]}" "${SAMPLES[$name]%% *}" -n "$BENCH_N" --json)
  echo "$name $rps $p50 $p99 $reqs $((after - before)) $errors $bench" >>"$WORK/results"
done
RSS_AFTER=$(rss_kb "$PID" VmRSS)
RSS_PEAK=$(rss_kb "$PID" VmHWM)
CG_FIGURES=
if [ -n "$CG" ]; then
  CG_FIGURES="$(cat "$CG/$CG_LIMIT" 2>/dev/null || echo null) $(cat "$CG/$CG_PEAK" 2>/dev/null || echo null)"
fi
sleep 5
RSS_SETTLED=$(rss_kb "$PID" VmRSS)

# --- start-up: a second clef on free loopback ports, a few times -------------------------------
python3 - "$STARTS" "$CONFIG" "${RUN[@]}" >"$WORK/startup" <<'PY'
import json, os, socket, statistics, subprocess, sys, tempfile, time
starts, config, run = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
ready_ms, health_ms = [], []
with tempfile.TemporaryDirectory() as tmp:
    for i in range(starts):
        path = os.path.join(tmp, "notify%d" % i)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); sock.bind(path); sock.setblocking(False)
        port, admin = free_port(), free_port()
        env = dict(os.environ, NOTIFY_SOCKET=path, CLEF_ADMIN__LISTEN="127.0.0.1:%d" % admin,
                   CLEF_LOGGING__LEVEL="error", CLEF_MODEL__WATCH_FILE="false")
        t0 = time.monotonic()
        proc = subprocess.Popen(run + ["serve", "-c", config, "--host", "127.0.0.1", "--port", str(port)],
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ready = health = None
        while time.monotonic() - t0 < 30 and (ready is None or health is None) and proc.poll() is None:
            if ready is None:
                try:
                    if b"READY=1" in sock.recv(4096): ready = time.monotonic() - t0
                except BlockingIOError:
                    pass
            if health is None:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                        if c.recv(64).startswith(b"HTTP/1.1 200"): health = time.monotonic() - t0
                except OSError:
                    pass
            time.sleep(0.0005)
        proc.terminate()
        try: proc.wait(15)
        except subprocess.TimeoutExpired: proc.kill(); proc.wait()
        sock.close()
        if health is not None: health_ms.append(health * 1e3)
        if ready is not None: ready_ms.append(ready * 1e3)
med = lambda v: round(statistics.median(v), 1) if v else None
print(json.dumps({"health_ms": med(health_ms), "ready_ms": med(ready_ms), "starts": starts,
                  "health_ms_all": [round(x, 1) for x in health_ms]}))
PY

# --- report ----------------------------------------------------------------------------------
python3 - "$WORK/results" "$WORK/startup" "$TICK" "$BIN" "$WRAP" "$URL" "$DURATION" "$CONNS" "$THREADS" \
  "$RSS_IDLE" "$RSS_AFTER" "$RSS_SETTLED" "$RSS_PEAK" "${CG_FIGURES:-}" "$MEMMAX" <<'PY'
import json, os, platform, sys
(results, startup, tick, binary, wrap, url, duration, conns, threads,
 rss_idle, rss_after, rss_settled, rss_peak, cg, memmax) = sys.argv[1:]
tick = int(tick)
def ms(s):
    for unit, f in (("us", 1e-3), ("ms", 1.0), ("s", 1e3)):
        if s.endswith(unit): return float(s[: -len(unit)]) * f
    return float(s)
tables = {}
for line in open(results):
    name, rps, p50, p99, reqs, ticks, errors, bench = line.split(" ", 7)
    b = json.loads(bench)
    tables[name] = {"decisions_per_s": round(float(rps)), "p50_ms": round(ms(p50), 3), "p99_ms": round(ms(p99), 3),
                    "cpu_us_per_request": round(int(ticks) / tick * 1e6 / max(int(reqs), 1), 2), "errors": int(errors),
                    "bench_median_ns": b["median_ns"], "bench_p99_ns": b["p99_ns"], "bench_per_s": b["per_second"]}
up = json.loads(open(startup).read())
mb = lambda kb: round(int(kb) / 1024, 1) if kb else None
cg_limit = cg_peak = None
if cg.strip():
    lim, peak = cg.split()
    cg_limit = None if lim in ("null", "max") or int(lim) > 1 << 60 else round(int(lim) / 2**20, 1)
    cg_peak = None if peak == "null" else round(int(peak) / 2**20, 1)
machine = platform.machine()
model = None
try: model = open("/proc/device-tree/model").read().strip("\0\n")
except OSError: pass
report = {
    "clef_device": 1, "machine": machine, "model": model, "cores": os.cpu_count(),
    "mem_total_mb": round(int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal"))) / 1024),
    "wrap": wrap or None, "binary_bytes": os.path.getsize(binary), "url": url,
    "wrk": {"duration_s": int(duration), "connections": int(conns), "threads": int(threads)},
    "startup_ready_ms": up["ready_ms"], "startup_health_ms": up["health_ms"],
    "rss_idle_mb": mb(rss_idle), "rss_after_load_mb": mb(rss_after), "rss_settled_mb": mb(rss_settled),
    "rss_peak_mb": mb(rss_peak), "cgroup_limit_mb": cg_limit, "cgroup_peak_mb": cg_peak, "tables": tables,
}
print("clef on %s%s, %d cores, %d MB; binary %.2f MB%s" % (model or machine, "", report["cores"], report["mem_total_mb"],
      report["binary_bytes"] / 2**20, " (through %s)" % wrap if wrap else ""))
print("start-up: READY=1 after %s ms, first /health after %s ms (median of %d)" % (up["ready_ms"], up["health_ms"], up["starts"]))
print("resident memory: idle %s MB, after load %s MB, 5 s later %s MB, peak %s MB" % (
      report["rss_idle_mb"], report["rss_after_load_mb"], report["rss_settled_mb"], report["rss_peak_mb"]))
if cg_limit or cg_peak:
    print("cgroup: limit %s MB, peak %s MB (everything in the group, page cache included)" % (cg_limit, cg_peak))
print("load: wrk -t%s -c%s -d%ss per table, POST /decide/TABLE with the table's samples in turn" % (threads, conns, duration))
print("%-16s %10s %9s %9s %11s %7s %12s %12s" % ("table", "decisions/s", "p50 ms", "p99 ms", "CPU µs/req", "errors", "bench median", "bench p99"))
for n, t in tables.items():
    print("%-16s %10d %9.3f %9.3f %11.2f %7d %10d ns %9d ns" % (n, t["decisions_per_s"], t["p50_ms"], t["p99_ms"],
          t["cpu_us_per_request"], t["errors"], t["bench_median_ns"], t["bench_p99_ns"]))
print(json.dumps(report, separators=(",", ":")))
PY
