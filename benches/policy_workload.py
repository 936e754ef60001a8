#!/usr/bin/env python3
"""Policy-table workload for benches/engine.rs (stdlib only, deterministic).

    python3 policy_workload.py --rules N --out DIR [--shape mixed|nested] [--seed S]

Writes DIR/table.json (a Jev table) and DIR/input.json: an access-policy request of about
1.5 KB nested JSON (request, client, account, resource, metrics) with hyphenated keys and
arrays. The table is shaped like a policy list that grew for years, written apart from
gateway_workload.py so that the engine is not tuned to one generator:

- `--shape mixed` (the default): ORs of conjunctions, `!( ... )`, `c ? a : b` inside
  conditions, arithmetic over several fields, `??` defaults, string functions (`lower`,
  `upper`, `trim`, `len`) with `contains` / `startsWith` / `endsWith`, nested paths 3-4 deep
  with hyphenated keys, negative indexes, presence tests (`"k" in obj`, `x != nil`);
- `--shape nested`: only path tests, 3-4 deep with hyphenated keys, negative indexes,
  presence and nil tests, joined by `&&`, `||` and `!`.

The atomic tests are drawn from a pool that grows with the table (a new test one time in
three, else one already used), so that, as in real tables, rules repeat the same tests in
other combinations. About half the rules fail only on a test no equality/range index can
use (arithmetic, `??` of two fields, a ternary, a string function): they have to be
evaluated. Each test's truth is computed here from the input, and every rule but the last is
false on it without an error (a well-formed request gives no warnings); the last is true, so
a first-match evaluator has to get past N-1 rules.
"""

import argparse
import json
import os

# the random source and JSON quoting are the moderation generator's, so all draw alike
from moderation_workload import lcg, q

INPUT = {
    "request": {
        "id": "r-9c41e7a2-5b0d-4f6e-8a13-77c2d9e0b5f4",
        "http": {
            "method": "PUT",
            "path": "/v3/projects/atlas/documents/d-20931/share",
            "headers": {
                "user-agent": "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1) AppleWebKit/605.1.15 Safari/605.1.15",
                "x-forwarded-proto": "https",
                "x-request-source": "web-console",
                "accept-language": "de-DE,de;q=0.9,en;q=0.7",
                "content-type": "application/json; charset=utf-8",
                "x-tenant-id": "t-4410",
            },
            "query": {"dry-run": False, "page-size": 50, "notify": "owners"},
        },
        "client": {
            "ip": "198.51.100.23",
            "geo": {"country-code": "DE", "region-name": "Bavaria", "city-name": "Munich", "risk-level": 2},
            "device": {"os-family": "macOS", "os-version": "14.1", "is-managed": True, "trust-score": 71},
            "hops": [{"ip": "10.0.4.12", "kind": "lb"}, {"ip": "10.0.7.3", "kind": "proxy"},
                     {"ip": "198.51.100.23", "kind": "client"}],
        },
    },
    "account": {
        "id": "acct-55190",
        "display-name": "Hanna Keller",
        "email": "Hanna.Keller@Example.DE",
        "billing-info": {"plan-tier": "business", "seats-used": 38, "seats-paid": 40,
                         "payment": {"card-brand": "visa", "past-due-days": 0, "currency": "EUR"}},
        "roles": ["editor", "billing-viewer", "project-admin"],
        "mfa": {"enabled": True, "method": "totp", "age-days": 212},
        "history": [
            {"event": "login", "status": "ok", "age-min": 3},
            {"event": "share", "status": "ok", "age-min": 41},
            {"event": "login", "status": "failed", "age-min": 1440},
        ],
        "quota": {"storage-gb": 120.5, "storage-limit-gb": 500, "api-calls": 18250, "api-limit": 50000},
        "created-days": 1184,
    },
    "resource": {
        "kind": "document",
        "meta-data": {
            "owner-id": "acct-55190",
            "labels": {"data-class": "internal", "team-name": "platform", "cost-center": "cc-4410"},
            "size-kb": 842,
            "version-no": 17,
        },
        "acl": [{"principal": "acct-55190", "perm": "owner"}, {"principal": "grp-eng", "perm": "write"},
                {"principal": "grp-all", "perm": "read"}],
        "path": "projects/atlas/docs/Design Review 2026.md",
    },
    "action": "share",
    "metrics": {"requests-1m": 14, "requests-1h": 410, "errors-1h": 3, "latency-ms": 87.5},
    "risk": {"score": 0.31, "override": None, "model-version": "rm-7"},
    "trace": {"span-id": "s-88120d", "sampled": True},
}

