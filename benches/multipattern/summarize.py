#!/usr/bin/env python3
"""The table compare.sh prints: medians over rounds of its runs' JSON (stdlib only).

    python3 summarize.py OUT [--rules 500,5000,20000] [--shapes textmod] [--engines "clef vs-ascii set vs-ucp"]
"""

import argparse
import glob
import json
import os
import statistics

MESSAGES = [("msg-textmod.txt", "1.6 KB post"), ("msg-4k.txt", "4 KiB text"), ("msg-spam.txt", "1.3 KB spam")]


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return {"error": "no output"}
    try:
        return json.loads(text)
    except ValueError:
        return {"skipped": True} if '"skipped"' in text else {"error": "no output"}


def med(xs):
    return statistics.median(xs) if xs else None


def fmt(x, unit=""):
    if x is None:
        return "–"
    if x >= 100:
        return "{:,.0f}{}".format(x, unit)
    return "{:.1f}{}".format(x, unit)


def ids(path):
    try:
        with open(path, encoding="utf-8") as f:
            return {int(x) for x in f.read().split()}
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rules", default="500,5000,20000")
    ap.add_argument("--shapes", default="textmod")
    ap.add_argument("--engines", default="clef vs-ascii set vs-ucp")
    a = ap.parse_args()
    engines = a.engines.split()
    head = ["patterns", "engine", "compile ms", "memory MB", "peak RSS MB", "refused"] + \
        ["µs / %s" % label for _, label in MESSAGES] + ["agrees with clef"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for shape in a.shapes.split(","):
        for n in a.rules.split(","):
            s = "%s-%s" % (shape, n)
            for engine in engines + ["decision"]:
                runs = [load(p) for p in sorted(glob.glob(os.path.join(a.out, "runs", "*-%s-%s.json" % (s, engine))))]
                ok = [r for r in runs if "messages" in r or "median_ns" in r]
                label = "%s %s" % (shape, n)
                if engine == "decision":
                    if ok:
                        row = [label, "clef bench (whole decision)", fmt(med([r["compile_ms"] for r in ok])), "", "",
                               "", fmt(med([r["median_ns"] / 1e3 for r in ok])), "", "", ""]
                        print("| " + " | ".join(row) + " |")
                    continue
                if not ok:
                    r = runs[0] if runs else {}
                    why = ("compile > %d s (timeout)" % r["timeout_s"]) if "timeout_s" in r else \
                        r.get("error") or ("not run: a smaller set failed" if "skipped" in r else "not run")
                    print("| " + " | ".join([label, engine, why] + [""] * (len(head) - 3)) + " |")
                    continue
                mem = med([r.get("memory_after_scans_bytes", r.get("memory_bytes", 0)) / 1e6 for r in ok])
                row = [label, engine + (" (n=%d)" % len(ok) if len(ok) > 1 else ""),
                       fmt(med([r["compile_ms"] for r in ok])), fmt(mem), fmt(med([r["max_rss_kb"] / 1024 for r in ok])),
                       str(ok[0].get("refused", 0))]
                for m, _ in MESSAGES:
                    xs = [x["median_us"] for r in ok for x in r["messages"] if x["message"] == m]
                    row.append(fmt(med(xs)))
                # agreement on every message: pattern ids found by this engine and by clef's pass
                diffs = []
                for m in glob.glob(os.path.join(a.out, "ids", "%s-clef" % s, "*.ids")):
                    mine = ids(os.path.join(a.out, "ids", "%s-%s" % (s, engine), os.path.basename(m)))
                    theirs = ids(m)
                    if mine is None or theirs is None:
                        continue
                    if mine != theirs:
                        diffs.append("%s: +%d −%d" % (os.path.basename(m)[4:-4], len(mine - theirs), len(theirs - mine)))
                row.append("yes" if not diffs else "; ".join(sorted(diffs)))
                print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
