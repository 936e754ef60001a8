#!/usr/bin/env bash
# The process lifecycle of the real binary under the probes of issue #23, with figures:
#
#   bash benches/lifecycle.sh            # BIN=path/to/clef measures another binary
#
# 1. SIGHUP storm: 1,000 SIGHUPs in 10 s under wrk load. Prints whether the process lived, wrk's
#    non-2xx answers and socket errors, the reloads the log counts, and the threads that do not
#    block SIGHUP (the thread waiting for signals shows it unblocked while it waits).
# 2. A broken table of 100,000 rules dropped in the folder: how long POST /reload takes, the
#    size of its answer and of the log it wrote, the slowest of the kill switches on another
#    table and of the GET /tables made meanwhile, and RSS before, at its peak and after.
# 3. A table file deleted and written again 10 times, gone for 0.3 s or 1.5 s each time (and once
#    renamed away as vim saves), under wrk load with the watcher on: the answers by status (404
#    in the gap, before).
# Needs wrk and curl. Talks only to 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/common.sh
WORK=$(mktemp -d)
PID=
trap 'kill $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT

# Starts a server on WORK/tables (watch_file: $1) and sets PID, PORT, ADMIN.
start() {
  PORT=$(free_port); ADMIN=$(free_port)
  cat > "$WORK/config.yaml" <<YAML
server: {host: 127.0.0.1, port: $PORT}
admin: {listen: "127.0.0.1:$ADMIN"}
model: {tables_dir: ./tables, default_table: risk, watch_file: $1}
YAML
  : > "$WORK/server.log"
  $BIN serve -c "$WORK/config.yaml" 2>"$WORK/server.log" &
  PID=$!
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return; sleep 0.05; done
  echo "clef serve did not start" >&2; cat "$WORK/server.log" >&2; exit 1
}
stop() { kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=; }
non_2xx() { echo "$1" | awk '/Non-2xx/ {n = $NF} END {print n + 0}'; }
statuses() { echo "$1" | awk '/^status / {printf "%s%s %s", sep, $2, $3; sep = ", "}'; }
socket_errors() { echo "$1" | awk '/Socket errors/ {print $0}'; }

mkdir -p "$WORK/tables"
cp tables/risk.json tables/decision_table.json "$WORK/tables/"
cat > "$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.body = io.open("tables/samples/risk.vip_cn.json"):read("*a")
wrk.headers["Content-Type"] = "application/json"
-- answers by status, over every thread: "status 200: N"
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) counts = {} end
function response(status, headers, body) counts[status] = (counts[status] or 0) + 1 end
function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for s, n in pairs(t:get("counts")) do total[s] = (total[s] or 0) + n end
  end
  for s, n in pairs(total) do io.write(string.format("status %d: %d\n", s, n)) end
end
LUA

