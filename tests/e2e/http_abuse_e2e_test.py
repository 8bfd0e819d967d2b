#!/usr/bin/env python3
"""Hostile HTTP clients against the OpenAI front and /metrics (docs/http.md).

For pdserve-local and for a router with separate prefill and decode
processes, every server on a port the kernel picked (port 0, read from its
log line):
  1. 64 connections trickling request headers (a byte every 100 ms, never
     finishing), 64 idle keep-alive connections and 64 half-sent bodies are
     opened on the HTTP port and the same on the metrics port. While they
     are held, /v1/models answers within 2 s, a completion within 5 s and
     /metrics (both ports) within 2 s. Then the trickling connections are
     cut off by the server's hard header deadline although they keep
     sending, and the idle ones by the idle timeout.
  2. pdserve-local only: --max-inflight-per-client 2 counts each HTTP peer
     address as its own client (the router's access log names it);
     X-Request-Timeout ends a long request with 504, a stream with an SSE
     timeout event, and the decode worker's KV is freed after both.
Usage: http_abuse_e2e_test.py BUILD_DIR SOURCE_DIR
"""
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

BUILD, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SRC, "models", "passkey-4l")
WORK = tempfile.mkdtemp(prefix="http_abuse_")
PROCS = []


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    for name in sorted(os.listdir(WORK)):
        if name.endswith(".log"):
            with open(os.path.join(WORK, name), errors="replace") as f:
                tail = f.read()[-3000:]
            print(f"--- {name}\n{tail}", file=sys.stderr)
    sys.exit(1)


def ok(msg):
    print(f"ok: {msg}", flush=True)


def spawn(name, args):
    log = open(os.path.join(WORK, f"{name}.log"), "w")
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    PROCS.append(p)
    return p


def log_port(name, proc, pattern, timeout=120):
    """Waits for PATTERN<port> in NAME.log (the process prints it once bound)."""
    path = os.path.join(WORK, f"{name}.log")
    deadline = time.monotonic() + timeout
    rx = re.compile(re.escape(pattern) + r"(\d+)")
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            m = rx.search(f.read())
        if m:
            return int(m.group(1))
        if proc.poll() is not None:
            fail(f"{name} exited ({proc.returncode}) before printing '{pattern}N'")
        time.sleep(0.05)  # polling a log file: no event to wait on
    fail(f"{name}: no '{pattern}N' line within {timeout} s")


