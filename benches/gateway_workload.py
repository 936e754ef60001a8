#!/usr/bin/env python3
"""Risk / API-gateway workload for benches/engine.rs (stdlib only, deterministic).

    python3 gateway_workload.py --rules N --out DIR

Writes DIR/table.json (a Jev table) and DIR/input.json (a 1-2 KB nested request: headers,
user, session, order, items, history, and fields no rule reads). The rules have the shapes
real tables have, not only `field == literal` conjunctions:

- nested paths (`session.ip.country`), array elements (`items[0].sku`, `items[-1].price`,
  `history.recent[-2].status`), headers by name (`headers["x-api-key"]`);
- top-level `||` of two conjunctions, `!( ... )`, `not in`, `? :`;
- `x != nil`, `x == nil`, `"x-debug" in headers`;
- `(session.risk_override ?? risk_score) < 0.38`, `(coupon ?? "") == "SAVE10"`,
  `len(items) * 10 + items_in_cart < 19`, `order_amount_usd - history.avg_amount_usd * n > -39`;
- `startsWith`, `contains`, `endsWith` on headers and paths.

Every rule is built from terms whose truth on the input is known when they are written;
each rule but the last is false on the input (never an error: a well-formed request gives
no warnings), and the last is true, so a first-match evaluator has to get past N-1 rules.
About a fifth of the rules fail only on a term no index can use (arithmetic, `??` of two
fields, a ternary), so some rules are always evaluated.
"""

import argparse
import json
import os

INPUT = {
    "request_id": "req-7f3a9c2e-41d8-4b6a-9e0f-2c5d8a1b3e47",
    "method": "POST",
    "path": "/api/v2/orders/checkout",
    "headers": {
        "host": "shop.example.com",
        "user-agent": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_2 like Mac OS X) AppleWebKit/605.1.15 "
        "(KHTML, like Gecko) Version/17.2 Mobile/15E148 Safari/604.1",
        "accept": "application/json",
        "accept-language": "ja-JP,ja;q=0.9,en-US;q=0.8",
        "content-type": "application/json",
        "x-api-key": "k-live-5f2c81d0a4",
        "x-forwarded-for": "203.0.113.7, 10.0.0.4",
        "cookie": "session=s-88af01; theme=dark; consent=yes",
    },
    "user": {
        "id": "u-1029384",
        "tier": "gold",
        "email_domain": "example.jp",
        "created_days": 400,
        "profile": {"country": "JP", "language": "ja", "kyc": {"level": 2, "verified": True, "method": "document"}},
        "flags": ["beta", "newsletter"],
    },
    "session": {
        "id": "s-88af01",
        "risk_override": None,
        "age_sec": 1840,
        "mfa": True,
        "device": {"os": "ios", "os_version": "17.2", "model": "iPhone15,3", "fingerprint": "fp-9a8b7c6d5e",
                   "trusted": True},
        "ip": {"address": "203.0.113.7", "country": "JP", "asn": 2516, "is_vpn": False, "is_tor": False,
               "reputation": 87},
    },
    "order": {
        "id": "o-55120987",
        "amount_usd": 1200.5,
        "currency": "JPY",
        "payment": {"method": "card", "card": {"bin": "411111", "country": "JP", "brand": "visa", "3ds": True}},
        "shipping": {"country": "JP", "express": False, "address_age_days": 210},
    },
    "order_amount_usd": 1200.5,
    "items": [
        {"sku": "SKU-10023", "price": 450.0, "qty": 1, "category": "electronics"},
        {"sku": "SKU-20871", "price": 300.25, "qty": 2, "category": "home"},
        {"sku": "SKU-33019", "price": 150.0, "qty": 1, "category": "books"},
    ],
    "items_in_cart": 4,
    "history": {
        "orders_30d": 4,
        "avg_amount_usd": 180.5,
        "chargebacks_365d": 0,
        "recent": [
            {"status": "delivered", "amount_usd": 210.0},
            {"status": "delivered", "amount_usd": 95.5},
            {"status": "refunded", "amount_usd": 80.0},
        ],
    },
    "risk_score": 0.42,
    "n": 3,
    "tags": ["returning", "mobile", "app-v5"],
    "client": {"app": "shop-ios", "version": "5.12.1", "build": 51201, "experiments": {"checkout_v3": True}},
}

