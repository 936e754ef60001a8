#!/usr/bin/env bash
# What `?explain=true` costs on a regex-heavy table, served (issue 28).
#
#   bash benches/explain_regex.sh [SECONDS] [ROUNDS] [RULES]
#
# Writes a moderation table of RULES rules (default 500; benches/textmod_workload.py: about a
# distinct regex per rule) and two bodies: the workload's post (about 2.2 KB) and the same post
# grown to 4 KiB. Against one server with one worker, ROUNDS times each (SECONDS per run, wrk
# -t1 -c8, alternating plain and explain), it prints the server's CPU time per request (utime +
# stime from /proc/PID/stat over the run: independent of the load) and, per body, the median
# explain/plain ratio (the issue asks at most 3). BIN=path uses another binary. Talks only to
# 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-4}
ROUNDS=${2:-3}
RULES=${3:-500}
. benches/common.sh
WORK=$(mktemp -d)
trap 'kill $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
mkdir "$WORK/tables"
python3 benches/textmod_workload.py --rules "$RULES" --out "$WORK/gen" >/dev/null
cp "$WORK/gen/table.json" "$WORK/tables/textmod.json"
python3 - "$WORK/gen/input.json" "$WORK" <<'PY'
import json, sys
post = json.load(open(sys.argv[1]))
json.dump(post, open(sys.argv[2] + "/post2k.json", "w"), ensure_ascii=False)
# the same post grown to 4 KiB: its message repeated
def grow(o):
    for k, v in o.items():
        if k == "content" and isinstance(v, str):
            text = v
            size = lambda: len(json.dumps(post, ensure_ascii=False).encode())
            while size() < 4096:
                o[k] = o[k] + " " + text
            while size() > 4096:
                o[k] = o[k][:-1]
            return True
        if isinstance(v, dict) and grow(v):
            return True
    return False
assert grow(post), "the workload's input has no content field"
json.dump(post, open(sys.argv[2] + "/post4k.json", "w"), ensure_ascii=False)
PY
PORT=$(free_port); ADMIN=$(free_port)
CLEF_ADMIN__LISTEN=127.0.0.1:$ADMIN CLEF_LOGGING__LEVEL=warn CLEF_SERVER__WORKERS=1 \
  CLEF_MODEL__TABLES_DIR="$WORK/tables" CLEF_MODEL__DEFAULT_TABLE=textmod CLEF_MODEL__WATCH_FILE=false \
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
  curl -sf -X POST --data-binary "@$WORK/$body.json" "http://127.0.0.1:$PORT/decide/textmod?explain=true" | grep -q '"trace"'
  printf '%s: %s bytes, ' "$body" "$(wc -c < "$WORK/$body.json")"
done
echo "$RULES rules; RSS $(rss_mb "$PID") MB"
wrk -t1 -c8 -d1s -s "$WORK/post2k.lua" "http://127.0.0.1:$PORT/decide/textmod" >/dev/null
for _ in $(seq "$ROUNDS"); do
  for body in post2k post4k; do
    for mode in plain explain; do
      url="http://127.0.0.1:$PORT/decide/textmod"
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
