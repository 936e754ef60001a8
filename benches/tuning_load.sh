#!/usr/bin/env bash
# Load test of the real binary with wrk (issue 13): what tuning costs a decision as served.
#
#   bash benches/tuning_load.sh [SECONDS] [CONNECTIONS] [ROUNDS]
#
# Two servers on the same two tables, one with `tuning: {enabled: true, tables: [...]}` and
# one without (snapshots off in both, so a tuned decision also pays for making its id):
#   pay             a 200-rule Jev table whose last rule reads a tunable parameter
#                   (the table of benches/tuning.rs), body {"tier": "t3", "amount": 20}
#   search_rewrite  the example rule set (tables/samples/search_rewrite.mobile_high_errors.json)
# ROUNDS times, each table against each server in turn (SECONDS per run, which server goes
# first alternating from round to round), it prints requests/s,
# p99 and the server's CPU time per request (utime + stime from /proc/PID/stat over the run:
# load-independent), then per table the median CPU per request tuned / untuned, and the RSS of
# both servers before and after. BIN=path uses another binary. Talks only to 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-5}
CONNS=${2:-16}
ROUNDS=${3:-3}
THREADS=${WRK_THREADS:-1}
. benches/common.sh
WORK=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
mkdir "$WORK/tables"
cp tables/search_rewrite.yaml "$WORK/tables/"
python3 - "$WORK/tables/pay.json" <<'PY'
import json, sys
rules = [{"id": f"r{i}", "condition": f'tier == "t{i % 20}" && amount > {1000 + i}', "action": {"n": i}}
         for i in range(199)]
rules.append({"id": "last", "condition": "amount < params.limit", "action": {"allow": True}})
table = {"params": {"limit": {"value": 50, "min": 0, "max": 100, "step": 5, "tunable": True}}, "rules": rules}
json.dump(table, open(sys.argv[1], "w"))
PY
echo '{"tier": "t3", "amount": 20}' > "$WORK/pay.json"
cp tables/samples/search_rewrite.mobile_high_errors.json "$WORK/search_rewrite.json"
start() { # name, extra config
  local port
  port=$(free_port)
  printf 'model: {tables_dir: tables, watch_file: false}\nadmin: {listen: ""}\nlogging: {level: warn}\nstate_dir: state-%s\n%s\n' \
    "$1" "$2" > "$WORK/$1.yaml"
  "$BIN" serve -c "$WORK/$1.yaml" --host 127.0.0.1 --port "$port" 2>"$WORK/$1.log" &
  PIDS+=($!)
  eval "PID_$1=$!; PORT_$1=$port"
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return; sleep 0.05; done
  echo "the $1 server did not answer /health: $(cat "$WORK/$1.log")" >&2
  exit 1
}
start off ""
start on "tuning: {enabled: true, tables: [search_rewrite, pay]}"
for t in pay search_rewrite; do
  cat > "$WORK/$t.lua" <<LUA
wrk.method = "POST"
wrk.body = io.open("$WORK/$t.json"):read("*a")
wrk.headers["Content-Type"] = "application/json"
LUA
  # the tuned server names the arm of each decision, the other does not
  on=$(curl -sS -X POST --data-binary "@$WORK/$t.json" "http://127.0.0.1:$PORT_on/decide/$t")
  off=$(curl -sS -X POST --data-binary "@$WORK/$t.json" "http://127.0.0.1:$PORT_off/decide/$t")
  case "$on" in *'"variant"'*) ;; *) echo "the tuned server's $t answer has no variant: $on" >&2; exit 1 ;; esac
  case "$off" in *'"variant"'*) echo "the untuned server's $t answer has a variant: $off" >&2; exit 1 ;; esac
  wrk -t1 -c4 -d1s -s "$WORK/$t.lua" "http://127.0.0.1:$PORT_on/decide/$t" >/dev/null
  wrk -t1 -c4 -d1s -s "$WORK/$t.lua" "http://127.0.0.1:$PORT_off/decide/$t" >/dev/null
done
echo "RSS before: untuned $(rss_mb $PID_off) MB, tuned $(rss_mb $PID_on) MB"
run() { # table, server (on|off)
  local pid port
  pid=$(eval echo "\$PID_$2"); port=$(eval echo "\$PORT_$2")
  wrk_measured "$pid" -t"$THREADS" -c"$CONNS" -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/$1.lua" "http://127.0.0.1:$port/decide/$1"
  if echo "$WRK_OUT" | grep -q 'Non-2xx\|Socket errors'; then echo "$1/$2: errors: $WRK_OUT" >&2; exit 1; fi
  printf '%-15s tuning %-3s %9.0f req/s  p99 %-8s  server CPU %6.2f us/request\n' "$1" "$2" "$RPS" "$P99" "$CPU_US"
  echo "$1 $2 $CPU_US" >> "$WORK/results"
}
for round in $(seq "$ROUNDS"); do
  for t in pay search_rewrite; do
    # which server goes first alternates, so that neither always follows the other
    if [ $((round % 2)) = 1 ]; then run "$t" off; run "$t" on; else run "$t" on; run "$t" off; fi
  done
done
echo "RSS after: untuned $(rss_mb $PID_off) MB, tuned $(rss_mb $PID_on) MB"
python3 - "$WORK/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    table, server, cpu = line.split()
    runs.setdefault((table, server), []).append(float(cpu))
for table in ("pay", "search_rewrite"):
    off, on = statistics.median(runs[(table, "off")]), statistics.median(runs[(table, "on")])
    print("%-15s server CPU per request (medians): untuned %.2f us, tuned %.2f us: %+.1f%% (at most +5%%)"
          % (table, off, on, (on / off - 1) * 100))
PY
