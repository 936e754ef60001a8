#!/usr/bin/env python3
"""Resident memory of a served regex-heavy table under varied messages (issue 28; stdlib only).

    python3 benches/regex_memory.py [--bin target/release/clef] [--rules 500] [--requests 6000]

Writes a moderation table with benches/textmod_workload.py (about one distinct regex per rule),
serves it from the real binary on a free loopback port (two workers), and posts REQUESTS
messages of random length made of the table's own words mixed with non-ASCII text (which makes
Unicode `\\b` patterns leave the lazy DFA for their fallback), one connection, one at a time.
Prints the server's RSS before, every quarter and after: the lazy DFAs' caches grow with what
they have seen and must level off (each is capped), not follow the number of messages.
"""

import argparse
import http.client
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "target", "release", "clef"))
    ap.add_argument("--rules", type=int, default=500)
    ap.add_argument("--requests", type=int, default=6000)
    args = ap.parse_args()
    work = tempfile.mkdtemp()
    gen = os.path.join(work, "gen")
    subprocess.run([sys.executable, os.path.join(HERE, "textmod_workload.py"), "--rules", str(args.rules), "--out", gen],
                   check=True, stdout=subprocess.DEVNULL)
    tables = os.path.join(work, "tables")
    os.mkdir(tables)
    os.rename(os.path.join(gen, "table.json"), os.path.join(tables, "textmod.json"))
    base = json.load(open(os.path.join(gen, "input.json")))
    vocab = re.findall(r"[A-Za-z]{3,12}", open(os.path.join(tables, "textmod.json")).read())[:5000]
    vocab += ["é", "中文", "讨论", "ÄÖÜ", "Ωμέγα", "12345678", "!!!!!!", "FREE", "MONEY", "http://t.me/x"]
    port = free_port()
    env = dict(os.environ, CLEF_ADMIN__LISTEN="", CLEF_LOGGING__LEVEL="warn", CLEF_SERVER__WORKERS="2",
               CLEF_MODEL__TABLES_DIR=tables, CLEF_MODEL__DEFAULT_TABLE="textmod", CLEF_MODEL__WATCH_FILE="false")
    config = os.path.join(HERE, "..", "config.yaml")
    server = subprocess.Popen([args.bin, "serve", "-c", config, "--host", "127.0.0.1", "--port", str(port)],
                              env=env, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        rnd = random.Random(7)
        print(f"{args.rules} rules: RSS before {rss_kb(server.pid) / 1024:.1f} MB", flush=True)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for i in range(1, args.requests + 1):
            body = dict(base)
            body["content"] = " ".join(rnd.choice(vocab) for _ in range(rnd.randint(50, 400)))
            body["title"] = " ".join(rnd.choice(vocab) for _ in range(8))
            conn.request("POST", "/decide/textmod", json.dumps(body, ensure_ascii=False).encode(),
                         {"Content-Type": "application/json"})
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                sys.exit(f"request {i}: status {answer.status}")
            if i % max(1, args.requests // 4) == 0:
                print(f"after {i} messages: RSS {rss_kb(server.pid) / 1024:.1f} MB", flush=True)
        conn.close()
        time.sleep(0.5)
        print(f"after the connection closed: RSS {rss_kb(server.pid) / 1024:.1f} MB")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
