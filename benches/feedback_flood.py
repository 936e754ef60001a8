#!/usr/bin/env python3
"""A feedback flood (issue 23): ids minted through POST /decide/{t}/batch, then one feedback for
each, pipelined on one connection. Prints what /feedback answered (and the first refusal, if
any), what a fresh decision's feedback gets afterwards, the feedback-id metrics, the time each
phase took and the server's resident memory before, at its peak and 2 s after.

    python3 benches/feedback_flood.py target/release/clef 510000

510,000 ids are more than the default tuning.max_feedback_ids (500,000). Stdlib only; talks
only to 127.0.0.1; the server runs in a temporary folder and is stopped at the end."""
import json, os, socket, subprocess, sys, tempfile, threading, time

binary, n = sys.argv[1], int(sys.argv[2])
extra = sys.argv[3] if len(sys.argv) > 3 else ""
d = tempfile.mkdtemp()
os.makedirs(f"{d}/tables")
open(f"{d}/tables/pay.json", "w").write(json.dumps({
    "params": {"limit": {"value": 50, "min": 0, "max": 100, "step": 10, "tunable": True}},
    "default": {"allow": False},
    "rules": [{"id": "under", "condition": "amount < params.limit", "action": {"allow": True}}]}))
def free():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
port, admin = free(), free()
open(f"{d}/config.yaml", "w").write(
    f"server: {{host: 127.0.0.1, port: {port}, max_body_bytes: 1048576}}\nadmin: {{listen: '127.0.0.1:{admin}'}}\n"
    f"model: {{default_table: pay, watch_file: false}}\nstate_dir: state\n"
    f"tuning:\n  tables: [pay]\n  traffic: 0.0\n  variants: 2\n{extra}")
proc = subprocess.Popen([binary, "serve", "-c", f"{d}/config.yaml"], stderr=open(f"{d}/log", "w"))
def rss():
    for l in open(f"/proc/{proc.pid}/status"):
        if l.startswith("VmRSS:"): return int(l.split()[1])
peak = [0]; stop = [False]
def sampler():
    while not stop[0]:
        peak[0] = max(peak[0], rss()); time.sleep(0.02)

class Conn:
    def __init__(self):
        for _ in range(200):
            try: self.s = socket.create_connection(("127.0.0.1", port)); break
            except OSError: time.sleep(0.02)
        self.buf = b""
    def send(self, data): self.s.sendall(data)
    def read(self):
        while b"\r\n\r\n" not in self.buf: self.buf += self.s.recv(1 << 20)
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ")[1]); cl = 0
        for line in head.split(b"\r\n")[1:]:
            k, v = line.split(b":", 1)
            if k.strip().lower() == b"content-length": cl = int(v)
        while len(rest) < cl: rest += self.s.recv(1 << 20)
        self.buf = rest[cl:]
        return status, rest[:cl]
def req(method, path, body=b""):
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body

c = Conn()
time.sleep(0.5)  # the tuning thread builds the arms
before = rss()
threading.Thread(target=sampler, daemon=True).start()
t0 = time.time(); ids = []
while len(ids) < n:
    k = min(10_000, n - len(ids))
    c.send(req("POST", "/decide/pay/batch", ("".join('{"amount": 1}\n' for _ in range(k))).encode()))
    st, body = c.read(); assert st == 200, body[:200]
    ids += [json.loads(l)["snapshot_id"] for l in body.splitlines()]
minted = time.time() - t0
t1 = time.time(); statuses = {}; first_refused = None; sent = 0
for i in range(0, len(ids), 1000):
    chunk = ids[i:i + 1000]
    c.send(b"".join(req("POST", "/feedback", json.dumps({"snapshot_id": x, "reward": 1}).encode()) for x in chunk))
    for j in range(len(chunk)):
        st, body = c.read(); statuses[st] = statuses.get(st, 0) + 1; sent += 1
        if st != 200 and first_refused is None: first_refused = (sent, time.time() - t1, body[:160])
fed = time.time() - t1
# what a client sees now: a fresh decision's feedback
c.send(req("POST", "/decide/pay", b'{"amount": 1}')); st, body = c.read(); fresh = json.loads(body)["snapshot_id"]
c.send(req("POST", "/feedback", json.dumps({"snapshot_id": fresh, "reward": 1}).encode())); after_st, after_body = c.read()
c.send(req("GET", "/metrics")); _, m = c.read()
held = [l for l in m.decode().splitlines() if l.startswith("clef_tuning_feedback_ids")]
stop[0] = True; time.sleep(0.05)
time.sleep(2); after = rss()
proc.terminate(); proc.wait()
print(json.dumps({"binary": binary, "ids": len(ids), "mint_s": round(minted, 2), "feedback_s": round(fed, 2),
    "feedback_statuses": statuses, "first_refused": None if not first_refused else [first_refused[0], round(first_refused[1], 2), first_refused[2].decode()],
    "fresh_feedback_after": [after_st, after_body.decode()[:160]], "metrics": held,
    "rss_kib": {"before": before, "peak": peak[0], "after_2s": after}}, indent=1))
