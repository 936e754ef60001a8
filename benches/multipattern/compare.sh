#!/usr/bin/env bash
# Vectorscan against clef's regex pass on a moderation table's regexes (issue 28).
#
#   benches/multipattern/compare.sh [--rules 500,5000,20000] [--shapes textmod] [--rounds 3]
#                                   [--timeout 1200] [--ucp-timeout 300]
#                                   [--engines "clef vs-ascii set vs-ucp"] [--out DIR]
#
# Needs: python3, gcc, pkg-config, cargo, and `apt-get install -y libvectorscan-dev`.
# Extracts the distinct regexes of tables from ../textmod_workload.py (and
# ../moderation_workload.py with --shapes textmod,moderation) and scans four messages with
# each engine, each run its own process (so that peak RSS is that engine's):
#
#   clef      clef's own pass (crates/clef-engine/src/expr/patterns.rs, compiled in by rs/):
#             required literals in one Aho-Corasick pass, then the regexes they leave
#   set       one regex::RegexSet of all the patterns (regex-automata's meta engine)
#   meta      regex_automata::meta::Regex::new_many, which_overlapping_matches (as set)
#   vs-ascii  Vectorscan, one hs_compile_multi database, UTF8 | SINGLEMATCH: \w \d \s \b ASCII
#   vs-ucp    the same with HS_FLAG_UCP (Unicode classes, as the regex crate has them); \b is
#             refused in this mode, and compiling Unicode \w repeats takes seconds a pattern
#
# Rounds alternate the engines; the table gives medians over rounds. A run whose compile took
# more than a minute runs in the first round only (its scans are timed there too). A run past
# --timeout seconds (--ucp-timeout for vs-ucp) is reported as such and the engine skips larger
# sets. Every engine's matching
# pattern ids are compared with clef's on every message. The whole decision, from input bytes,
# is timed with `clef bench` on the same tables (target/release/clef, built here). About 20
# minutes on 2 cores with the defaults, most of it Vectorscan compiling. Results stay in
# OUT (default /tmp/clef-multipattern): runs/*.json, ids/*/msg-*.ids, data/.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RULES=500,5000,20000 SHAPES=textmod ROUNDS=3 TIMEOUT=1200 UCP_TIMEOUT=300 OUT=/tmp/clef-multipattern
ENGINES="clef vs-ascii set vs-ucp"
while [ $# -gt 0 ]; do
  case "$1" in
    --rules) RULES=$2; shift 2 ;;
    --shapes) SHAPES=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --ucp-timeout) UCP_TIMEOUT=$2; shift 2 ;;
    --engines) ENGINES=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT/runs" "$OUT/ids"
DATA=$OUT/data

echo "== patterns and messages" >&2
python3 "$HERE/extract.py" --out "$DATA" --rules "$RULES" --shapes "$SHAPES" >&2

echo "== builds" >&2
gcc -O2 -Wall -Wextra -o "$OUT/hs_bench" "$HERE/hs_bench.c" $(pkg-config --cflags --libs libhs)
CARGO_TARGET_DIR=$OUT/target cargo build --release --quiet --manifest-path "$HERE/rs/Cargo.toml"
(cd "$ROOT" && cargo build --release --quiet)
MP=$OUT/target/release/mp-bench
CLEF=$ROOT/target/release/clef
MSGS=("$DATA/msg-textmod.txt" "$DATA/msg-4k.txt" "$DATA/msg-spam.txt" "$DATA/msg-moderation.txt")

run() { # ENGINE SET ROUND
  local engine=$1 set=$2 round=$3 ids=$OUT/ids/$2-$1 out=$OUT/runs/$3-$2-$1.json
  mkdir -p "$ids"
  local cmd
  case "$engine" in
    vs-ascii) cmd=("$OUT/hs_bench" -a 1) ;;
    vs-ucp) cmd=("$OUT/hs_bench" -a 0) ;;
    *) cmd=("$MP" "$engine") ;;
  esac
  local t0=$SECONDS rc=0 limit=$TIMEOUT
  [ "$engine" = vs-ucp ] && limit=$UCP_TIMEOUT
  timeout "$limit" "${cmd[@]}" -n 2000 -t 2 -o "$ids" "$DATA/$set.patterns" "${MSGS[@]}" > "$out" 2> "$out.err" || rc=$?
  if [ "$rc" = 124 ]; then
    echo "{\"engine\":\"$engine\",\"timeout_s\":$limit}" > "$out"
  elif [ "$rc" != 0 ]; then
    echo "{\"engine\":\"$engine\",\"error\":\"exit $rc\"}" > "$out"
  fi
  echo "   round $round  $set  $engine: $((SECONDS - t0)) s" >&2
  [ "$rc" = 0 ]
}

declare -A gaveup
for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round" >&2
  # alternate: odd rounds in the order given, even rounds reversed
  order=$ENGINES
  [ $((round % 2)) = 0 ] && order=$(echo "$ENGINES" | tr ' ' '\n' | tac | tr '\n' ' ')
  for shape in ${SHAPES//,/ }; do
    for n in ${RULES//,/ }; do
      set=$shape-$n
      for engine in $order; do
        # a compile of minutes is timed once, and the scans with it
        if [ "$round" -gt 1 ] && python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))
sys.exit(0 if r.get("compile_ms", 0) > 60000 or "timeout_s" in r or "error" in r else 1)' "$OUT/runs/1-$set-$engine.json" 2>/dev/null; then
          continue
        fi
        if [ -n "${gaveup[$shape-$engine]:-}" ]; then
          echo "{\"engine\":\"$engine\",\"skipped\":\"a smaller set failed\"}" > "$OUT/runs/$round-$set-$engine.json"
          continue
        fi
        run "$engine" "$set" "$round" || gaveup[$shape-$engine]=1
      done
      # about 10 s of decisions a table (17 ms each with 20,000 rules)
      "$CLEF" bench "$DATA/$set/table.json" "$DATA/$set/input.json" --json \
        -n $((n <= 1000 ? 20000 : n <= 5000 ? 2000 : 500)) > "$OUT/runs/$round-$set-decision.json"
    done
  done
done

python3 "$HERE/summarize.py" "$OUT" --rules "$RULES" --shapes "$SHAPES" --engines "$ENGINES"
echo
echo "Patterns Vectorscan refuses with Unicode classes (HS_FLAG_UCP), at parsing:"
for shape in ${SHAPES//,/ }; do
  for n in ${RULES//,/ }; do
    "$OUT/hs_bench" -a 0 -c 1 "$DATA/$shape-$n.patterns" "$DATA/msg-textmod.txt" | python3 -c 'import collections, json, sys
r = json.load(sys.stdin)
why = collections.Counter(x["error"] for x in r["refusals"]).most_common(2)
print("  %s: %d of %d %s" % (sys.argv[1], r["refused"], r["patterns"], why))' "$shape-$n"
  done
done