def request(port, method, path, body=None, headers=None, source="127.0.0.1", timeout=30):
    """(status, body text, elapsed seconds) over a fresh connection from SOURCE."""
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        hdrs = dict(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body)
            hdrs["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        text = r.read().decode("utf-8", "replace")
        return r.status, text, time.monotonic() - start
    finally:
        conn.close()


def wait_healthy(port, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if request(port, "GET", "/health", timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)  # health polls: the condition itself, re-checked
    fail(f"/health on {port} not 200 within {timeout} s")


class Abusers:
    """N trickling, N idle keep-alive and N half-body connections to a port."""

    def __init__(self, port, n, trickle_path):
        self.trickle, self.idle, self.partial = [], [], []
        self.closed_at = {}
        self.stop = threading.Event()
        pad = "X-Pad: " + "a" * 100000 + "\r\n"
        self.trickle_bytes = f"GET {trickle_path} HTTP/1.1\r\nHost: x\r\n{pad}".encode()
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(self.trickle_bytes[:1])
            self.trickle.append(s)
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:  # read the head of the answer, then stay idle
                chunk = s.recv(65536)
                if not chunk:
                    break
                head += chunk
            self.idle.append(s)
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100000\r\n\r\n{")
            self.partial.append(s)
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self):
        sent = 1
        while not self.stop.wait(0.1):  # the pace of a slow client, not a synchronisation
            for s in self.trickle:
                if s in self.closed_at:
                    continue
                try:
                    s.send(self.trickle_bytes[sent:sent + 1], socket.MSG_NOSIGNAL)
                except OSError:
                    self.closed_at[s] = time.monotonic()
            sent += 1

    def wait_closed(self, socks, timeout):
        """Waits until the server closed every socket in SOCKS (EOF or reset)."""
        deadline = time.monotonic() + timeout
        pending = [s for s in socks]
        while pending and time.monotonic() < deadline:
            still = []
            for s in pending:
                s.settimeout(max(0.01, min(1.0, deadline - time.monotonic())))
                try:
                    while True:
                        data = s.recv(65536)
                        if not data:
                            break  # EOF: closed by the server
                except socket.timeout:
                    still.append(s)
                except OSError:
                    pass  # reset: closed by the server
            pending = still
        return len(pending)

    def close(self):
        self.stop.set()
        self.thread.join()
        for s in self.trickle + self.idle + self.partial:
            s.close()


def abuse_check(label, http_port, metrics_port):
    n = 64
    t0 = time.monotonic()
    on_http = Abusers(http_port, n, "/v1/completions")
    on_metrics = Abusers(metrics_port, n, "/metrics")
    ok(f"{label}: {6 * n} hostile connections open ({time.monotonic() - t0:.1f} s)")
    try:
        st, body, dt = request(http_port, "GET", "/v1/models", timeout=30)
        if st != 200 or dt > 2.0:
            fail(f"{label}: /v1/models under abuse: {st} in {dt:.2f} s (want 200 within 2 s): {body[:200]}")
        ok(f"{label}: /v1/models 200 in {dt:.3f} s")
        st, body, dt = request(http_port, "POST", "/v1/completions",
                               {"prompt": "The passkey is", "max_tokens": 8, "temperature": 0}, timeout=60)
        if st != 200 or dt > 5.0:
            fail(f"{label}: completion under abuse: {st} in {dt:.2f} s (want 200 within 5 s): {body[:200]}")
        ok(f"{label}: completion 200 in {dt:.3f} s")
        for port, where in ((metrics_port, "metrics port"), (http_port, "HTTP port")):
            st, body, dt = request(port, "GET", "/metrics", timeout=30)
            if st != 200 or dt > 2.0 or "pdserve_" not in body:
                fail(f"{label}: /metrics on the {where} under abuse: {st} in {dt:.2f} s")
            ok(f"{label}: /metrics on the {where} 200 in {dt:.3f} s")
        # Hard deadlines: the headers are due 10 s (metrics 5 s) after the
        # connection, however steadily the bytes trickle in; idle keep-alive
        # connections close after 5 s (metrics 2 s).
        for ab, where in ((on_http, "HTTP"), (on_metrics, "metrics")):
            left = ab.wait_closed(ab.trickle, 60)
            if left:
                fail(f"{label}: {left} of {n} trickling connections to the {where} port still open after 60 s")
            left = ab.wait_closed(ab.idle, 30)
            if left:
                fail(f"{label}: {left} of {n} idle keep-alive connections to the {where} port still open")
            ok(f"{label}: the {where} port cut off every trickling and idle connection")
    finally:
        on_http.close()
        on_metrics.close()


def metric(port, name):
    _, body, _ = request(port, "GET", "/metrics")
    total = 0.0
    for line in body.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_metric_zero(port, name, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if metric(port, name) == 0:
            return
        time.sleep(0.05)  # the condition itself, re-checked
    fail(f"{name} still {metric(port, name)} after {timeout} s")


def open_stream(port, source, max_tokens):
    """A streaming completion from SOURCE whose first event has arrived (so it is in flight)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=(source, 0))
    conn.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": "The passkey is", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}),
        headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        fail(f"stream from {source}: {r.status} {r.read()[:200]}")
    if not r.read1(65536).startswith(b"data: "):
        fail(f"stream from {source}: no first event")
    return conn


def per_client_and_deadlines():
    p = spawn("local_pc", [f"{BUILD}/local/pdserve-local", "--model", MODEL, "--port", "0",
                           "--http-listen", "127.0.0.1:0", "--metrics-port", "0", "--max-inflight-per-client", "2",
                           "--max-new-tokens-cap", "16000"])
    http_port = log_port("local_pc", p, "http on port ")
    metrics_port = log_port("local_pc", p, "metrics on port ")
    wait_healthy(http_port)
    # Two streams from 127.0.0.2 are in flight, so its third request is
    # refused; 127.0.0.3 is another client. The streams are long (16,000
    # tokens), and held open while the others are sent.
    streams = [open_stream(http_port, "127.0.0.2", 16000) for _ in range(2)]
    body = {"prompt": "The passkey is", "max_tokens": 4, "temperature": 0}
    st, text, _ = request(http_port, "POST", "/v1/completions", body, source="127.0.0.2")
    if st != 429 or "http:127.0.0.2" not in text:
        fail(f"third request from 127.0.0.2: {st} {text[:300]} (want 429 naming http:127.0.0.2)")
    ok("a third request from one address is refused with 429, naming the client")
    st, text, _ = request(http_port, "POST", "/v1/completions", body, source="127.0.0.3")
    if st != 200:
        fail(f"request from 127.0.0.3 while 127.0.0.2 holds two: {st} {text[:300]}")
    ok("another address is its own client (200)")
    for c in streams:
        c.close()
    with open(os.path.join(WORK, "local_pc.log"), errors="replace") as f:
        if not re.search(r"request \S+ \(cmpl-[0-9a-f]+\) from http:127\.0\.0\.3: OK", f.read()):
            fail("the router's access log does not name the HTTP client http:127.0.0.3")
    ok("the access log names the HTTP client")
    wait_metric_zero(metrics_port, "pdserve_decode_kv_bytes_used")

    long_body = {"prompt": "The passkey is", "max_tokens": 16000, "ignore_eos": True}
    st, text, _ = request(http_port, "POST", "/v1/completions", long_body, headers={"X-Request-Timeout": "0.3"})
    if st != 504 or '"timeout"' not in text:
        fail(f"X-Request-Timeout 0.3 on 16,000 tokens: {st} {text[:300]} (want 504 timeout)")
    ok("X-Request-Timeout: 0.3 ends a long request with 504")
    st, text, _ = request(http_port, "POST", "/v1/completions", dict(long_body, stream=True),
                          headers={"X-Request-Timeout": "0.3"})
    if st != 200 or '"error"' not in text or '"timeout"' not in text or not text.rstrip().endswith("data: [DONE]"):
        fail(f"stream past its deadline: {st} {text[-400:]} (want an SSE timeout error event, then [DONE])")
    ok("a stream past its deadline ends with an SSE timeout event")
    st, text, _ = request(http_port, "POST", "/v1/completions", long_body, headers={"X-Request-Timeout": "soon"})
    if st != 400 or "X-Request-Timeout" not in text:
        fail(f"X-Request-Timeout: soon: {st} {text[:300]} (want 400 naming the header)")
    ok("a bad X-Request-Timeout is a 400 naming it")
    wait_metric_zero(metrics_port, "pdserve_decode_kv_bytes_used")
    ok("the decode worker's KV is back to 0 after the timeouts")
    p.terminate()
    p.wait(timeout=30)


def local_stack():
    p = spawn("local", [f"{BUILD}/local/pdserve-local", "--model", MODEL, "--port", "0",
                        "--http-listen", "127.0.0.1:0", "--metrics-port", "0"])
    http_port = log_port("local", p, "http on port ")
    metrics_port = log_port("local", p, "metrics on port ")
    wait_healthy(http_port)
    abuse_check("pdserve-local", http_port, metrics_port)
    p.terminate()
    p.wait(timeout=30)


def router_stack():
    common = ["--model", MODEL, "--listen", "127.0.0.1:0", "--threads", "1", "--metrics-port", "-1"]
    d = spawn("decode", [f"{BUILD}/decode_service/pdserve-decode"] + common)
    pf = spawn("prefill", [f"{BUILD}/prefill_service/pdserve-prefill"] + common)
    dport = log_port("decode", d, "serving on port ")
    pport = log_port("prefill", pf, "serving on port ")
    r = spawn("router", [f"{BUILD}/router/pdserve-router", "--model", MODEL, "--listen", "127.0.0.1:0",
                         "--prefill", f"127.0.0.1:{pport}", "--decode", f"127.0.0.1:{dport}",
                         "--http-listen", "127.0.0.1:0", "--metrics-port", "0"])
    http_port = log_port("router", r, "http on port ")
    metrics_port = log_port("router", r, "metrics on port ")
    wait_healthy(http_port)
    abuse_check("router", http_port, metrics_port)
    for p in (r, pf, d):
        p.terminate()
        p.wait(timeout=30)


def main():
    try:
        local_stack()
        router_stack()
        per_client_and_deadlines()
        print("http_abuse_e2e_test: all checks passed")
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