# Nested paths the tests read: (path as written, its value on INPUT, or MISSING).
MISSING = object()


def get(path):
    """The value of a path given as a list of keys and indexes, MISSING when absent."""
    v = INPUT
    for seg in path:
        if isinstance(seg, int):
            if not isinstance(v, list) or not -len(v) <= seg < len(v):
                return MISSING
            v = v[seg]
        else:
            if not isinstance(v, dict) or seg not in v:
                return MISSING
            v = v[seg]
    return v


def text(path):
    """The path in the language: `.name` where a name allows it, else `["name"]`."""
    out = path[0]
    for seg in path[1:]:
        if isinstance(seg, int):
            out += "[%d]" % seg
        elif seg.replace("_", "a").isalnum() and not seg[0].isdigit():
            out += "." + seg
        else:
            out += "[%s]" % q(seg)
    return out


STRING_PATHS = [
    ["request", "http", "method"],
    ["request", "http", "headers", "x-forwarded-proto"],
    ["request", "http", "headers", "x-request-source"],
    ["request", "http", "query", "notify"],
    ["request", "client", "geo", "country-code"],
    ["request", "client", "geo", "region-name"],
    ["request", "client", "device", "os-family"],
    ["request", "client", "hops", -1, "kind"],
    ["request", "client", "hops", -2, "kind"],
    ["account", "billing-info", "plan-tier"],
    ["account", "billing-info", "payment", "card-brand"],
    ["account", "billing-info", "payment", "currency"],
    ["account", "mfa", "method"],
    ["account", "history", -1, "status"],
    ["account", "history", -2, "event"],
    ["account", "roles", 0],
    ["account", "roles", -1],
    ["resource", "kind"],
    ["resource", "meta-data", "labels", "data-class"],
    ["resource", "meta-data", "labels", "team-name"],
    ["resource", "meta-data", "labels", "cost-center"],
    ["resource", "acl", 0, "perm"],
    ["resource", "acl", -1, "principal"],
    ["action"],
    ["risk", "model-version"],
]

NUMBER_PATHS = [
    ["request", "http", "query", "page-size"],
    ["request", "client", "geo", "risk-level"],
    ["request", "client", "device", "trust-score"],
    ["account", "billing-info", "seats-used"],
    ["account", "billing-info", "payment", "past-due-days"],
    ["account", "mfa", "age-days"],
    ["account", "history", -1, "age-min"],
    ["account", "history", 0, "age-min"],
    ["account", "quota", "storage-gb"],
    ["account", "quota", "api-calls"],
    ["account", "created-days"],
    ["resource", "meta-data", "size-kb"],
    ["resource", "meta-data", "version-no"],
    ["metrics", "requests-1m"],
    ["metrics", "latency-ms"],
    ["risk", "score"],
]

BOOL_PATHS = [
    ["request", "http", "query", "dry-run"],
    ["request", "client", "device", "is-managed"],
    ["account", "mfa", "enabled"],
    ["trace", "sampled"],
]

# objects whose keys presence tests ask about: (path, keys present, keys absent)
OBJECTS = [
    (["request", "http", "headers"], ["x-tenant-id", "x-forwarded-proto", "accept-language"],
     ["x-debug", "x-admin-override", "authorization", "x-impersonate"]),
    (["resource", "meta-data", "labels"], ["data-class", "cost-center"], ["legal-hold", "pii", "export-ban"]),
    (["request", "http", "query"], ["dry-run", "notify"], ["force", "as-user", "bypass-cache"]),
    (["account", "billing-info"], ["payment", "plan-tier"], ["trial-ends", "credit-hold"]),
]

# paths that are nil on INPUT (absent, or null) and paths that are present
NIL_PATHS = [["risk", "override"], ["account", "mfa", "recovery-code"], ["resource", "meta-data", "legal-hold"],
             ["request", "client", "hops", -4, "ip"], ["account", "history", 5, "status"],
             ["request", "http", "headers", "x-debug"]]
