#!/usr/bin/env python3
"""Chat-moderation workload for benches/engine.rs (stdlib only, deterministic).

    python3 chat_workload.py --rules 500 --out DIR

Writes DIR/table.json (a Jev table) and DIR/input.json (one chat message of
about 200 characters). Every rule tests the same `content` field with a regex
or a literal substring, some through lower(content), some with len(content) or
user_level; only the LAST rule matches, so a first-match evaluator has to try
all of them.
"""

import argparse
import json
import os

MESSAGE = (
    "大家好，今天的直播真精彩！Thanks everyone for joining the stream tonight, "
    "the new patch notes look great and the boss fight was intense. "
    "有没有人知道下一场什么时候开始？I will share the highlight clips later, "
    "加我 vx: clef_fan_2026 领取福利"
)

ASCII = "abcdefghijklmnopqrstuvwxyz"
CJK = "广告推销代购兼职刷单返利博彩贷款私聊加群领取红包福利优惠折扣秒杀"


def lcg(seed):
    state = seed & 0xFFFFFFFFFFFFFFFF
    while True:
        state = (state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        yield state >> 33


def word(rnd, alphabet, lo, hi):
    n = lo + next(rnd) % (hi - lo + 1)
    return "".join(alphabet[next(rnd) % len(alphabet)] for _ in range(n))


def absent_word(rnd, alphabet, lo, hi):
    while True:
        w = word(rnd, alphabet, lo, hi)
        if w not in MESSAGE.lower():
            return w


def q(s):
    return json.dumps(s, ensure_ascii=False)


def rule_condition(i, rnd):
    kind = next(rnd) % 6
    if kind == 0:
        return "content ~ %s" % q("(%s|%s)[0-9]{3,}" % (absent_word(rnd, ASCII, 4, 7), absent_word(rnd, CJK, 2, 3)))
    if kind == 1:
        return "lower(content) contains %s" % q(absent_word(rnd, ASCII, 5, 8))
    if kind == 2:
        return "content contains %s && user_level < %d" % (q(absent_word(rnd, CJK, 2, 4)), 3 + next(rnd) % 5)
    if kind == 3:
        return "len(content) > %d && lower(content) matches %s" % (
            50 + next(rnd) % 100, q("%s\\s*[:：]\\s*[a-z0-9_]{5,}" % absent_word(rnd, ASCII, 3, 6)))
    if kind == 4:
        return "content matches %s" % q("(?i)%s.{0,10}%s" % (absent_word(rnd, ASCII, 4, 6), absent_word(rnd, ASCII, 4, 6)))
    return "lower(content) contains %s || content contains %s" % (
        q(absent_word(rnd, ASCII, 6, 9)), q(absent_word(rnd, CJK, 3, 4)))


def build(n):
    rnd = lcg(n * 104729 + 7)
    rules = []
    for i in range(n - 1):
        rules.append({
            "id": "mod_%04d" % (i + 1),
            "condition": rule_condition(i, rnd),
            "action": {"action": ["warn", "ban", "hide"][i % 3], "rule_no": i + 1},
        })
    rules.append({
        "id": "mod_%04d" % n,
        "condition": "len(content) > 100 && lower(content) matches %s && user_level < 5" % q("(vx|微信|wechat)\\s*[:：]\\s*[a-z0-9_]{6,}"),
        "action": {"action": "ban", "duration_sec": 300, "reason": "advertising"},
    })
    table = {"name": "chat_bench", "default": {"action": "allow"}, "rules": rules}
    message = {"content": MESSAGE, "user_level": 2, "room": "live-123", "user_id": "u-88"}
    return table, message


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rules", type=int, default=500)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    table, message = build(args.rules)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.json"), "w", encoding="utf-8") as f:
        json.dump(table, f, ensure_ascii=False, indent=1)
    with open(os.path.join(args.out, "input.json"), "w", encoding="utf-8") as f:
        json.dump(message, f, ensure_ascii=False)
    print("message length: %d characters" % len(MESSAGE))


if __name__ == "__main__":
    main()
