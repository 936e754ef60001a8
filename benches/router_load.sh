#!/usr/bin/env bash
# Load test of the router (issue 9) with wrk against real clef processes on 127.0.0.1.
#
#   bash benches/router_load.sh [SECONDS] [CONNECTIONS] [ROUNDS]
#
# 1. Hung peer: p99 of locally decided requests on a router whose only peer accepts /health
#    probes and never answers (probed every 100 ms, each probe hanging to its 80 ms timeout),
#    against the same router config without that peer, alternately ROUNDS times.
# 2. Forwarded vs local: one router that decides table `u` itself and forwards table `t` to a
#    peer (it does not serve `t`); server CPU time per request of the router process (from
#    /proc/PID/stat utime+stime), forwarded against local, alternately ROUNDS times; every
#    request must succeed (wrk's non-2xx and socket errors are printed).
# 3. Resident memory of the three routers before the runs, in the middle of each run and after.
# Prints each run and the medians. Needs wrk and python3. Talks only to 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-8}
CONNS=${2:-32}
ROUNDS=${3:-3}
THREADS=${WRK_THREADS:-1}
. benches/common.sh
WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT

# a peer that accepts and never answers (for 60 s per connection)
HANG=$(free_port)
python3 - "$HANG" <<'PY' &
import socket, sys, threading, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1024)
held = []
while True:
    c, _ = s.accept(); held.append(c)
    if len(held) > 2000: held.pop(0).close()
PY
PIDS+=($!)

TABLE='{"default": {"a": "default"}, "rules": [{"id": "big", "condition": "x > 10", "action": {"a": "big"}}, {"id": "vip", "condition": "tier == \"vip\" && x > 1", "action": {"a": "vip"}}]}'
start() { # name, port, router section, tables...
  local name=$1 port=$2 router=$3; shift 3
  mkdir -p "$WORK/$name/tables"
  for t in "$@"; do echo "$TABLE" > "$WORK/$name/tables/$t.json"; done
  printf 'server: {host: 127.0.0.1, port: %s}\nadmin: {listen: "127.0.0.1:%s"}\nmodel: {watch_file: false}\nlogging: {level: warn}\n%s\n' \
    "$port" "$(free_port)" "$router" > "$WORK/$name/config.yaml"
  $BIN serve -c "$WORK/$name/config.yaml" 2>"$WORK/$name/log" &
  PIDS+=($!)
  eval "PID_$name=$!"
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return; sleep 0.05; done
  echo "$name did not start:"; cat "$WORK/$name/log"; exit 1
}
HEALTH='health: {interval_ms: 100, timeout_ms: 80, unhealthy_after: 3, healthy_after: 1}'
P_PEER=$(free_port); P_HUNG=$(free_port); P_ALONE=$(free_port); P_FWD=$(free_port)
start peer "$P_PEER" "" t
start hung "$P_HUNG" "router: {forward_timeout_ms: 1000, $HEALTH, instances: [{id: local}, {id: hangs, addr: \"127.0.0.1:$HANG\"}]}" t
start alone "$P_ALONE" "router: {forward_timeout_ms: 1000, $HEALTH, instances: [{id: local}]}" t
start fwd "$P_FWD" "router: {forward_timeout_ms: 1000, $HEALTH, instances: [{id: local}, {id: peer, addr: \"127.0.0.1:$P_PEER\"}]}" u
sleep 1
curl -sf -XPOST "http://127.0.0.1:$P_FWD/decide/t" -d '{"x": 20}' | grep -q '"instance":"peer"' || { echo "t is not forwarded"; exit 1; }
curl -sf -XPOST "http://127.0.0.1:$P_FWD/decide/u" -d '{"x": 20}' | grep -q '"instance":"local"' || { echo "u is not local"; exit 1; }

cat > "$WORK/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"x": 20, "tier": "vip", "user": {"id": "u-1", "country": "JP"}}'
wrk.headers["Content-Type"] = "application/json"
LUA
rss_all() { echo "hung $(rss_mb "$PID_hung") MB, alone $(rss_mb "$PID_alone") MB, fwd $(rss_mb "$PID_fwd") MB"; }
TICK=$(getconf CLK_TCK)
declare -A P99 CPU
run() { # label, pid, url
  local label=$1 pid=$2 url=$3 before after out reqs errors
  before=$(cpu_ticks "$pid")
  (sleep "$((SECONDS_PER_RUN / 2))"; rss_mb "$pid" > "$WORK/rss_during") &
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/post.lua" "$url")
  after=$(cpu_ticks "$pid")
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  errors=$(echo "$out" | grep -E 'Non-2xx|Socket errors' || true)
  local p99 us
  p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
  us=$(python3 -c "print(round(($after - $before) / $TICK / $reqs * 1e6, 2))")
  echo "$label: $reqs requests, $(echo "$out" | awk '/Requests\/sec/ {print $2}') req/s, p99 $p99, router CPU ${us} us/request, RSS during $(cat "$WORK/rss_during") MB ${errors:+ERRORS: $errors}"
  P99[$label]+="$p99 "; CPU[$label]+="$us "
}
echo "RSS before: $(rss_all)"
wrk -t1 -c8 -d1s -s "$WORK/post.lua" "http://127.0.0.1:$P_HUNG/decide/t" >/dev/null
for r in $(seq "$ROUNDS"); do
  run "local, hung peer" "$PID_hung" "http://127.0.0.1:$P_HUNG/decide/t"
  run "local, no peer" "$PID_alone" "http://127.0.0.1:$P_ALONE/decide/t"
  run "forwarded" "$PID_fwd" "http://127.0.0.1:$P_FWD/decide/t"
  run "local on the forwarding router" "$PID_fwd" "http://127.0.0.1:$P_FWD/decide/u"
done
median() { python3 -c "
import sys, statistics
def us(v):
    for unit, f in (('us', 1), ('ms', 1000), ('s', 1e6)):
        if v.endswith(unit) and (unit != 's' or not v.endswith(('us', 'ms'))): return float(v[:-len(unit)]) * f
    return float(v)
print(round(statistics.median(us(v) for v in sys.argv[1:]), 2))" $1; }
echo "RSS after: $(rss_all)"
echo "--- medians over $ROUNDS rounds"
for label in "local, hung peer" "local, no peer"; do echo "$label: p99 $(median "${P99[$label]}") us"; done
for label in "forwarded" "local on the forwarding router"; do echo "$label: router CPU $(median "${CPU[$label]}") us/request"; done
curl -s "http://127.0.0.1:$(grep -o 'listen: "[^"]*"' "$WORK/hung/config.yaml" | grep -o '[0-9]*"$' | tr -d '"')/router" | python3 -c 'import json,sys; [print("hung router sees", i["id"], i["state"], "probes failed", i["probes_failed"]) for i in json.load(sys.stdin)["instances"]]'
