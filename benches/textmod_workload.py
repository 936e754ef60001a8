#!/usr/bin/env python3
"""Text-moderation workload of a second shape, for benches/engine.rs (stdlib only, deterministic).

    python3 textmod_workload.py --rules N --out DIR [--seed S] [--non-ascii]

Writes DIR/table.json (a Jev table) and DIR/input.json: a forum post of about 1.5 KB of
mostly English text (plus a title and a user bio) inside a nested input. It is written apart
from moderation_workload.py so that the engine is not tuned to one generator: here the
patterns are the kinds a trust-and-safety list grows into over years:

- word lists with Unicode word boundaries, `(?i)\\b(w1|w2|w3)\\b`;
- obfuscated spellings with character classes, `(?i)f[r4]e{2,}\\s*m[o0]n[e3]y`;
- phrases with gaps, `(?i)w1\\W+(?:\\w+\\W+){0,3}w2`;
- patterns whose only literals are common words (`the`, `and`) that occur in every post;
- patterns with no literal at all (`[A-Z]{n,}`, `\\d{n,}`, `(?:\\W){n,}`, `\\p{Lu}{n,}`);
- on several subjects: `content`, `lower(content)`, `title`, `user.bio`;

mixed with `contains`, `lower(x) contains`, `len(x)` and user fields. N rules give about N
distinct regexes. Only the last rule matches and nothing errors on this input (checked here
with Python's `re`, which agrees with the Rust syntax used). With --non-ascii the long texts
get accents, em dashes and emoji (14 non-ASCII characters in the post), the text a Unicode
`\\b` pattern's lazy DFA gives up on; with seed 1 and 500 or 5,000 rules the same last rule
matches after the same rules (checked with `clef decide --explain`, not here).
"""

import argparse
import json
import os
import re

# the random source and JSON quoting are the other generator's, so both draw alike
from moderation_workload import lcg, q

WORDS = (
    "the and for with you this that from have will your about more when what there their which "
    "would time just like people some them could other into than then look only come over think "
    "also back after work first well even want because these give most thread post reply forum "
    "build engine update version release patch fix issue error crash log config server client "
    "window linux driver kernel memory disk network latency throughput benchmark compile rust "
    "python script module library docs example question answer thanks help please review merge"
).split()

BAD = (
    "casino bonus crypto airdrop giveaway promo invest profit signal pump escort loan credit "
    "betting jackpot wallet token forex refund verify telegram whatsapp onlyfans viagra pills "
    "diet hack cheat aimbot skins gold coins boost carry smurf spam click prize gift lottery "
    "payday mortgage rolex replica pharmacy cialis bitcoin ethereum nft presale whitelist mint "
    "cashapp venmo paypal giftcard followers likes subscribers views upvotes karma dating hookup"
).split()

LEET = {"a": "[a4@]", "e": "[e3]", "i": "[i1!]", "o": "[o0]", "s": "[s5$]", "t": "[t7]", "l": "[l1]"}

SENTENCES = [
    "I have been trying to build the engine on linux with the new kernel driver and the compile",
    "fails with an error about memory when the config sets a large cache for the server.",
    "Thanks for the quick reply on the other thread, the patch you posted fixed the crash",
    "but the latency benchmark still looks worse than the previous release on my machine.",
    "Would it help if I attach the full log and the script that reproduces the issue?",
    "Also, the docs example for the client module seems to be out of date after the update,",
    "the function it calls was renamed in version 3 and the answer on the forum is from 2019.",
    "Could someone review the merge request when they have time? Please look at the network",
    "code first, the throughput drops when more than 64 connections are open at once.",
    "For what it is worth I measured 1200 requests per second with the old library and 950 now,",
    "on the same disk and window size, so something in the new version is slower.",
    "I think the issue is in the way the buffer is reused, but I am not sure yet.",
]

MESSAGE = " ".join(SENTENCES) + " " + " ".join(SENTENCES[2:9]) + " Cheers, and thanks again!"

INPUT = {
    "title": "Build fails on linux after the 3.2 update (memory error)",
    "content": MESSAGE,
    "lang": "en",
    "user": {
        "id": "u-4412",
        "name": "kernel_hacker",
        "bio": "Systems programmer, likes Rust and old hardware. Posts benchmarks.",
        "level": 3,
        "posts": 214,
        "verified": False,
        "flags": {"muted": False, "reports_30d": 1},
    },
    "forum": {"id": "dev-help", "kind": "technical", "links_allowed": True, "tags": ["build", "linux"]},
    "client": {"app": "web", "ua": "Mozilla/5.0 (X11; Linux x86_64)"},
    "attachments": [{"kind": "log", "bytes": 20480}],
}

SUBJECTS = [("content", MESSAGE), ("lower(content)", MESSAGE.lower()), ("title", INPUT["title"]),
            ("user.bio", INPUT["user"]["bio"])]


def python_pattern(p):
    """The pattern in Python's syntax (Python's `\\b` and `\\w` are Unicode-aware on str too)."""
    return p.replace("\\p{Lu}", "[A-Z\u00c0-\u00de]")


