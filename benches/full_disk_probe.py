#!/usr/bin/env python3
"""A full disk under the snapshot writer (issue 23): snapshots go to a 1 MB tmpfs while two
connections send 2,000-decision batches for 10 s. Prints how many files the folder holds each
second, /health and the snapshot metrics with the disk full, the server's resident memory
before, at its peak and 2 s after; then unmounts and deletes the folder while the server runs,
sends a few batches, and prints whether the folder was made again and /health.

    sudo python3 benches/full_disk_probe.py target/release/clef

Needs root (mount -t tmpfs). Stdlib only; talks only to 127.0.0.1."""
import json, os, socket, subprocess, sys, tempfile, threading, time, shutil
binary = sys.argv[1]
d = tempfile.mkdtemp(); snaps = f"{d}/snaps"; os.makedirs(snaps); os.makedirs(f"{d}/tables")
subprocess.check_call(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", snaps])
try:
    open(f"{d}/tables/risk.json", "w").write(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tables", "risk.json")).read())
    def free():
        s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
    port, admin = free(), free()
    open(f"{d}/config.yaml", "w").write(
        f"server: {{host: 127.0.0.1, port: {port}, max_body_bytes: 4194304}}\nadmin: {{listen: '127.0.0.1:{admin}'}}\n"
        f"model: {{default_table: risk, watch_file: false}}\nsnapshots: {{enabled: true, dir: snaps, sample_rate: 1.0}}\n")
    proc = subprocess.Popen([binary, "serve", "-c", f"{d}/config.yaml"], stderr=open(f"{d}/log", "w"))
    def rss():
        for l in open(f"/proc/{proc.pid}/status"):
            if l.startswith("VmRSS:"): return int(l.split()[1])
    def http(method, path, body=b"", s=None):
        own = s is None
        if own: s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        buf = b""
        while b"\r\n\r\n" not in buf: buf += s.recv(1 << 20)
        head, rest = buf.split(b"\r\n\r\n", 1)
        cl = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
        while len(rest) < cl: rest += s.recv(1 << 20)
        if own: s.close()
        return int(head.split(b" ")[1]), rest[:cl]
    for _ in range(200):
        try: http("GET", "/health"); break
        except OSError: time.sleep(0.02)
    time.sleep(0.3); before = rss(); peak = [before]; stop = [False]
    def sampler():
        while not stop[0]: peak[0] = max(peak[0], rss()); time.sleep(0.02)
    threading.Thread(target=sampler, daemon=True).start()
    lines = "".join(json.dumps({"user_tier": "gold", "order_amount_usd": i, "country_code": "US", "note": os.urandom(64).hex()}) + "\n" for i in range(2000)).encode()
    sent = [0]
    def load():
        s = socket.create_connection(("127.0.0.1", port))
        while not stop[0]:
            st, _ = http("POST", "/decide/risk/batch", lines, s); assert st == 200; sent[0] += 2000
    ts = [threading.Thread(target=load, daemon=True) for _ in range(2)]
    t0 = time.time(); [t.start() for t in ts]
    files_at = {}
    while time.time() - t0 < 10:
        time.sleep(1); files_at[round(time.time() - t0)] = len(os.listdir(snaps))
    stop[0] = True; [t.join() for t in ts]
    health = json.loads(http("GET", "/health")[1])
    metrics = [l for l in http("GET", "/metrics")[1].decode().splitlines() if l.startswith("clef_snapshots_") and not l.startswith("#")]
    time.sleep(2); after = rss()
    out = {"binary": binary, "decisions": sent[0], "files_in_folder_by_second": files_at, "health_under_full_disk": health,
           "metrics": metrics, "rss_kib": {"before": before, "peak": peak[0], "after_2s": after}}
    # the folder deleted while serving (the tmpfs unmounted, then the folder removed)
    subprocess.call(["umount", "-l", snaps]); shutil.rmtree(snaps, ignore_errors=True)
    for i in range(5):
        http("POST", "/decide/risk/batch", lines[:2000])
        time.sleep(1)
    out["after_folder_deleted"] = {"folder_exists": os.path.isdir(snaps), "files": os.listdir(snaps) if os.path.isdir(snaps) else None,
        "health": json.loads(http("GET", "/health")[1])}
    proc.terminate(); proc.wait()
    print(json.dumps(out, indent=1))
finally:
    subprocess.call(["umount", snaps], stderr=subprocess.DEVNULL)
