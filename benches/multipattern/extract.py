#!/usr/bin/env python3
"""Pattern sets and messages for the multi-pattern comparison (issue 28; stdlib only, deterministic).

    python3 extract.py --out DIR [--rules 500,5000,20000] [--shapes textmod,moderation]

Runs the table generators beside it (../textmod_workload.py, ../moderation_workload.py) and
writes into DIR:

  SHAPE-N/table.json, SHAPE-N/input.json   the generated table and input (for `clef bench`)
  SHAPE-N.patterns                         the table's distinct regexes, one a line, in
                                           order of first use (the last rule's one included)
  msg-NAME.txt                             the messages every pattern set is scanned on:
    textmod     the textmod forum post (1,635 bytes, English)
    moderation  the moderation chat message (339 bytes, Chinese and English)
    4k          4,096 bytes of forum text with Chinese in it (the post, more of its sentences,
                the chat message)
    spam        about 1.5 KB of spam: the words, spellings, links and amounts the patterns look
                for, so that many patterns match and the two engines' answers can be compared
"""

import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = os.path.dirname(HERE)
sys.path.insert(0, BENCHES)

import moderation_workload  # noqa: E402
import textmod_workload  # noqa: E402

GENERATORS = {"textmod": "textmod_workload.py", "moderation": "moderation_workload.py"}

# a regex test in a condition: `~` or `matches`, then the pattern as a JSON string
REGEX_TEST = re.compile(r'(?:~|\bmatches)\s+("(?:[^"\\]|\\.)*")')

SPAM = (
    "FREE CRYPTO AIRDROP!!! Claim your bitcoin bonus now at casino-bonus.xyz or bit.ly/claim_now_2026 "
    "and join t.me/freecoins_daily for daily signals. Fr33 m0ney, c4sh app giveaway, 100% profit "
    "guaranteed!!! Cheap followers and likes: buy 1000 followers for 5 USDT, 10000 likes for 9.9 美金. "
    "加微信 vx: abc123456789 日赚 500 元起，刷单 返利 每单 30 元，兼职 日结 200元/天，"
    "加群 领红包 8888 元！ 博彩 彩票 稳赚 带单，投资 理财 月入 30000 元。 "
    "Contact us on telegram or whatsapp, verify your wallet and refund your token presale, "
    "whitelist mint is live, nft drop tonight. Escort and dating hookup at onlyfans-promo.top, "
    "viagra pills cialis pharmacy discount, rolex replica 99 USD. aimbot hack cheat skins for "
    "free, boost your rank with elo carry, smurf accounts cheap. WINNER WINNER CLAIM YOUR PRIZE "
    "NOW 12345678901234 !!!!!!!!?????? Click the link: https://giftcard-lottery.net/win "
    "paypal venmo cashapp accepted. jackpot betting payday loan credit mortgage forex signal pump. "
    "The the and and 123456789 requests per second, thanks for the free crypto 2026 airdrop!!! "
    "ВНИМАНИЕ БЕСПЛАТНО ÀÉÎÕÜ ÀÉÎÕÜ ÀÉÎÕÜ 大量出售账号低价充值代练上分陪玩推广引流粉丝点赞关注 "
    "+ wx: spam_account_8888 QQ: 1234567890"
)


ESCAPES = {'"': '"', "'": "'", "\\": "\\", "n": "\n", "t": "\t", "r": "\r"}


def clef_string(lit):
    """A string literal decoded as clef's language decodes it (docs/language.md, "Literals"):
    `\\"`, `\\'`, `\\\\`, `\\n`, `\\t`, `\\r` and `\\uXXXX` are escapes, any other backslash stays."""
    body, out, i = lit[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            e = body[i + 1]
            if e in ESCAPES:
                out.append(ESCAPES[e])
                i += 2
                continue
            if e == "u":
                out.append(chr(int(body[i + 2:i + 6], 16)))  # the generators write no surrogates
                i += 6
                continue
        out.append(c)
        i += 1
    return "".join(out)


def patterns(table):
    seen, out = set(), []
    for rule in table["rules"]:
        for m in REGEX_TEST.finditer(rule["condition"]):
            p = clef_string(m.group(1))
            if p not in seen:
                seen.add(p)
                out.append(p)
    return out


def four_k():
    """4,096 bytes of forum text with some Chinese, cut on a character boundary and padded."""
    extra = " ".join(reversed(textmod_workload.SENTENCES))
    text = (textmod_workload.MESSAGE + "\n\n" + moderation_workload.MESSAGE + "\n\n" + extra + "\n\n"
            + textmod_workload.MESSAGE)
    data = text.encode()[:4096].decode("utf-8", "ignore").encode()
    return data + b" " * (4096 - len(data))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rules", default="500,5000,20000")
    ap.add_argument("--shapes", default="textmod,moderation")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    messages = {
        "textmod": textmod_workload.MESSAGE.encode(),
        "moderation": moderation_workload.MESSAGE.encode(),
        "4k": four_k(),
        "spam": SPAM.encode(),
    }
    for name, data in messages.items():
        with open(os.path.join(args.out, "msg-%s.txt" % name), "wb") as f:
            f.write(data)
        print("msg-%s.txt: %d bytes" % (name, len(data)))
    for shape in args.shapes.split(","):
        for n in (int(x) for x in args.rules.split(",")):
            d = os.path.join(args.out, "%s-%d" % (shape, n))
            if not os.path.exists(os.path.join(d, "table.json")):
                subprocess.run([sys.executable, os.path.join(BENCHES, GENERATORS[shape]), "--rules", str(n),
                                "--out", d], check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(d, "table.json"), encoding="utf-8") as f:
                ps = patterns(json.load(f))
            assert all("\n" not in p for p in ps)
            with open(os.path.join(args.out, "%s-%d.patterns" % (shape, n)), "w", encoding="utf-8") as f:
                f.write("".join(p + "\n" for p in ps))
            print("%s-%d.patterns: %d distinct regexes from %d rules" % (shape, n, len(ps), n))


if __name__ == "__main__":
    main()
