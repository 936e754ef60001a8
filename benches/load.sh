#!/usr/bin/env bash
# Load test of the real binary with wrk (issue #3): POST /decide against GET /health in one run.
#
#   bash benches/load.sh [SECONDS] [CONNECTIONS] [ROUNDS]
#   ALSO=edge_routing:tables/samples/edge_routing.mobile_medium.json bash benches/load.sh
#
# Runs GET /health and POST /decide (the default table, risk) alternately ROUNDS times each
# (SECONDS per run) against one server and prints, per run and as medians: requests/s, p50/p99
# latency, server CPU time per request (from /proc/PID/stat: load-independent), and the
# resident memory idle and after. With ALSO=TABLE:BODY, each round also posts BODY to
# /decide/TABLE, and the medians compare it with POST /decide.
# Needs wrk (apt-get install wrk). Talks only to 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-10}
CONNS=${2:-64}
ROUNDS=${3:-3}
THREADS=${WRK_THREADS:-2}
. benches/common.sh
PORT=$(free_port); ADMIN=$(free_port)
WORK=$(mktemp -d)
trap 'kill $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
CLEF_ADMIN__LISTEN=127.0.0.1:$ADMIN CLEF_LOGGING__LEVEL=warn \
  $BIN serve -c config.yaml --host 127.0.0.1 --port "$PORT" 2>"$WORK/server.log" &
PID=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.05; done
BODY=tables/samples/risk.vip_cn.json
cat > "$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.body = io.open("$BODY"):read("*a")
wrk.headers["Content-Type"] = "application/json"
LUA
ALSO=${ALSO:-}
if [ -n "$ALSO" ]; then
  ALSO_TABLE=${ALSO%%:*}
  ALSO_BODY=${ALSO#*:}
  cat > "$WORK/also.lua" <<LUA
wrk.method = "POST"
wrk.body = io.open("$ALSO_BODY"):read("*a")
wrk.headers["Content-Type"] = "application/json"
LUA
  curl -sf -X POST --data-binary "@$ALSO_BODY" "http://127.0.0.1:$PORT/decide/$ALSO_TABLE" >/dev/null \
    || { echo "POST /decide/$ALSO_TABLE fails" >&2; exit 1; }
fi
TICK=$(getconf CLK_TCK)
sleep 1
echo "idle RSS: $(( $(rss_kb $PID) / 1024 )).$(( ($(rss_kb $PID) % 1024) * 10 / 1024 )) MB"
# warm-up
wrk -t1 -c8 -d1s "http://127.0.0.1:$PORT/health" >/dev/null
run() { # name, extra wrk args...
  local name=$1; shift
  local before after out reqs
  before=$(cpu_ticks $PID)
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"${SECONDS_PER_RUN}s" --latency "$@")
  after=$(cpu_ticks $PID)
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  local rps p50 p99 errors
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  p50=$(echo "$out" | awk '$1=="50%" {print $2}')
  p99=$(echo "$out" | awk '$1=="99%" {print $2}')
  errors=$(echo "$out" | awk '/Non-2xx|Socket errors/ {print}' | tr '\n' ' ')
  local cpu_us
  cpu_us=$(python3 -c "print(round(($after-$before)/$TICK*1e6/$reqs, 2))")
  printf '%-8s %10s req/s  p50 %-8s p99 %-8s  server CPU %s µs/request  %s\n' "$name" "$rps" "$p50" "$p99" "$cpu_us" "$errors"
  echo "$name $rps $p99 $cpu_us" >> "$WORK/results"
}
for _ in $(seq "$ROUNDS"); do
  run health "http://127.0.0.1:$PORT/health"
  run decide -s "$WORK/post.lua" "http://127.0.0.1:$PORT/decide"
  if [ -n "$ALSO" ]; then
    run "$ALSO_TABLE" -s "$WORK/also.lua" "http://127.0.0.1:$PORT/decide/$ALSO_TABLE"
  fi
done
echo "RSS after: $(( $(rss_kb $PID) / 1024 )).$(( ($(rss_kb $PID) % 1024) * 10 / 1024 )) MB"
python3 - "$WORK/results" <<'PY'
import statistics, sys
def ms(s):
    return float(s[:-2]) if s.endswith("ms") else float(s[:-2]) / 1000 if s.endswith("us") else float(s[:-1]) * 1000
runs = {}
for line in open(sys.argv[1]):
    name, rps, p99, cpu = line.split()
    runs.setdefault(name, []).append((float(rps), ms(p99), float(cpu)))
med = {n: [statistics.median(col) for col in zip(*rows)] for n, rows in runs.items()}
for n, (rps, p99, cpu) in med.items():
    print("median %-7s %10.0f req/s  p99 %6.2f ms  server CPU %5.2f us/request" % (n, rps, p99, cpu))
h, d = med["health"], med["decide"]
print("decide/health (medians): throughput %.2f, p99 %.2f, CPU per request %.2f" % (d[0] / h[0], d[1] / h[1], d[2] / h[2]))
for n, a in med.items():
    if n not in ("health", "decide"):
        print("%s/decide (medians): throughput %.2f, p99 %.2f, CPU per request %.2f" % (n, a[0] / d[0], a[1] / d[1], a[2] / d[2]))
PY