COUNTRIES = ["US", "CN", "DE", "GB", "FR", "BR", "IN", "CA", "AU", "MX", "KR", "IT", "ES", "NL", "SE", "RU", "NG",
             "VN", "TR", "PL"]
TIERS = ["bronze", "silver", "platinum", "vip", "staff", "trial", "free"]
METHODS = ["GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
OS = ["android", "windows", "macos", "linux", "ipados"]
CATEGORIES = ["toys", "garden", "gift_cards", "crypto", "jewelry", "phones", "software", "tickets"]
STATUSES = ["chargeback", "fraud", "disputed", "cancelled", "failed"]
BRANDS = ["mastercard", "amex", "unionpay", "jcb", "discover"]
CURRENCIES = ["USD", "EUR", "CNY", "GBP", "KRW", "BRL"]
PAY = ["crypto", "wire", "paypal", "gift_card", "cod"]


def lcg(seed):
    state = seed & 0xFFFFFFFFFFFFFFFF
    while True:
        state = (state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        yield state >> 33


class Gen:
    def __init__(self, n):
        self.n = n
        self.rnd = lcg(n * 2654435761 + 17)
        # Pools of literals that grow with the table, as ids, keys and paths do in real tables.
        self.scale = max(1, n // 50)

    def r(self, k):
        return next(self.rnd) % k

    def pick(self, xs):
        return xs[self.r(len(xs))]

    def sample(self, xs, k):
        out = []
        while len(out) < k:
            x = self.pick(xs)
            if x not in out:
                out.append(x)
        return out

    # ---- terms: (text, truth on INPUT); none can fail on INPUT ----

    def eq_str(self, path, value, others, want):
        lit = value if want else self.pick(others)
        op = self.pick(["==", "=="])
        return "%s %s %s" % (path, op, q(lit)), want

    def ne_str(self, path, value, others, want):
        lit = self.pick(others) if want else value
        return "%s != %s" % (path, q(lit)), want

    def in_list(self, path, value, others, want):
        lits = self.sample(others, 1 + self.r(min(4, len(others))))
        if want:
            lits.insert(self.r(len(lits) + 1), value)
        return "%s in [%s]" % (path, ", ".join(q(x) for x in lits)), want

    def not_in_list(self, path, value, others, want):
        text, truth = self.in_list(path, value, others, not want)
        return text.replace(" in [", " not in [", 1), not truth

    def num(self, path, value, want, integer=False):
        op = self.pick(["<", "<=", ">", ">="])
        delta = 1 + self.r(200) if integer else round(0.5 + self.r(4000) / 10.0, 1)
        if value < 1 and not integer:
            delta = round(0.01 + self.r(40) / 100.0, 2)
        # below: value > t holds; above: value < t holds
        below = value - delta
        above = value + delta
        if integer:
            below, above = int(below), int(above)
        if op in (">", ">="):
            t = below if want else above
        else:
            t = above if want else below
        return "%s %s %s" % (path, op, fmt(t)), want

    def flag(self, path, value, want):
        if value == want:
            return path, want
        return "!" + path, want

    def string_field(self, want):
        choice = self.r(9)
        if choice == 0:
            return self.eq_str("user.tier", "gold", TIERS, want)
        if choice == 1:
            return self.in_list("session.ip.country", "JP", COUNTRIES, want)
        if choice == 2:
            return self.not_in_list("order.payment.method", "card", PAY, want)
        if choice == 3:
            return self.eq_str("session.device.os", "ios", OS, want)
        if choice == 4:
            return self.in_list("order.payment.card.brand", "visa", BRANDS, want)
        if choice == 5:
            return self.eq_str("order.currency", "JPY", CURRENCIES, want)
        if choice == 6:
            return self.in_list("user.profile.country", "JP", COUNTRIES, want)
        if choice == 7:
            return self.ne_str("order.shipping.country", "JP", COUNTRIES, want)
        return self.in_list("method", "POST", METHODS, want)

    def id_field(self, want):
        # Identifiers: many distinct literals, growing with the table.
        choice = self.r(4)
        if choice == 0:
            others = ["u-%07d" % (2000000 + self.r(1000 * self.scale)) for _ in range(3)]
            return self.in_list("user.id", "u-1029384", others, want)
        if choice == 1:
            others = ["k-live-%010x" % self.r(1 << 36) for _ in range(2)]
            return self.eq_str('headers["x-api-key"]', "k-live-5f2c81d0a4", others, want)
        if choice == 2:
            others = ["SKU-%05d" % (40000 + self.r(5000 * self.scale)) for _ in range(3)]
            return self.eq_str("items[0].sku", "SKU-10023", others, want)
        others = ["fp-%010x" % self.r(1 << 36) for _ in range(2)]
        return self.eq_str("session.device.fingerprint", "fp-9a8b7c6d5e", others, want)

    def number_field(self, want):
        choice = self.r(9)
        if choice == 0:
            return self.num("order.amount_usd", 1200.5, want)
        if choice == 1:
            return self.num("order_amount_usd", 1200.5, want)
        if choice == 2:
            return self.num("risk_score", 0.42, want)
        if choice == 3:
            return self.num("session.ip.reputation", 87, want, integer=True)
        if choice == 4:
            return self.num("user.created_days", 400, want, integer=True)
        if choice == 5:
            return self.num("items[-1].price", 150.0, want)
        if choice == 6:
            return self.num("history.orders_30d", 4, want, integer=True)
        if choice == 7:
            return self.num("user.profile.kyc.level", 2, want, integer=True)
        return self.num("session.age_sec", 1840, want, integer=True)

    def bool_field(self, want):
        path, value = self.pick([
            ("session.ip.is_vpn", False), ("session.ip.is_tor", False), ("session.mfa", True),
            ("user.profile.kyc.verified", True), ("order.payment.card.3ds", True), ("session.device.trusted", True),
            ("order.shipping.express", False),
        ])
        if path == "order.payment.card.3ds":
            path = 'order.payment.card["3ds"]'
        return self.flag(path, value, want)

    def nil_test(self, want):
        path, present = self.pick([
            ("coupon", False), ("session.risk_override", False), ("user.profile.kyc.method", True),
            ("order.shipping.address_age_days", True), ("headers.referer", False), ("user.manager_id", False),
        ])
        if present == want:
            return "%s != nil" % path, want
        return "%s == nil" % path, want

    def presence(self, want):
        key, present = self.pick([
            ("x-debug", False), ("x-api-key", True), ("cookie", True), ("x-admin-token", False),
            ("authorization", False), ("x-forwarded-for", True),
        ])
        if present == want:
            return '%s in headers' % q(key), want
        return '%s not in headers' % q(key), want

    def header_text(self, want):
        choice = self.r(4)
        if choice == 0:
            lit = self.pick(["curl/", "python-requests", "Go-http-client", "sqlmap", "Wget"])
            if want:
                return 'headers["user-agent"] contains "iPhone"', True
            return 'headers["user-agent"] startsWith %s' % q(lit), False
        if choice == 1:
            lit = self.pick(["/admin", "/internal", "/debug", "/api/v1/", "/graphql"])
            if want:
                return 'path startsWith "/api/v2/"', True
            return "path startsWith %s" % q(lit), False
        if choice == 2:
            if want:
                return 'headers["accept-language"] contains "ja"', True
            return 'headers["accept-language"] contains %s' % q(self.pick(["ru", "vi", "tr", "pl"])), False
        if want:
            return 'path endsWith "/checkout"', True
        return "path endsWith %s" % q(self.pick(["/refund", "/export", "/payout", "/token"])), False

    def elements(self, want):
        choice = self.r(4)
        if choice == 0:
            return self.eq_str("history.recent[-2].status", "delivered", STATUSES, want)
        if choice == 1:
            return self.in_list("items[1].category", "home", CATEGORIES, want)
        if choice == 2:
            return self.not_in_list("items[-1].category", "books", CATEGORIES, want)
        return self.num("items[0].price", 450.0, want)

    def unindexable(self, want):
        """Terms over several fields or computed values: only evaluation can tell."""
        choice = self.r(6)
        if choice == 0:
            # (session.risk_override ?? risk_score) = 0.42
            t = round(0.43 + self.r(50) / 100.0, 2) if want else round(0.05 + self.r(37) / 100.0, 2)
            return "(session.risk_override ?? risk_score) < %s" % fmt(t), want
        if choice == 1:
            # len(items) * 10 + items_in_cart = 34
            t = 35 + self.r(40) if want else 5 + self.r(29)
            return "len(items) * 10 + items_in_cart < %d" % t, want
        if choice == 2:
            # order_amount_usd - history.avg_amount_usd * n = 659.0
            t = -(1 + self.r(600)) if want else 660 + self.r(2000)
            return "order_amount_usd - history.avg_amount_usd * n > %d" % t, want
        if choice == 3:
            lit = self.pick(["SAVE10", "WELCOME", "BLACKFRIDAY", "VIP20", "FREESHIP"])
            if want:
                return '(coupon ?? "") == ""', True
            return '(coupon ?? "") == %s' % q(lit), False
        if choice == 4:
            # is_vpn is false: the else branch decides
            t = round(0.1 + self.r(30) / 100.0, 2) if want else round(0.45 + self.r(50) / 100.0, 2)
            return "(session.ip.is_vpn ? risk_score > 0.2 : risk_score > %s)" % fmt(t), want
        # order.amount_usd / history.avg_amount_usd = 6.65
        t = round(1 + self.r(50) / 10.0, 1) if want else round(6.7 + self.r(80) / 10.0, 1)
        return "order.amount_usd > history.avg_amount_usd * %s" % fmt(t), want

    def term(self, want, indexable=True):
        kinds = [self.string_field, self.string_field, self.number_field, self.number_field, self.bool_field,
                 self.id_field, self.nil_test, self.presence, self.elements, self.header_text]
        if not indexable:
            return self.unindexable(want)
        return self.pick(kinds)(want)

    def conjunction(self, want, size, fail_unindexable=False):
        """`size` terms; when not `want`, exactly one is false (anywhere in the list)."""
        fail_at = self.r(size)
        terms = []
        for i in range(size):
            if not want and i == fail_at:
                terms.append(self.term(False, indexable=not fail_unindexable))
            else:
                indexable = self.r(5) != 0
                terms.append(self.term(True, indexable=indexable))
        text = " && ".join(t for t, _ in terms)
        truth = all(v for _, v in terms)
        assert truth == want
        return text, truth

    def rule(self, want):
        shape = self.r(20)
        if shape < 8:
            return self.conjunction(want, 2 + self.r(4))
        if shape < 12:
            # (A && B) || (C && D): both false, or one true
            left_true = want and self.r(2) == 0
            a, _ = self.conjunction(left_true, 2 + self.r(2))
            b, _ = self.conjunction(want and not left_true, 1 + self.r(3))
            return "(%s) || (%s)" % (a, b), want
        if shape < 14:
            # !(A && B) && C: the negation holds when A && B is false
            inner, _ = self.conjunction(False, 2)
            rest, _ = self.conjunction(want, 1 + self.r(3))
            return "!(%s) && %s" % (inner, rest), want
        if shape < 18:
            return self.conjunction(want, 2 + self.r(3), fail_unindexable=not want)
        # gateway shape: method and path, then a header check
        m, _ = self.in_list("method", "POST", METHODS, True)
        p, pv = self.header_text(want)
        h, _ = self.presence(True)
        return "%s && %s && %s" % (m, p, h), pv


def fmt(x):
    if isinstance(x, float):
        s = repr(round(x, 4))
        return s
    return str(x)


def q(s):
    return json.dumps(s)


def build(n):
    g = Gen(n)
    rules = []
    for i in range(n - 1):
        cond, truth = g.rule(False)
        assert not truth
        rules.append({"id": "gw_%05d" % (i + 1), "condition": cond,
                      "action": {"decision": ["deny", "review", "challenge", "allow"][i % 4], "rule_no": i + 1}})
    last = ('user.tier == "gold" && session.ip.country in ["JP", "KR"] && !session.ip.is_vpn'
            ' && (session.risk_override ?? risk_score) < 0.5 && history.recent[-2].status == "delivered"'
            ' && len(items) * 10 + items_in_cart < 40 && "x-api-key" in headers'
            ' && (order.amount_usd > 1000 || order.payment.card.country != "JP")')
    rules.append({"id": "gw_%05d" % n, "condition": last,
                  "action": {"decision": "review", "reason": "large order from a returning gold user"}})
    return {"name": "gateway_bench", "default": {"decision": "allow"}, "rules": rules}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rules", type=int, default=500)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    table = build(args.rules)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.json"), "w", encoding="utf-8") as f:
        json.dump(table, f, indent=1)
    body = json.dumps(INPUT)
    with open(os.path.join(args.out, "input.json"), "w", encoding="utf-8") as f:
        f.write(body)
    print("%d rules, input %d bytes" % (args.rules, len(body.encode())))


if __name__ == "__main__":
    main()
