#!/usr/bin/env python3
"""Moderation workload for benches/engine.rs (stdlib only, deterministic).

    python3 moderation_workload.py --rules N --out DIR

Writes DIR/table.json (a Jev table) and DIR/input.json: one chat message of a few hundred
bytes (Chinese and English) inside a 1-2 KB input with nested objects. Every rule but the
last tests the message with its own regex — about N distinct patterns: alternations of CJK
and Latin words, `(?i)`, amounts such as `\\d+(\\.\\d+)?\\s*元`, links such as `t\\.me/`, and
some with no literal at all (`[A-Z]{12,}`) — and many add `contains`, `!(… contains …)`,
`lower(content) contains`, `len(trim(content))` or a user field. Only the last rule matches,
and nothing errors on this input. The message holds near misses (`元旦`, `level 42`, `QQ音乐`)
so that some patterns' literals occur without the pattern matching.
"""

import argparse
import json
import os
import re

MESSAGE = (
    "大家好，元旦快乐！今天的直播真精彩，Thanks everyone for joining the stream tonight. "
    "有人知道下一场什么时候开始吗？The new patch notes look great and the boss fight at level 42 "
    "was intense. 我在讨论区发了攻略，顺便听了QQ音乐的新歌，欢迎大家来看看 :) see you all next week, 加油!"
)

INPUT = {
    "content": MESSAGE,
    "message_id": "m-20261201-000184467",
    "sent_at": "2026-12-01T08:23:45.123Z",
    "user": {
        "id": "u-88",
        "name": "clef_fan",
        "level": 2,
        "verified": False,
        "country": "CN",
        "age_days": 37,
        "badges": ["newbie", "early-bird"],
        "stats": {"messages_24h": 14, "reports_30d": 0, "muted_before": False},
    },
    "room": {
        "id": "live-123",
        "kind": "gaming",
        "language": "zh",
        "moderators": ["mod-1", "mod-7"],
        "slow_mode": False,
        "settings": {"links_allowed": False, "min_level": 0, "emotes_only": False},
    },
    "client": {"app": "web", "version": "3.4.1", "ip_country": "CN", "ua": "Mozilla/5.0 (Windows NT 10.0; Win64; x64)"},
    "mentions": [],
    "reply_to": None,
    "recent": [
        {"id": "m-20261201-000184431", "content": "开播了吗？", "at": "2026-12-01T08:21:02.511Z"},
        {"id": "m-20261201-000184452", "content": "GG, that last round was close", "at": "2026-12-01T08:22:40.007Z"},
    ],
}

LATIN = [
    "buy", "cheap", "followers", "likes", "casino", "bonus", "crypto", "airdrop", "giveaway", "promo", "deal",
    "invest", "profit", "signal", "pump", "escort", "loan", "credit", "betting", "jackpot", "wallet", "token",
    "nft", "forex", "binary", "refund", "verify", "account", "support", "telegram", "whatsapp", "discord",
    "onlyfans", "viagra", "pills", "diet", "hack", "cheat", "aimbot", "mod", "skins", "gold", "coins", "boost",
    "rank", "carry", "elo", "smurf", "farm", "bot", "spam", "click", "link", "free", "win", "prize", "gift",
]
CJK = [
    "微信", "加群", "代购", "兼职", "刷单", "返利", "博彩", "贷款", "私聊", "红包", "福利", "优惠", "折扣", "秒杀", "日结",
    "月入", "日赚", "代练", "外挂", "辅助", "充值", "低价", "出售", "收购", "账号", "色情", "赌博", "彩票", "投资",
    "理财", "股票", "带单", "稳赚", "招聘", "推广", "引流", "粉丝", "点赞", "关注", "上分", "陪玩", "约炮", "裸聊",
    "发票", "办证", "代考", "枪支", "毒品", "翻墙", "梯子", "机场", "节点",
]
UNITS = ["元", "块", "万", "USDT", "美金", "刀", "rmb", "RMB"]
TLDS = ["com", "net", "xyz", "top", "cc", "io", "vip", "shop"]


