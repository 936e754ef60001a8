#!/usr/bin/env bash
# What `GET /snapshots` costs (issue 25): how long a listing of the recent window takes, what it
# does to the server's memory, and whether decisions slow down while listings run.
#
#   bash benches/recent_load.sh [SECONDS] [CONNECTIONS] [LISTINGS] [ROUNDS]
#
# Starts one server on the repository's config and tables with every decision recorded
# (snapshots on, sample_rate 1.0, the default 1 MiB recent window), fills the window with
# SECONDS of wrk (CONNECTIONS connections, POST /decide to `risk` and `agent_tools` in turn),
# then times LISTINGS sequential listings of each query below on the idle server (median and
# 90th percentile of curl's total time), and runs wrk ROUNDS times without and with a loop of
# listings beside it (the loop runs the whole-window queries back to back for the whole run),
# printing /decide's requests/s, p50 and p99 for each. The server's resident memory (VmRSS) is
# printed before, after the fill, during the listings, and after. Needs wrk. Talks only to
# 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-10}
CONNS=${2:-32}
LISTINGS=${3:-30}
ROUNDS=${4:-2}
THREADS=${WRK_THREADS:-2}
. benches/common.sh
WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
PORT=$(free_port)
ADMIN=$(free_port)
env CLEF_ADMIN__LISTEN=127.0.0.1:$ADMIN CLEF_LOGGING__LEVEL=warn CLEF_MODEL__WATCH_FILE=false \
  STATE_DIRECTORY="$WORK/state" CLEF_SNAPSHOTS__ENABLED=true CLEF_SNAPSHOTS__SAMPLE_RATE=1.0 \
  CLEF_SNAPSHOTS__DIR="$WORK/snaps" "$BIN" serve -c config.yaml --host 127.0.0.1 --port "$PORT" 2>"$WORK/log" &
PID=$!
PIDS+=("$PID")
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.05; done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { echo "the server did not start:" >&2; cat "$WORK/log" >&2; exit 1; }
URL=http://127.0.0.1:$ADMIN/snapshots

# risk and agent_tools decisions in turn: the listings below have something to tell apart
cat > "$WORK/mixed.lua" <<'LUA'
local reqs = {}
local function add(path, file)
  local f = assert(io.open(file))
  local body = f:read("*a")
  f:close()
  table.insert(reqs, wrk.format("POST", path, {["Content-Type"] = "application/json"}, body))
end
add("/decide/risk", "tables/samples/risk.vip_cn.json")
add("/decide/agent_tools", "tables/samples/agent_tools.rm_rf_root.json")
add("/decide/agent_tools", "tables/samples/agent_tools.cargo_test.json")
add("/decide/agent_tools", "tables/samples/agent_tools.unknown_tool.json")
add("/decide/agent_tools", "tables/samples/agent_tools.curl_sh.json")
local i = 0
request = function()
  i = i + 1
  return reqs[(i % #reqs) + 1]
end
LUA

window() { curl -s "$URL?limit=0" | python3 -c 'import json,sys; w=json.load(sys.stdin)["window"]; print("%d snapshots, %s .. %s" % (w["snapshots"], w["oldest"], w["newest"]))'; }
echo "RSS before: $(rss_mb "$PID") MB"
wrk -t"$THREADS" -c"$CONNS" -d"${SECONDS_PER_RUN}s" -s "$WORK/mixed.lua" "http://127.0.0.1:$PORT/" | awk '/Requests\/sec/ {print "fill: " $2 " req/s"}'
sleep 2
echo "RSS after the fill (idle 2 s): $(rss_mb "$PID") MB; window: $(window)"

# name|query
QUERIES=(
  "newest 1000|limit=1000"
  "newest 100 (default)|"
  "filtered, whole window, no match (rule= reads past each input)|rule=no_such_rule&limit=1000"
  "filtered, whole window, no match (table= reads the first fields only)|table=no_such_table&limit=1000"
  "filtered, matches spread over the window|table=agent_tools&action=decision:deny&limit=1000"
)
for q in "${QUERIES[@]}"; do
  name=${q%%|*}
  query=${q#*|}
  rm -f "$WORK/times"
  for _ in $(seq "$LISTINGS"); do
    curl -s -o "$WORK/body" -w '%{time_total} %{size_download}\n' "$URL?$query" >> "$WORK/times"
  done
  python3 - "$WORK/times" "$WORK/body" "$name" "$query" <<'PY'
import json, statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
times = sorted(float(t) * 1e3 for t, _ in rows)
body = json.load(open(sys.argv[2]))
p90 = times[min(len(times) - 1, int(len(times) * 0.9))]
print("GET /snapshots?%-60s %-62s median %6.1f ms  p90 %6.1f ms  count %4d  truncated %-5s  %7d bytes"
      % (sys.argv[4], sys.argv[3], statistics.median(times), p90, body["count"], body["truncated"], int(rows[-1][1])))
PY
done

# /decide with and without listings running beside it
lister() {
  while [ ! -e "$WORK/stop" ]; do
    curl -s -o /dev/null "$URL?rule=no_such_rule&limit=1000"
    curl -s -o /dev/null "$URL?limit=1000"
    echo >> "$WORK/listed"
  done
}
run() { # label, with listings (0/1)
  local label=$1 with=$2 out sampler lister_pid=
  rm -f "$WORK/stop" "$WORK/listed" "$WORK/mid-rss"
  if [ "$with" = 1 ]; then lister & lister_pid=$!; fi
  ( sleep "$(python3 -c "print($SECONDS_PER_RUN / 2)")"; rss_mb "$PID" > "$WORK/mid-rss" ) &
  sampler=$!
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/mixed.lua" "http://127.0.0.1:$PORT/")
  touch "$WORK/stop"
  wait "$sampler"
  if [ -n "$lister_pid" ]; then wait "$lister_pid"; fi
  printf '/decide %-22s %10s req/s  p50 %-8s p99 %-8s RSS mid-run %s MB  listing pairs done: %s\n' "$label" \
    "$(echo "$out" | awk '/Requests\/sec/ {print $2}')" "$(echo "$out" | awk '$1=="50%" {print $2}')" \
    "$(echo "$out" | awk '$1=="99%" {print $2}')" "$(cat "$WORK/mid-rss")" "$( [ -e "$WORK/listed" ] && wc -l < "$WORK/listed" || echo 0)"
}
for _ in $(seq "$ROUNDS"); do
  run "without listings" 0
  run "with listings" 1
done
for t in 1 3; do
  sleep $((t == 1 ? 1 : 2))
  echo "RSS ${t} s after: $(rss_mb "$PID") MB"
done
