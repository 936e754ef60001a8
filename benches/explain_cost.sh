#!/usr/bin/env bash
# What `?explain=true` costs, served (issue 28).
#
#   bash benches/explain_cost.sh [SECONDS] [ROUNDS] [RULES] [SHAPE]
#
# SHAPE is textmod (default: a moderation table, benches/textmod_workload.py, about a distinct
# regex per rule), mixed or nested (policy tables, benches/policy_workload.py, where an
# explanation writes a line for each of the hundreds of rules tried). Writes a table of RULES
# rules (default 500) and two bodies: the workload's input (1-2 KB) and the same input grown to
# 4 KiB (its longest string repeated). Against one server with one worker, ROUNDS times each (SECONDS per run, wrk
# -t1 -c8, alternating plain and explain), it prints the server's CPU time per request (utime +
# stime from /proc/PID/stat over the run: independent of the load) and, per body, the median
# explain/plain ratio (the issue asks at most 3). BIN=path uses another binary. Talks only to
# 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-4}
ROUNDS=${2:-3}
RULES=${3:-500}
SHAPE=${4:-textmod}
. benches/common.sh
WORK=$(mktemp -d)
trap 'kill $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
mkdir "$WORK/tables"
case "$SHAPE" in
  textmod) python3 benches/textmod_workload.py --rules "$RULES" --out "$WORK/gen" >/dev/null ;;
  mixed|nested) python3 benches/policy_workload.py --rules "$RULES" --shape "$SHAPE" --out "$WORK/gen" >/dev/null ;;
  *) echo "SHAPE is textmod, mixed or nested" >&2; exit 2 ;;
esac
cp "$WORK/gen/table.json" "$WORK/tables/bench.json"
python3 - "$WORK/gen/input.json" "$WORK" <<'PY'
import json, sys
post = json.load(open(sys.argv[1]))
json.dump(post, open(sys.argv[2] + "/post2k.json", "w"), ensure_ascii=False)
# the same input grown to 4 KiB: its longest string repeated
def strings(o, path=()):
    items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()
    for k, v in items:
        if isinstance(v, str):
            yield len(v), path + (k,)
        else:
            yield from strings(v, path + (k,))
def grow(o):
    found = max(strings(o), default=None)
    if found is None:
        return False
    *parents, key = found[1]
    for p in parents:
        o = o[p]
    text = o[key]
    size = lambda: len(json.dumps(post, ensure_ascii=False).encode())
    while size() < 4096:
        o[key] = o[key] + " " + text
    while size() > 4096:
        o[key] = o[key][:-1]
    return True
assert grow(post), "the workload's input has no string"
json.dump(post, open(sys.argv[2] + "/post4k.json", "w"), ensure_ascii=False)
PY
PORT=$(free_port); ADMIN=$(free_port)
CLEF_ADMIN__LISTEN=127.0.0.1:$ADMIN CLEF_LOGGING__LEVEL=warn CLEF_SERVER__WORKERS=1 \
  CLEF_MODEL__TABLES_DIR="$WORK/tables" CLEF_MODEL__DEFAULT_TABLE=bench CLEF_MODEL__WATCH_FILE=false \
  "$BIN" serve -c config.yaml --host 127.0.0.1 --port "$PORT" 2>"$WORK/server.log" &
PID=$!
for _ in $(seq 200); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.05; done
for body in post2k post4k; do
  cat > "$WORK/$body.lua" <<LUA
wrk.method = "POST"
wrk.body = io.open("$WORK/$body.json"):read("*a")
wrk.headers["Content-Type"] = "application/json"
LUA
  # each answers, the explained one with its trace, before it is measured
  curl -sf -X POST --data-binary "@$WORK/$body.json" "http://127.0.0.1:$PORT/decide/bench?explain=true" | grep -q '"trace"'
  printf '%s: %s bytes, ' "$body" "$(wc -c < "$WORK/$body.json")"
done
echo "$RULES rules ($SHAPE); RSS $(rss_mb "$PID") MB"
wrk -t1 -c8 -d1s -s "$WORK/post2k.lua" "http://127.0.0.1:$PORT/decide/bench" >/dev/null
for _ in $(seq "$ROUNDS"); do
  for body in post2k post4k; do
    for mode in plain explain; do
      url="http://127.0.0.1:$PORT/decide/bench"
      [ "$mode" = explain ] && url="$url?explain=true"
      wrk_measured "$PID" -t1 -c8 -d"${SECONDS_PER_RUN}s" -s "$WORK/$body.lua" "$url"
      if echo "$WRK_OUT" | grep -q 'Non-2xx'; then echo "$body $mode: non-2xx answers" >&2; exit 1; fi
      printf '%-7s %-7s %8.0f req/s  server CPU %8.2f us/request\n' "$body" "$mode" "$RPS" "$CPU_US"
      echo "$body $mode $CPU_US" >> "$WORK/results"
    done
  done
done
echo "RSS after: $(rss_mb "$PID") MB"
python3 - "$WORK/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    body, mode, cpu = line.split()
    runs.setdefault((body, mode), []).append(float(cpu))
for body in ("post2k", "post4k"):
    plain = statistics.median(runs[(body, "plain")])
    explain = statistics.median(runs[(body, "explain")])
    print("median %s: plain %.2f us, explain %.2f us per request: %.2fx" % (body, plain, explain, explain / plain))
PY