PRESENT_PATHS = [["account", "mfa", "method"], ["resource", "meta-data", "owner-id"],
                 ["request", "client", "hops", -3, "ip"], ["account", "history", 0, "event"]]

OTHER_STRINGS = ["GET", "POST", "DELETE", "http", "api-gateway", "mobile-app", "none", "all", "US", "FR", "CN",
                 "BR", "Texas", "Ontario", "Windows", "Linux", "iOS", "Android", "cdn", "edge", "free", "starter",
                 "enterprise", "amex", "jcb", "USD", "GBP", "sms", "webauthn", "blocked", "locked", "delete",
                 "export", "viewer", "auditor", "owner-admin", "folder", "dataset", "secret", "confidential",
                 "public", "security", "finance", "cc-9001", "read", "grp-ext", "download", "rm-5"]

KEYWORDS = ["atlas", "design", "review", "secret", "payroll", "export", "legal", "draft", "board", "merger",
            "salary", "incident", "keys", "backup", "customer", "invoice", "contract", "roadmap"]


def fmt(x):
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, float):
        return repr(round(x, 3))
    return str(x)


class Gen:
    def __init__(self, n, shape, seed):
        self.n = n
        self.shape = shape
        self.rnd = lcg(n * 40503 + seed * 7 + (1 if shape == "nested" else 0))
        # pools of tests already written, by (truth, indexable): rules reuse them
        self.pools = {}

    def r(self, k):
        return next(self.rnd) % k

    def pick(self, xs):
        return xs[self.r(len(xs))]

    def other(self, value, pool):
        while True:
            x = self.pick(pool)
            if x != value:
                return x

    # ---- indexable tests: a path against literals ----

    def eq(self, want):
        path = self.pick(STRING_PATHS)
        value = get(path)
        if self.r(3) == 0:
            lits = [self.other(value, OTHER_STRINGS) for _ in range(1 + self.r(4))]
            neg = self.r(4) == 0
            if want != neg:
                lits.insert(self.r(len(lits) + 1), value)
            return "%s %s [%s]" % (text(path), "not in" if neg else "in", ", ".join(q(x) for x in lits)), want
        if self.r(4) == 0:
            lit = self.other(value, OTHER_STRINGS) if want else value
            return "%s != %s" % (text(path), q(lit)), want
        lit = value if want else self.other(value, OTHER_STRINGS)
        return "%s == %s" % (text(path), q(lit)), want

    def cmp(self, want):
        path = self.pick(NUMBER_PATHS)
        value = get(path)
        op = self.pick(["<", "<=", ">", ">="])
        integer = isinstance(value, int)
        delta = 1 + self.r(max(2, int(abs(value)) // 2 + 3)) if integer else round(0.05 + self.r(200) / 40.0, 2)
        if value < 1 and not integer:
            delta = round(0.01 + self.r(50) / 100.0, 2)
        # `value > t` holds for t below it, `value < t` for t above it
        if op in (">", ">="):
            t = value - delta if want else value + delta
        else:
            t = value + delta if want else value - delta
        return "%s %s %s" % (text(path), op, fmt(round(t, 3) if not integer else t)), want

    def flag(self, want):
        path = self.pick(BOOL_PATHS)
        return (text(path), want) if get(path) == want else ("!" + text(path), want)

    def presence(self, want):
        obj, present, absent = self.pick(OBJECTS)
        if self.r(2) == 0:
            key = self.pick(present if want else absent)
            return "%s in %s" % (q(key), text(obj)), want
        key = self.pick(absent if want else present)
        return "%s not in %s" % (q(key), text(obj)), want

    def nil_test(self, want):
        if self.r(2) == 0:
            path = self.pick(NIL_PATHS)
            return "%s %s nil" % (text(path), "==" if want else "!="), want
        path = self.pick(PRESENT_PATHS)
        return "%s %s nil" % (text(path), "!=" if want else "=="), want

    # ---- tests no equality/range index can use ----

    def arithmetic(self, want):
        """Arithmetic against a literal: an index reads the shared sub-expression like a field."""
        k = self.r(3)
        if k == 0:
            # seats paid - seats used: 40 - 38 = 2
            t = 1 + self.r(2) if want else 3 + self.r(20)
            return "account[\"billing-info\"][\"seats-paid\"] - account[\"billing-info\"][\"seats-used\"] >= %d" % t, want
        if k == 1:
            # risk.override is null: the score decides (0.31)
            t = round(0.32 + self.r(60) / 100.0, 2) if want else round(0.05 + self.r(25) / 100.0, 2)
            return "(risk.override ?? risk.score) < %s" % fmt(t), want
        # page-size is 50
        t = 51 + self.r(200) if want else 1 + self.r(49)
        return "(request.http.query[\"page-size\"] ?? 20) < %d" % t, want

    def cross(self, want):
        """Computed values on both sides: no index can tell, only evaluation."""
        k = self.r(5)
        bi, quota, m = 'account["billing-info"]', "account.quota", "metrics"
        if k == 0:
            # 38 + t <= 40
            t = self.r(3) if want else 3 + self.r(20)
            return '%s["seats-used"] + %d <= %s["seats-paid"]' % (bi, t, bi), want
        if k == 1:
            # 120.5 < 500 * f holds for f > 0.241
            f = round(0.25 + self.r(60) / 100.0, 2) if want else round(0.05 + self.r(19) / 100.0, 2)
            return '%s["storage-gb"] < %s["storage-limit-gb"] * %s' % (quota, quota, fmt(f)), want
        if k == 2:
            # 18250 + t < 50000
            t = self.r(31000) if want else 31750 + self.r(20000)
            return '%s["api-calls"] + %d < %s["api-limit"]' % (quota, t, quota), want
        if k == 3:
            # 3 * 100 < 410 * f holds for f > 0.732
            f = round(0.75 + self.r(300) / 100.0, 2) if want else round(0.1 + self.r(60) / 100.0, 2)
            return '%s["errors-1h"] * 100 < %s["requests-1h"] * %s' % (m, m, fmt(f)), want
        # (null ?? 0.31) * 100 = 31 < 14 + t holds for t > 17
        t = 18 + self.r(40) if want else self.r(17)
        return '(risk.override ?? risk.score) * 100 < %s["requests-1m"] + %d' % (m, t), want

    def coalesce(self, want):
        lit = self.pick(["legal", "finance-only", "frozen", "retain-7y"])
        if want:
            return '(resource["meta-data"]["legal-hold"] ?? resource.kind) == "document"', True
        return '(resource["meta-data"]["legal-hold"] ?? resource.kind) == %s' % q(lit), False

    def ternary(self, want):
        k = self.r(2)
        if k == 0:
            # managed device: the trust score counts against the first threshold (71)
            a = 71 - 1 - self.r(50) if want else 71 + 1 + self.r(20)
            b = 1 + self.r(99)
            return "(request.client.device[\"is-managed\"] ? request.client.device[\"trust-score\"] > %d : " \
                   "request.client.device[\"trust-score\"] > %d)" % (a, b), want
        # the plan tier is business, so the first bound applies; the risk level is 2
        a = 2 + self.r(3) if want else 1
        return "request.client.geo[\"risk-level\"] <= (account[\"billing-info\"][\"plan-tier\"] == \"business\" ? %d : 1)" % a, want

    def string_op(self, want):
        k = self.r(6)
        ua = 'request.http.headers["user-agent"]'
        if k == 0:
            w = self.pick(["mac os", "safari", "applewebkit"]) if want else self.pick(["curl", "bot", "python", "headless"])
            return "lower(%s) contains %s" % (ua, q(w)), want
        if k == 1:
            dom = "example.de" if want else self.pick(["example.com", "corp.local", "gmail.com", "example.fr"])
            return "lower(account.email) endsWith %s" % q(dom), want
        if k == 2:
            pre = "/v3/projects/" if want else self.pick(["/v2/", "/admin/", "/internal/", "/v3/billing/"])
            return "request.http.path startsWith %s" % q(pre), want
        if k == 3:
            w = self.pick(["design", "review", "atlas"]) if want else self.pick(KEYWORDS[3:])
            return "lower(resource.path) contains %s" % q(w), want
        if k == 4:
            n = len(INPUT["account"]["display-name"])
            t = n + 1 + self.r(30) if want else n - 1 - self.r(8)
            return "len(account[\"display-name\"]) < %d" % t, want
        pre = "RM-" if want else self.pick(["ML-", "RX-", "V2-"])
        return "upper(trim(risk[\"model-version\"])) startsWith %s" % q(pre), want

    def fresh(self, want, indexable):
        if indexable:
            kinds = [self.eq, self.eq, self.eq, self.cmp, self.cmp, self.flag, self.presence, self.nil_test]
            if self.shape == "mixed":
                kinds += [self.arithmetic, self.string_op, self.string_op, self.coalesce]
        elif self.shape == "nested":
            # path tests an index cannot use: `||` inside, a negated conjunction
            a, _ = self.fresh(want, True)
            b, _ = self.fresh(False, True)
            if self.r(2) == 0:
                return "(%s || %s)" % (b, a), want
            c, _ = self.fresh(True, True)
            return "!(%s && %s)" % (c, self.fresh(not want, True)[0]), want
        else:
            kinds = [self.cross, self.cross, self.ternary]
        return self.pick(kinds)(want)

    def test(self, want, indexable=True):
        pool = self.pools.setdefault((want, indexable), [])
        if len(pool) >= 8 and self.r(3) != 0:
            return self.pick(pool)
        t = self.fresh(want, indexable)
        assert t[1] == want, t
        pool.append(t)
        return t

    def conjunction(self, want, size, fail_unindexable):
        """`size` tests; when not `want`, exactly one is false, the unindexable kind if asked."""
        fail_at = self.r(size)
        terms = []
        for i in range(size):
            for _ in range(4):
                if not want and i == fail_at:
                    t = self.test(False, indexable=not fail_unindexable)
                else:
                    t = self.test(True, indexable=self.r(3) != 0)
                if t not in terms:
                    break
            terms.append(t)
        truth = all(v for _, v in terms)
        assert truth == want
        return " && ".join(t for t, _ in terms), truth

    def rule(self, want):
        # half the rules are false only on a test the index cannot use
        hard = self.r(2) == 0
        shape = self.r(10)
        if shape < 4:
            return self.conjunction(want, 2 + self.r(4), hard)
        if shape < 7:
            left = want and self.r(2) == 0
            a, _ = self.conjunction(left, 2 + self.r(2), hard)
            b, _ = self.conjunction(want and not left, 1 + self.r(3), hard)
            return "(%s) || (%s)" % (a, b), want
        if shape < 9:
            inner, _ = self.conjunction(False, 2, self.r(2) == 0)
            rest, _ = self.conjunction(want, 1 + self.r(3), hard)
            return "!(%s) && %s" % (inner, rest), want
        first, _ = self.conjunction(True, 1, False)
        alt, _ = self.conjunction(want, 1 + self.r(2), hard)
        return "%s && (%s || %s)" % (first, self.test(False, self.r(2) == 0)[0], alt), want


def build(n, shape, seed):
    g = Gen(n, shape, seed)
    rules = []
    for i in range(n - 1):
        cond, truth = g.rule(False)
        assert not truth
        rules.append({"id": "p_%05d" % (i + 1), "condition": cond,
                      "action": {"effect": ["deny", "review", "step-up", "allow"][i % 4], "rule_no": i + 1}})
    last, truth = g.rule(True)
    assert truth
    rules.append({"id": "p_%05d" % n, "condition": last, "action": {"effect": "allow", "reason": "policy default"}})
    return {"name": "policy_bench", "default": {"effect": "deny"}, "rules": rules}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rules", type=int, default=500)
    ap.add_argument("--shape", choices=["mixed", "nested"], default="mixed")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    table = build(args.rules, args.shape, args.seed)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.json"), "w", encoding="utf-8") as f:
        json.dump(table, f, indent=1)
    body = json.dumps(INPUT)
    with open(os.path.join(args.out, "input.json"), "w", encoding="utf-8") as f:
        f.write(body)
    print("%d rules (%s), input %d bytes" % (args.rules, args.shape, len(body.encode())))


if __name__ == "__main__":
    main()
