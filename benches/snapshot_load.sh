#!/usr/bin/env bash
# What recording every decision costs (issue #10): POST /decide with snapshots on at
# sample_rate 1.0 against the same server with snapshots off, in one run; then how fast
# `clef replay` goes through what was recorded.
#
#   bash benches/snapshot_load.sh [SECONDS] [CONNECTIONS] [ROUNDS]
#
# Starts two servers on the repository's config and tables (snapshots off; snapshots on, every
# decision recorded to a temporary folder), warms both, then runs wrk against each in turn,
# ROUNDS times (SECONDS per run; only one server is loaded at a time), and prints requests/s,
# p50/p99 per run, the medians and their ratio (target: on/off >= 0.85), the recording server's
# resident memory before, during (sampled in the middle of each of its runs) and 1, 3 and 5 s
# after, and its snapshot counters. Then it times `clef replay` over every snapshot recorded (CPU
# time of the process: snapshots per second per core; target: >= 200,000).
# Needs wrk. Talks only to 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-10}
CONNS=${2:-64}
ROUNDS=${3:-5}
THREADS=${WRK_THREADS:-2}
. benches/common.sh
WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
start() { # name, extra env...
  local name=$1; shift
  local port admin
  port=$(free_port); admin=$(free_port)
  env CLEF_ADMIN__LISTEN=127.0.0.1:$admin CLEF_LOGGING__LEVEL=warn CLEF_MODEL__WATCH_FILE=false STATE_DIRECTORY="$WORK/state-$name" "$@" \
    "$BIN" serve -c config.yaml --host 127.0.0.1 --port "$port" 2>"$WORK/$name.log" &
  PIDS+=($!)
  echo "$name $! $port $admin" >> "$WORK/servers"
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return; sleep 0.05; done
  echo "$name did not start:" >&2; cat "$WORK/$name.log" >&2; exit 1
}
start off CLEF_SNAPSHOTS__ENABLED=false
start on CLEF_SNAPSHOTS__ENABLED=true CLEF_SNAPSHOTS__SAMPLE_RATE=1.0 CLEF_SNAPSHOTS__DIR="$WORK/snaps"
field() { awk -v n="$1" -v c="$2" '$1==n {print $c}' "$WORK/servers"; }
ON_PID=$(field on 2); ON_ADMIN=$(field on 4)
BODY=tables/samples/risk.vip_cn.json
cat > "$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.body = io.open("$BODY"):read("*a")
wrk.headers["Content-Type"] = "application/json"
LUA
curl -sf -X POST --data-binary "@$BODY" "http://127.0.0.1:$(field on 3)/decide" | grep -q snapshot_id \
  || { echo "the recording server gives no snapshot_id" >&2; exit 1; }
echo "RSS before: on $(rss_mb "$ON_PID") MB, off $(rss_mb "$(field off 2)") MB"
for s in off on; do wrk -t1 -c8 -d2s -s "$WORK/post.lua" "http://127.0.0.1:$(field $s 3)/decide" >/dev/null; done
run() { # name
  local name=$1 port pid out rps p50 p99 errors mid
  port=$(field "$name" 3); pid=$(field "$name" 2)
  ( sleep "$(python3 -c "print($SECONDS_PER_RUN / 2)")"; rss_mb "$pid" > "$WORK/mid-rss" ) &
  local sampler=$!
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/post.lua" "http://127.0.0.1:$port/decide")
  wait "$sampler"
  mid=$(cat "$WORK/mid-rss")
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  p50=$(echo "$out" | awk '$1=="50%" {print $2}')
  p99=$(echo "$out" | awk '$1=="99%" {print $2}')
  errors=$(echo "$out" | awk '/Non-2xx|Socket errors/ {print}' | tr '\n' ' ')
  printf 'snapshots %-4s %10s req/s  p50 %-8s p99 %-8s RSS during %s MB  %s\n' "$name" "$rps" "$p50" "$p99" "$mid" "$errors"
  echo "$name $rps $mid" >> "$WORK/results"
}
for _ in $(seq "$ROUNDS"); do
  run off
  run on
done
for t in 1 3 5; do # seconds after the last run
  sleep $((t == 1 ? 1 : 2))
  echo "RSS ${t} s after: on $(rss_mb "$ON_PID") MB, off $(rss_mb "$(field off 2)") MB"
done
curl -s "http://127.0.0.1:$ON_ADMIN/metrics" | grep -E '^clef_snapshots_[a-z_]+ ' || true
python3 - "$WORK/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, rps, rss = line.split()
    runs.setdefault(name, []).append((float(rps), float(rss)))
med = {n: (statistics.median(r for r, _ in rows), max(m for _, m in rows)) for n, rows in runs.items()}
for n in ("off", "on"):
    print("median snapshots %-3s %10.0f req/s  (peak RSS during runs %.1f MB)" % (n, med[n][0], med[n][1]))
print("on/off throughput (medians): %.3f  (target >= 0.85)" % (med["on"][0] / med["off"][0]))
PY
# stop the recorder so that every snapshot is on disk, then replay them all
kill -TERM "$ON_PID"; wait "$ON_PID" 2>/dev/null || true
SNAPSHOT_BYTES=$(du -sb "$WORK/snaps" | awk '{print $1}')
/usr/bin/time -f '%U %S %e %M' -o "$WORK/replay-time" "$BIN" replay "$WORK/snaps" --table tables/risk.json --json > "$WORK/replay.json"
python3 - "$WORK/replay.json" "$WORK/replay-time" "$SNAPSHOT_BYTES" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
user, system, wall, max_kb = open(sys.argv[2]).read().split()
n = report["decisions"]
cpu = float(user) + float(system)
print("clef replay: %d snapshots (%.1f MB on disk) in %.2f s CPU (%.2f s wall, peak RSS %.1f MB): %.0f snapshots/s per core (target >= 200,000); correctness %.4f"
      % (n, int(sys.argv[3]) / 1e6, cpu, float(wall), int(max_kb) / 1024, n / cpu, report["correctness"]))
PY
