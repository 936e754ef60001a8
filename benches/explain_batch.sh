#!/usr/bin/env bash
# Load test of the real binary with wrk (issue 11): what a trace costs and what batching buys.
#
#   bash benches/explain_batch.sh [SECONDS] [CONNECTIONS] [ROUNDS]
#
# Against one server, ROUNDS times each (SECONDS per run, alternating):
#   plain    POST /decide/chat_moderation                (tables/samples/chat_moderation.discussion.json)
#   explain  POST /decide/chat_moderation?explain=true   (the same body)
#   single   POST /decide/risk                           (tables/samples/risk.vip_cn.json)
#   batch    POST /decide/risk/batch                     (100 NDJSON lines: the risk samples in turn)
# and prints per run and as medians: requests/s, decisions/s, p99, and the server's CPU time per
# request and per decision (utime + stime from /proc/PID/stat over the run: load-independent).
# Then the ratios: explain/plain CPU per request (the issue asks at most 3), batch/single
# decisions per second (at least 5). BIN=path uses another binary. Talks only to 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-5}
CONNS=${2:-16}
ROUNDS=${3:-3}
THREADS=${WRK_THREADS:-1}
. benches/common.sh
PORT=$(free_port); ADMIN=$(free_port)
WORK=$(mktemp -d)
trap 'kill $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
CLEF_ADMIN__LISTEN=127.0.0.1:$ADMIN CLEF_LOGGING__LEVEL=warn \
  "$BIN" serve -c config.yaml --host 127.0.0.1 --port "$PORT" 2>"$WORK/server.log" &
PID=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.05; done
post_script() { # file, body file
  cat > "$1" <<LUA
wrk.method = "POST"
wrk.body = io.open("$2"):read("*a")
wrk.headers["Content-Type"] = "application/json"
LUA
}
CHAT=tables/samples/chat_moderation.discussion.json
RISK=tables/samples/risk.vip_cn.json
python3 - "$WORK/batch.ndjson" <<'PY'
import glob, json, sys
samples = [json.dumps(json.load(open(p))) for p in sorted(glob.glob("tables/samples/risk.*.json"))]
with open(sys.argv[1], "w") as f:
    f.write("\n".join(samples[i % len(samples)] for i in range(100)) + "\n")
PY
post_script "$WORK/chat.lua" "$CHAT"
post_script "$WORK/risk.lua" "$RISK"
post_script "$WORK/batch.lua" "$WORK/batch.ndjson"
# each endpoint answers before it is measured
curl -sf -X POST --data-binary "@$CHAT" "http://127.0.0.1:$PORT/decide/chat_moderation?explain=true" | grep -q '"trace"'
lines=$(curl -sf -X POST --data-binary "@$WORK/batch.ndjson" "http://127.0.0.1:$PORT/decide/risk/batch" | grep -c '"rule_id"')
[ "$lines" = 100 ] || { echo "the batch answered $lines decisions, not 100" >&2; exit 1; }
wrk -t1 -c4 -d1s -s "$WORK/risk.lua" "http://127.0.0.1:$PORT/decide/risk" >/dev/null
run() { # name, decisions per request, wrk args...
  local name=$1 per=$2; shift 2
  wrk_measured "$PID" -t"$THREADS" -c"$CONNS" -d"${SECONDS_PER_RUN}s" --latency "$@"
  if echo "$WRK_OUT" | grep -q 'Non-2xx'; then echo "$name: non-2xx answers" >&2; exit 1; fi
  python3 - "$name" "$per" "$RPS" "$P99" "$CPU_US" "$WORK/results" <<'PY'
import sys
name, per, rps, p99, cpu_us, out = sys.argv[1:]
cpu_us = float(cpu_us)
line = "%s %s %.0f %s %.2f %.3f" % (name, per, float(rps), p99, cpu_us, cpu_us / int(per))
print("%-8s %10.0f req/s %10.0f decisions/s  p99 %-8s  server CPU %7.2f us/request %6.3f us/decision"
      % (name, float(rps), float(rps) * int(per), p99, cpu_us, cpu_us / int(per)))
open(out, "a").write(line + "\n")
PY
}
for _ in $(seq "$ROUNDS"); do
  run plain 1 -s "$WORK/chat.lua" "http://127.0.0.1:$PORT/decide/chat_moderation"
  run explain 1 -s "$WORK/chat.lua" "http://127.0.0.1:$PORT/decide/chat_moderation?explain=true"
  run single 1 -s "$WORK/risk.lua" "http://127.0.0.1:$PORT/decide/risk"
  run batch 100 -s "$WORK/batch.lua" "http://127.0.0.1:$PORT/decide/risk/batch"
done
python3 - "$WORK/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, per, rps, p99, cpu, cpu_dec = line.split()
    runs.setdefault(name, []).append((float(rps) * int(per), float(cpu), float(cpu_dec)))
med = {n: [statistics.median(c) for c in zip(*rows)] for n, rows in runs.items()}
for n, (dps, cpu, cpu_dec) in med.items():
    print("median %-7s %10.0f decisions/s  server CPU %7.2f us/request %6.3f us/decision" % (n, dps, cpu, cpu_dec))
print("explain/plain server CPU per request (medians): %.2f (at most 3)" % (med["explain"][1] / med["plain"][1]))
print("batch/single decisions per second (medians): %.2f (at least 5)" % (med["batch"][0] / med["single"][0]))
print("single/batch server CPU per decision (medians): %.2f" % (med["single"][2] / med["batch"][2]))
PY
