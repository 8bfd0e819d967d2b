#!/usr/bin/env python3
"""The hostile-client rows of docs/http.md, measured against pdserve-local.

Starts pdserve-local (every port the kernel's pick, read from its log) on
MODEL and, one row at a time, opens the hostile connections, times the
request a well-behaved client makes meanwhile, and prints a Markdown table:
  1. 40 connections each send a POST's headers with Content-Length: 100000
     and one byte of body, then one more byte every 2 s: GET /v1/models;
     and how long the server takes to cut the tricklers off.
  2. The same 40 half-sent bodies, then silence: GET /v1/models.
  3. 12 connections trickle the headers of GET /metrics to the metrics
     port, a byte every 2 s: GET /metrics.
  4. --max-inflight-per-client 2: 6 concurrent streams from 6 loopback
     addresses, then 6 from one address: how many are refused.
  5. temperature 1.5 with top_p 0, seeds 1-4: distinct texts (greedy: 1).
  6. response_format json_object, min_p 0.5, repetition_penalty 1.3: the
     statuses and the `param` named.
Usage: scripts/bench_http_abuse.py [--build build] [--model models/passkey-4l]
"""
import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time


def start_local(build, model, extra, log_path):
    log = open(log_path, "w")
    proc = subprocess.Popen([f"{build}/local/pdserve-local", "--model", model, "--port", "0",
                             "--http-listen", "127.0.0.1:0", "--metrics-port", "0"] + extra,
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    ports = {}
    deadline = time.monotonic() + 120
    while len(ports) < 2 and time.monotonic() < deadline:
        text = open(log_path, errors="replace").read()
        for key, pat in (("http", r"http on port (\d+)"), ("metrics", r"metrics on port (\d+)")):
            m = re.search(pat, text)
            if m:
                ports[key] = int(m.group(1))
        if proc.poll() is not None:
            sys.exit(f"pdserve-local exited: {text[-2000:]}")
        time.sleep(0.05)
    while time.monotonic() < deadline:
        try:
            if get(ports["http"], "/health", timeout=5)[0] == 200:
                return proc, ports
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("pdserve-local did not become healthy")


def get(port, path, body=None, source="127.0.0.1", timeout=120):
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        if body is None:
            conn.request("GET", path)
        else:
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace"), time.monotonic() - start
    finally:
        conn.close()


class Tricklers:
    """N connections that sent HEAD; a byte of TAIL every PERIOD s after."""

    def __init__(self, port, n, head, tail, period):
        self.socks = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(head)
            self.socks.append(s)
        self.opened = time.monotonic()
        self.closed = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, args=(tail, period), daemon=True)
        self.thread.start()

    def run(self, tail, period):
        i = 0
        while period and not self.stop.wait(period):
            for s in self.socks:
                if s in self.closed:
                    continue
                try:
                    s.send(tail[i:i + 1], socket.MSG_NOSIGNAL)
                except OSError:
                    self.closed[s] = time.monotonic()
            i += 1

    def cut_off_after(self, limit):
        """Seconds until the server closed every connection (None: not within LIMIT)."""
        deadline = self.opened + limit
        for s in self.socks:
            while s not in self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                s.settimeout(min(1.0, left))
                try:
                    if not s.recv(65536):
                        self.closed[s] = time.monotonic()
                except socket.timeout:
                    pass
                except OSError:
                    self.closed[s] = time.monotonic()
        return max(self.closed.values()) - self.opened

    def close(self):
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


def row_trickle(ports, rows):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"
    t = Tricklers(ports["http"], 40, head, b"x" * 1000, 2.0)
    st, _, dt = get(ports["http"], "/v1/models")
    cut = t.cut_off_after(90)
    t.close()
    rows.append(("40 partial POST bodies trickling a byte every 2 s", f"/v1/models {st} in {dt * 1000:.1f} ms; "
                 f"all 40 cut off after {cut:.1f} s" if cut else f"/v1/models {st} in {dt * 1000:.1f} ms; not cut off"))
    t = Tricklers(ports["http"], 40, head, b"", 0)
    st, _, dt = get(ports["http"], "/v1/models")
    t.close()
    rows.append(("40 partial POST bodies, then silence", f"/v1/models {st} in {dt * 1000:.1f} ms"))


def row_metrics(ports, rows):
    t = Tricklers(ports["metrics"], 12, b"G", b"ET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X: " + b"a" * 1000, 2.0)
    st, _, dt = get(ports["metrics"], "/metrics")
    cut = t.cut_off_after(60)
    t.close()
    rows.append(("12 connections trickling GET /metrics headers", f"/metrics {st} in {dt * 1000:.1f} ms; "
                 f"cut off after {cut:.1f} s" if cut else f"/metrics {st} in {dt * 1000:.1f} ms"))


def stream_status(port, source, results, i):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120, source_address=(source, 0))
        conn.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "The passkey is", "max_tokens": 4000, "ignore_eos": True, "stream": True}),
            headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        results[i] = r.status
        if r.status == 200:
            r.read1(65536)
        conn.close()
    except OSError as e:
        results[i] = str(e)


def row_per_client(build, model, work, rows):
    proc, ports = start_local(build, model, ["--max-inflight-per-client", "2", "--max-new-tokens-cap", "4000"],
                              os.path.join(work, "per_client.log"))
    for label, sources in (("6 streams from 6 loopback addresses", [f"127.0.0.{i + 2}" for i in range(6)]),
                           ("6 streams from one address", ["127.0.0.9"] * 6)):
        results = [None] * 6
        threads = [threading.Thread(target=stream_status, args=(ports["http"], s, results, i))
                   for i, s in enumerate(sources)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rows.append((f"--max-inflight-per-client 2: {label}",
                     f"{results.count(200)} served, {results.count(429)} refused with 429"))
    proc.terminate()
    proc.wait()


def row_fields(ports, rows):
    texts = set()
    for seed in range(1, 5):
        st, body, _ = get(ports["http"], "/v1/completions", {"prompt": "The passkey is", "max_tokens": 16,
                                                             "temperature": 1.5, "top_p": 0, "seed": seed})
        texts.add(json.loads(body)["choices"][0]["text"] if st == 200 else f"HTTP {st}")
    rows.append(("temperature 1.5, top_p 0, seeds 1-4", f"{len(texts)} distinct text(s) (greedy)"))
    for field, value in (("response_format", {"type": "json_object"}), ("min_p", 0.5), ("repetition_penalty", 1.3)):
        st, body, _ = get(ports["http"], "/v1/completions", {"prompt": "The passkey is", "max_tokens": 4,
                                                             field: value})
        param = json.loads(body).get("error", {}).get("param") if st != 200 else None
        rows.append((f"`{field}: {json.dumps(value)}`", f"HTTP {st}, param `{param}`"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="models/passkey-4l")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench_http_abuse_")
    proc, ports = start_local(args.build, args.model, [], os.path.join(work, "local.log"))
    rows = []
    try:
        row_trickle(ports, rows)
        row_metrics(ports, rows)
        row_fields(ports, rows)
    finally:
        proc.terminate()
        proc.wait()
    row_per_client(args.build, args.model, work, rows)
    print("| what was sent | what happened |\n|---|---|")
    for what, got in rows:
        print(f"| {what} | {got} |")


if __name__ == "__main__":
    main()