def lcg(seed):
    state = seed & 0xFFFFFFFFFFFFFFFF
    while True:
        state = (state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        yield state >> 33


def q(s):
    return json.dumps(s, ensure_ascii=False)


def python_pattern(p):
    """The pattern in Python's syntax, close enough to check that it does not match."""
    return p.replace("\\p{Han}", "[\u4e00-\u9fff]")


class Gen:
    def __init__(self, n):
        self.rnd = lcg(n * 7919 + 3)
        self.seen = set()

    def r(self, k):
        return next(self.rnd) % k

    def pick(self, xs):
        return xs[self.r(len(xs))]

    def word(self):
        return self.pick(LATIN) + (str(self.r(100)) if self.r(3) == 0 else "")

    def regex(self):
        """A pattern that does not match MESSAGE, not used before."""
        while True:
            kind = self.r(10)
            if kind == 0:
                p = "(%s|%s|%s)[0-9]{3,}" % (self.pick(CJK), self.pick(CJK), self.word())
            elif kind == 1:
                p = "(?i)(%s|%s)\\s*(%s|%s)" % (self.word(), self.word(), self.word(), self.word())
                if self.r(3) == 0:
                    p = "(?i)\\b%s\\b" % p[4:]
            elif kind == 2:
                p = "\\d+(\\.\\d+)?\\s*%s%s" % (self.pick(UNITS), self.pick(["", "起", "/天", "每单"]))
            elif kind == 3:
                p = "(%s|%s)\\s*\\d+\\s*%s" % (self.pick(CJK), self.pick(CJK), self.pick(UNITS))
            elif kind == 4:
                p = "%s/[a-z0-9_]{%d,}" % (self.pick(["t\\.me", "wa\\.me", "discord\\.gg", "bit\\.ly", "qm\\.qq\\.com"]),
                                           3 + self.r(6))
            elif kind == 5:
                p = "(?i)%s%s\\.(%s|%s)" % (self.word(), self.pick(["", "-", "_"]), self.pick(TLDS), self.pick(TLDS))
            elif kind == 6:
                p = "%s.{0,%d}%s" % (self.pick(CJK), 2 + self.r(10), self.pick(CJK))
            elif kind == 7:
                p = "(?i)(%s|%s|%s)" % (self.pick(CJK), self.word(), self.word())
            elif kind == 8:
                p = "(加|\\+)\\s*(%s|v|vx|wx|q)\\s*[:：]?\\s*[a-zA-Z0-9_]{%d,}" % (self.pick(CJK), 5 + self.r(5))
            else:
                # no literal at all: only the regex can answer
                p = self.pick(["[A-Z]{%d,}", "\\d{%d,}", "\\p{Han}{%d,}", "[!?]{%d,}", "(\\w)\\s{%d,}"]) % (8 + self.r(40))
            if p in self.seen:
                continue
            flags = re.IGNORECASE if p.startswith("(?i)") else 0
            if re.search(python_pattern(p.replace("(?i)", "")), MESSAGE, flags):
                continue
            self.seen.add(p)
            return p

    def absent_word(self):
        while True:
            w = self.pick([self.word(), self.pick(CJK) + self.pick(CJK)])
            if w.lower() not in MESSAGE.lower():
                return w

    def rule(self):
        """A false condition that reads the message with one new regex."""
        p = self.regex()
        op = self.pick(["~", "matches", "~"])
        test = "content %s %s" % (op, q(p))
        lower_test = "lower(content) matches %s" % q(p.replace("(?i)", ""))
        shape = self.r(10)
        if shape == 0:
            return test
        if shape == 1:
            # a true substring test first, then the failing regex
            return "content contains %s && %s" % (q(self.pick(["直播", "stream", "大家"])), test)
        if shape == 2:
            return "%s && user.level < %d" % (test, 3 + self.r(5))
        if shape == 3:
            # false on the first test: the message is a discussion
            return '!(content contains "讨论") && %s' % test
        if shape == 4:
            return "lower(content) contains %s || %s" % (q(self.absent_word().lower()), test)
        if shape == 5:
            return "len(trim(content)) > %d && %s" % (10 + self.r(100), lower_test if self.r(2) else test)
        if shape == 6:
            return "%s && !(content contains %s)" % (test, q(self.absent_word()))
        if shape == 7:
            return "(user.level ?? 0) < %d && %s" % (5 + self.r(5), test)
        if shape == 8:
            return "room.kind in [\"gaming\", \"music\"] && (%s || content contains %s)" % (test, q(self.absent_word()))
        return "len(trim(content)) < %d || %s" % (5 + self.r(20), test)


def build(n):
    g = Gen(n)
    rules = []
    for i in range(n - 1):
        rules.append({"id": "mod_%04d" % (i + 1), "condition": g.rule(),
                      "action": {"action": ["warn", "hide", "ban"][i % 3], "rule_no": i + 1}})
    rules.append({
        "id": "mod_%04d" % n,
        "condition": 'len(trim(content)) > 100 && lower(content) contains "boss fight" && user.level < 5'
                     ' && content ~ "(?i)level\\s*\\d+"',
        "action": {"action": "tag", "tag": "gameplay"},
    })
    return {"name": "moderation_bench", "default": {"action": "pass"}, "rules": rules}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rules", type=int, default=500)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    table = build(args.rules)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.json"), "w", encoding="utf-8") as f:
        json.dump(table, f, ensure_ascii=False, indent=1)
    body = json.dumps(INPUT, ensure_ascii=False)
    with open(os.path.join(args.out, "input.json"), "w", encoding="utf-8") as f:
        f.write(body)
    print("%d rules, message %d bytes, input %d bytes"
          % (args.rules, len(MESSAGE.encode()), len(body.encode())))


if __name__ == "__main__":
    main()