echo "== 1. 1,000 SIGHUPs in 10 s under load"
start false
wrk -t2 -c16 -d12s -s "$WORK/post.lua" "http://127.0.0.1:$PORT/decide/risk" > "$WORK/wrk1" &
WRK=$!
sleep 0.5
for _ in $(seq 1000); do kill -HUP "$PID" 2>/dev/null || break; sleep 0.01; done
wait $WRK
out=$(cat "$WORK/wrk1")
if kill -0 "$PID" 2>/dev/null; then alive=yes; else alive=NO; fi
unblocked=0
for t in /proc/$PID/task/*; do
  [ "$(basename "$t")" = "$PID" ] && continue
  mask=$(awk '/SigBlk/ {print $2}' "$t/status" 2>/dev/null || echo 1)
  (( (16#$mask & 1) == 0 )) && unblocked=$((unblocked + 1))
done
echo "alive: $alive; requests: $(echo "$out" | awk '/requests in/ {print $1}'), non-2xx: $(non_2xx "$out") ($(statuses "$out"))" \
  "$(socket_errors "$out"); reloads logged: $(grep -c 'reload (SIGHUP)' "$WORK/server.log" || true);" \
  "threads other than the signal thread with SIGHUP unblocked: $unblocked"
stop

echo "== 2. a broken table of 100,000 rules"
start false
python3 - "$WORK/broken.json" <<'PY'
import sys
rules = []
for i in range(100000):
    rules.append({0: '{"id": "r%d", "condition": "bogus(x) >", "action": {}}',
                  1: '{"id": "r%d", "condition": "x > 1", "action": "not an object"}',
                  2: '{"id": "r%d", "condition": "x >", "action": {}}'}[i % 3] % i)
open(sys.argv[1], "w").write("[\n" + ",\n".join(rules) + "\n]\n")
PY
echo "file: $(( $(stat -c %s "$WORK/broken.json") / 1024 )) KiB"
sleep 1
rss_before=$(rss_kb "$PID"); log_before=$(stat -c %s "$WORK/server.log")
cp "$WORK/broken.json" "$WORK/tables/broken.json"
curl -s -o "$WORK/reload.json" -w '%{time_total}\n' -X POST "http://127.0.0.1:$ADMIN/reload" > "$WORK/reload.time" &
RELOAD=$!
slowest_switch=0; slowest_list=0; peak=$rss_before; n=0; body=false
while kill -0 $RELOAD 2>/dev/null; do
  t=$(curl -s -o /dev/null -w '%{time_total}' -X PUT --data "$body" "http://127.0.0.1:$ADMIN/tables/risk/rules/rule_001/enabled")
  slowest_switch=$(awk -v a="$slowest_switch" -v b="$t" 'BEGIN {print (b > a) ? b : a}')
  t=$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$PORT/tables")
  slowest_list=$(awk -v a="$slowest_list" -v b="$t" 'BEGIN {print (b > a) ? b : a}')
  r=$(rss_kb "$PID"); (( r > peak )) && peak=$r
  n=$((n + 1)); if [ $body = false ]; then body=true; else body=false; fi
done
wait $RELOAD
sleep 3
echo "POST /reload: $(cat "$WORK/reload.time") s, answer $(stat -c %s "$WORK/reload.json") bytes;" \
  "log +$(( $(stat -c %s "$WORK/server.log") - log_before )) bytes"
echo "meanwhile: $n kill switches on another table (slowest ${slowest_switch} s), GET /tables slowest ${slowest_list} s"
echo "RSS: before $((rss_before / 1024)) MiB, peak $((peak / 1024)) MiB, 3 s after $(( $(rss_kb "$PID") / 1024 )) MiB"
again=$(curl -s -o /dev/null -w '%{time_total}' -X POST "http://127.0.0.1:$ADMIN/reload")
echo "the same broken bytes again: POST /reload $again s"
stop
rm -f "$WORK/tables/broken.json"

echo "== 3. a table file deleted and written again under load (watcher on)"
start true
cp "$WORK/tables/risk.json" "$WORK/risk.json"
wrk -t2 -c16 -d22s -s "$WORK/post.lua" "http://127.0.0.1:$PORT/decide/risk" > "$WORK/wrk3" &
WRK=$!
sleep 0.5
# gone for 0.3 s (between two looks of the watcher, or not) and for 1.5 s (within the grace)
for gap in 0.3 0.3 0.3 0.3 0.3 1.5 1.5 1.5 1.5 1.5; do
  rm "$WORK/tables/risk.json"; sleep $gap; cp "$WORK/risk.json" "$WORK/tables/risk.json"; sleep 1
done
mv "$WORK/tables/risk.json" "$WORK/tables/risk.json~"; sleep 0.7
cp "$WORK/risk.json" "$WORK/tables/risk.json"; rm "$WORK/tables/risk.json~"
wait $WRK
out=$(cat "$WORK/wrk3")
echo "requests: $(echo "$out" | awk '/requests in/ {print $1}'), non-2xx: $(non_2xx "$out") ($(statuses "$out"))" \
  "$(socket_errors "$out")"
echo "reloads that saw the file missing: $(grep -c 'its file is gone' "$WORK/server.log" || true)"
stop