class Gen:
    def __init__(self, n, seed):
        self.rnd = lcg(n * 104729 + seed)
        self.seen = set()

    def r(self, k):
        return next(self.rnd) % k

    def pick(self, xs):
        return xs[self.r(len(xs))]

    def bad(self):
        return self.pick(BAD) + (str(self.r(100)) if self.r(4) == 0 else "")

    def leet(self, w):
        return "".join(LEET.get(c, c) if self.r(2) else c for c in w)

    def regex(self, text):
        """A pattern that does not match `text`, not used before."""
        while True:
            k = self.r(12)
            if k <= 2:
                p = "(?i)\\b(%s)\\b" % "|".join(self.bad() for _ in range(2 + self.r(5)))
            elif k == 3:
                p = "(?i)%s\\s*%s" % (self.leet(self.pick(BAD)), self.leet(self.pick(BAD)))
            elif k == 4:
                p = "(?i)%s\\W+(?:\\w+\\W+){0,%d}%s" % (self.pick(BAD), 1 + self.r(4), self.bad())
            elif k == 5:
                # literals that occur in every post: the prefilter cannot rule these out
                p = "(?i)\\b%s\\s+%s\\s+\\d{%d,}" % (self.pick(WORDS), self.pick(WORDS), 4 + self.r(6))
            elif k == 6:
                p = "%s\\s+(?:\\w+\\s+){0,2}%s[!?.]{%d,}" % (self.pick(WORDS), self.pick(BAD), 2 + self.r(3))
            elif k == 7:
                p = "(?i)(https?://)?[a-z0-9-]*%s[a-z0-9-]*\\.(%s)" % (
                    self.pick(BAD), "|".join(self.pick(["com", "net", "xyz", "top", "io", "ru", "cc"]) for _ in range(2)))
            elif k == 8:
                p = "\\b%s\\b.{0,%d}\\b%s\\b" % (self.pick(WORDS), 5 + self.r(40), self.bad())
            else:
                # no literal at all
                # (Unicode classes repeat less: the engine caps one regex's compiled size)
                p = self.pick(["[A-Z]{%d,}", "\\d{%d,}", "[!?]{%d,}", "(?:[a-z]\\d){%d,}",
                               "\\s{%d,}"]) % (6 + self.r(60))
                if self.r(3) == 0:
                    p = self.pick(["\\p{Lu}{%d,}", "[^\\x00-\\x7F]{%d,}", "\\w{%d,}", "(?:\\W){%d,}"]) % (6 + self.r(12))
            if p in self.seen:
                continue
            flags = re.IGNORECASE if p.startswith("(?i)") else 0
            if re.search(python_pattern(p.replace("(?i)", "")), text, flags):
                continue
            self.seen.add(p)
            return p

    def absent(self, text):
        while True:
            w = self.pick(BAD) + self.pick(["", " " + self.pick(WORDS)])
            if w.lower() not in text.lower():
                return w

    def rule(self):
        subject, text = SUBJECTS[self.pick([0, 0, 0, 1, 1, 2, 3])]
        p = self.regex(text)
        if subject == "lower(content)":
            p = p.replace("(?i)", "")
            if re.search(python_pattern(p), text):
                p = self.regex(text).replace("(?i)", "")
                if re.search(python_pattern(p), text):
                    subject, text = "content", MESSAGE
        test = "%s %s %s" % (subject, self.pick(["~", "matches"]), q(p))
        s = self.r(8)
        if s == 0:
            return test
        if s == 1:
            return 'content contains "the" && %s' % test
        if s == 2:
            return "%s && user.level < %d" % (test, 4 + self.r(5))
        if s == 3:
            return "lower(content) contains %s || %s" % (q(self.absent(MESSAGE).lower()), test)
        if s == 4:
            return "len(content) > %d && %s" % (100 + self.r(1000), test)
        if s == 5:
            return "%s && !(title contains %s)" % (test, q(self.absent(INPUT["title"])))
        if s == 6:
            return "(forum.kind == \"technical\" || user.verified) && %s" % test
        return "len(content) < %d || %s" % (5 + self.r(50), test)


def build(n, seed):
    g = Gen(n, seed)
    rules = [{"id": "tm_%05d" % (i + 1), "condition": g.rule(), "action": {"action": ["flag", "hold", "drop"][i % 3]}}
             for i in range(n - 1)]
    rules.append({
        "id": "tm_%05d" % n,
        "condition": 'len(content) > 1000 && lower(content) contains "benchmark" && user.level < 5'
                     ' && content ~ "(?i)\\\\b\\\\d+\\\\s+requests per second"',
        "action": {"action": "tag", "tag": "performance"},
    })
    return {"name": "textmod_bench", "default": {"action": "allow"}, "rules": rules}


def with_non_ascii(value):
    """Adds accents, em dashes and emoji to the long strings of `value`, in place."""
    for k, v in value.items():
        if isinstance(v, str) and len(v) > 200:
            value[k] = v.replace(" the ", " th\u00e9 ", 5).replace(".", " \u2014 \U0001f389 stra\u00dfe", 3)
        elif isinstance(v, dict):
            with_non_ascii(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rules", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--non-ascii", action="store_true", help="sprinkle non-ASCII text into the post")
    args = ap.parse_args()
    table = build(args.rules, args.seed)
    if args.non_ascii:
        with_non_ascii(INPUT)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.json"), "w", encoding="utf-8") as f:
        json.dump(table, f, ensure_ascii=False, indent=1)
    body = json.dumps(INPUT, ensure_ascii=False)
    with open(os.path.join(args.out, "input.json"), "w", encoding="utf-8") as f:
        f.write(body)
    print("%d rules, message %d bytes, input %d bytes" % (args.rules, len(MESSAGE.encode()), len(body.encode())))


if __name__ == "__main__":
    main()
