#!/usr/bin/python3
"""The chaos suite: the serving stack under load and faults, from outside.

Starts 1 router, 2 prefill and 2 decode workers as separate processes on
loopback (a random-weight model written by pdserve-init-model from --config),
sends N requests from --concurrency client threads (greedy and sampled, some
with deadlines that expire, some cancelled mid-stream), and meanwhile, on a
schedule: kill -9 and restart (same port) decode worker D1 and prefill worker
P1; SIGSTOP/SIGCONT stalls of workers; and the compound fault "SIGSTOP a
prefill worker, kill -9 + restart decode worker D1, SIGCONT the prefill"
(just after a burst of 8 extra probe requests, so that some are in the window).
Every server first listens on a port the kernel picks (port 0), read back from
its "serving on port N" line; a restarted worker listens on its port again.
The prefill workers run with PDSERVE_FAULT_HANDOFF (common/handoff/
fault_injection.h), which drops, corrupts, duplicates, reorders, truncates or
delays about --handoff-fault-rate of the KV hand-offs.

Asserts (any violation: exit 1):
  - every request ends within its deadline + 2 s (no deadline: --hang-s),
    with a documented status code (OK, CANCELLED, DEADLINE_EXCEEDED,
    UNAVAILABLE, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, INVALID_ARGUMENT;
    NOT_FOUND, UNKNOWN, INTERNAL, ... are failures);
  - every OK answer equals pdserve-generate's tokens for the same prompt and
    sampling settings (greedy, and sampled with a seed: the sampler is
    counter-based), and ends with a finish reason;
  - the tokens streamed before an error are a prefix of that answer;
  - after drain every worker reports 0 KV bytes used/allocated, 0 queued and
    0 active (PrefillWorker/GetLoad, DecodeWorker/GetLoad);
  - the VmRSS of the processes never restarted (router, P0, D0) grows less
    than --rss-limit between the end of the warm-up phase and the end;
  - CANCELLED only where the client cancelled (server-side failures must not
    tell the client it cancelled);
  - no process dies except those the test killed, and each exits 0 on SIGTERM;
  - the run tested something: at least --min-ok-fraction of the requests (and
    of the chaos phase's) are OK, every server fault of the schedule was
    injected at least --min-fault-cycles times (on a slow machine the chaos
    phase goes on with probes, up to --fault-wait-s, until it is), and the
    prefill workers logged at least --min-handoff-faults hand-off faults
    (default: a quarter of the rate times the requests);
  - the VmRSS of those processes can be read (/proc/PID/status) at both ends.
Prints a one-line summary ("chaos ...: PASS|FAIL"), preceded by the details of
each violation.

  chaos.py --build BUILD_DIR [--config configs/tiny.json] [--n 300] [--seed 1]
  tests/chaos/chaos.sh --n 5000            # the same, build dir defaults to ./build
Exit codes: 0 pass, 1 a violation, 2 bad arguments or a setup failure.
"""

import argparse
import collections
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import stubs  # noqa: E402

DOCUMENTED = ("OK", "CANCELLED", "DEADLINE_EXCEEDED", "UNAVAILABLE", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
              "INVALID_ARGUMENT")
PROG = "chaos.py"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def die(msg, code=2):
    print(f"{PROG}: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


SERVING_RE = re.compile(rb"serving on port ([0-9]+)")
BIND_FAILED = b"cannot listen on"  # common/net/server.cc: StartServer


class Proc:
    """One server process on 127.0.0.1. The first start listens on port 0
    and reads the port the kernel picked from the "serving on port N" line;
    restarts listen on that same port (a restart at the same address is the
    fault under test: the router knows the workers by address)."""

    def __init__(self, name, argv, log_path, env=None):
        self.name, self.argv, self.log_path = name, argv, log_path  # argv without --listen
        self.env_fn = env  # callable(start_number) -> extra env, or None
        self.p = None
        self.port = None  # known after the first start
        self.starts = 0
        self.killed = 0
        self.stopped = False
        self.deaths = []  # unexpected exits: (rc, when)

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def start(self, timeout=120):
        # A restart's port is free again once the killed process is reaped,
        # and the kernel hands it to a port-0 bind only while nothing holds it:
        # a bind that still fails (someone's connection got it meanwhile) is
        # retried for a few seconds before it counts as a failure.
        bind_deadline = time.monotonic() + 5.0
        while True:
            if self._start_once(timeout):
                return
            if self.port is None or time.monotonic() > bind_deadline:
                raise RuntimeError(f"{self.name} could not bind 127.0.0.1:{self.port or 0}; see {self.log_path}")
            time.sleep(0.2)

    def _start_once(self, timeout):
        """True once serving; False when the bind failed; raises otherwise."""
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1")
        if self.env_fn:
            env.update(self.env_fn(self.starts))
        argv = [*self.argv, "--listen", f"127.0.0.1:{self.port or 0}"]
        with open(self.log_path, "ab") as f:
            f.write(f"=== chaos: start #{self.starts + 1} at {time.strftime('%H:%M:%S')}\n".encode())
            offset = f.tell()
            self.p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        self.starts += 1
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                out = f.read()
            m = SERVING_RE.search(out)
            if m:
                port = int(m.group(1))
                if self.port is not None and port != self.port:
                    raise RuntimeError(f"{self.name} restarted on port {port}, not {self.port}; see {self.log_path}")
                self.port = port
                return True
            if self.p.poll() is not None:
                if BIND_FAILED in out:
                    return False
                raise RuntimeError(f"{self.name} exited {self.p.returncode} while starting; see {self.log_path}")
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not start in {timeout} s; see {self.log_path}")

    def kill9(self):
        self.cont()
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()
        self.killed += 1

    def stop(self):
        self.p.send_signal(signal.SIGSTOP)
        self.stopped = True

    def cont(self):
        if self.p is not None and self.p.poll() is None:
            self.p.send_signal(signal.SIGCONT)
        self.stopped = False

    def check_alive(self):
        """Records an exit the test did not cause. True when running."""
        if self.p is None:
            return False
        rc = self.p.poll()
        if rc is None:
            return True
        if not any(d[1] is self.p for d in self.deaths):
            self.deaths.append((rc, self.p))
        return False

    def rss_kb(self):
        """VmRSS in kB; raises OSError when /proc/PID/status cannot be read or has none."""
        path = f"/proc/{self.p.pid}/status"
        with open(path) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise OSError(f"no VmRSS line in {path}")


class Job:
    __slots__ = ("i", "prompt", "mode", "max_new", "deadline", "cancel_tokens", "cancel_s", "phase", "at")


class Result:
    __slots__ = ("job", "code", "details", "tokens", "finish", "elapsed", "hung", "client_cancelled")


def make_jobs(rng, n, n_prompts, n_sampling, max_new, first_index, phase):
    jobs = []
    for k in range(n):
        j = Job()
        j.i, j.phase, j.at = first_index + k, phase, 0.0
        j.prompt = rng.randrange(n_prompts)
        j.mode = 0 if rng.random() < 0.6 else 1 + rng.randrange(n_sampling)  # 0 = greedy
        j.max_new = rng.randint(max(1, max_new // 6), max_new)
        r = rng.random()
        j.deadline = None if r < 0.6 else (rng.uniform(15, 30) if r < 0.85 else rng.uniform(0.03, 0.5))
        r = rng.random()
        j.cancel_tokens = rng.randint(1, 3) if r < 0.10 else None
        j.cancel_s = rng.uniform(0.02, 0.4) if 0.10 <= r < 0.15 else None
        jobs.append(j)
    return jobs


class Load:
    """Client threads running jobs against the router, plus a watchdog."""

    def __init__(self, s, router_addr, prompts, sampling, hang_s, run_id):
        self.s, self.prompts, self.sampling, self.hang_s, self.run_id = s, prompts, sampling, hang_s, run_id
        self.channel = s.grpc.insecure_channel(router_addr)
        self.stub = s.pb2_grpc.GeneratorStub(self.channel)
        self.results = []
        self.mu = threading.Lock()
        self.inflight = {}  # id -> (call, start, bound, flag list)
        self.probe_threads = []

    def run(self, jobs, concurrency):
        it = iter(jobs)
        t_start = time.monotonic()
        stop = threading.Event()
        wd = threading.Thread(target=self._watchdog, args=(stop,), daemon=True)
        wd.start()

        def worker():
            while True:
                with self.mu:
                    j = next(it, None)
                if j is None:
                    return
                wait = t_start + j.at - time.monotonic()  # paced arrivals (job.at)
                if wait > 0:
                    time.sleep(wait)
                r = self._one(j)
                with self.mu:
                    self.results.append(r)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        wd.join()

    def probe(self, jobs):
        """Runs jobs now, each on its own thread, besides the client threads."""
        def one(j):
            r = self._one(j)
            with self.mu:
                self.results.append(r)
        for j in jobs:
            t = threading.Thread(target=one, args=(j,), daemon=True)
            t.start()
            self.probe_threads.append(t)

    def join_probes(self):
        stop = threading.Event()
        wd = threading.Thread(target=self._watchdog, args=(stop,), daemon=True)
        wd.start()
        for t in self.probe_threads:
            t.join()
        stop.set()
        wd.join()

    def _watchdog(self, stop):
        while not stop.wait(0.25):
            now = time.monotonic()
            with self.mu:
                items = list(self.inflight.items())
            for _, (call, start, bound, hung) in items:
                if now - start > bound and not hung:
                    hung.append(True)
                    call.cancel()

    def _one(self, j):
        pb2, grpc = self.s.pb2, self.s.grpc
        temp, top_p, top_k, seed = (0.0, 0.0, 0, 0) if j.mode == 0 else self.sampling[j.mode - 1]
        req = pb2.GenerateRequest(
            request_id=f"chaos-{self.run_id}-{j.i}",
            sampling=pb2.SamplingParams(max_new_tokens=j.max_new, temperature=temp, top_p=top_p, top_k=top_k,
                                        seed=seed))
        req.token_ids.extend(self.prompts[j.prompt])
        r = Result()
        r.job, r.code, r.details, r.tokens, r.finish, r.hung, r.client_cancelled = j, "OK", "", [], 0, False, False
        bound = (j.deadline + 2.0) if j.deadline is not None else self.hang_s
        hung = []
        start = time.monotonic()
        call = self.stub.Generate(req, timeout=j.deadline)
        with self.mu:
            self.inflight[j.i] = (call, start, bound, hung)
        timer = None
        cancelled = []
        if j.cancel_s is not None:
            def cancel():
                cancelled.append(True)
                call.cancel()
            timer = threading.Timer(j.cancel_s, cancel)
            timer.start()
        try:
            for resp in call:
                r.tokens.extend(resp.token_ids)
                if resp.finish_reason:
                    r.finish = resp.finish_reason
                if j.cancel_tokens is not None and len(r.tokens) >= j.cancel_tokens and not cancelled:
                    cancelled.append(True)
                    call.cancel()
        except grpc.RpcError as e:
            r.code, r.details = e.code().name, e.details() or ""
        finally:
            if timer is not None:
                timer.cancel()
            with self.mu:
                self.inflight.pop(j.i, None)
        r.elapsed = time.monotonic() - start
        r.hung = bool(hung) or r.elapsed > bound
        r.client_cancelled = bool(cancelled) and not hung
        return r


def run_generate(build, model, prompts, max_new, sampling, work, tag, engine_args):
    path = os.path.join(work, f"prompts-{tag}.jsonl")
    with open(path, "w") as f:
        for i, p in enumerate(prompts):
            f.write(json.dumps({"id": i, "token_ids": p}) + "\n")
    cmd = [os.path.join(build, "clients", "pdserve-generate"), "--model", model, "--prompts-jsonl", path,
           "--max-new-tokens", str(max_new), "--threads", "1", *engine_args]
    if sampling is not None:
        t, p, k, s = sampling
        cmd += ["--temperature", str(t), "--top-p", str(p), "--top-k", str(k), "--seed", str(s)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    if r.returncode != 0:
        die(f"pdserve-generate failed ({' '.join(cmd)}): {r.stderr.strip()[-2000:]}")
    out = [None] * len(prompts)
    for line in r.stdout.splitlines():
        if line.strip():
            d = json.loads(line)
            out[d["id"]] = d["token_ids"]
    if any(o is None for o in out):
        die(f"pdserve-generate answered {sum(o is not None for o in out)} of {len(prompts)} prompts")
    return out


class Faults:
    """The server fault schedule, on its own thread, until stop is set."""

    def __init__(self, procs, gap_s, stall_s, rng, probe=None):
        self.procs, self.gap_s, self.stall_s, self.rng = procs, gap_s, stall_s, rng
        self.probe = probe  # probe(k): k extra requests at once, so that the compound fault's window has some
        self.counts = collections.Counter()  # faults actually injected, by name
        self.skipped = collections.Counter()  # scheduled but not injected (the process was not running)
        self.errors = []
        self.stop_evt = threading.Event()
        self.cycles = 0  # whole cycles of the schedule run
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()

    def finish(self):
        self.stop_evt.set()
        if self.thread.is_alive() or self.thread.ident is not None:
            self.thread.join()
        for p in self.procs.values():
            p.cont()

    def _sleep(self, s):
        return self.stop_evt.wait(s)

    def _check(self):
        for p in self.procs.values():
            p.check_alive()

    KINDS = ("kill_restart_decode", "stall_prefill", "compound_stallP_restartD_resume", "kill_restart_prefill",
             "stall_decode", "compound_stallP0P1_restartD_resume", "stall_prefill_long")

    def _run(self):
        P0, P1, D0, D1 = (self.procs[k] for k in ("P0", "P1", "D0", "D1"))
        cycle = [
            ("kill_restart_decode", lambda: self._kill_restart(D1)),
            ("stall_prefill", lambda: self._stall(P0, self.stall_s)),
            ("compound_stallP_restartD_resume", lambda: self._compound([P0], D1)),
            ("kill_restart_prefill", lambda: self._kill_restart(P1)),
            ("stall_decode", lambda: self._stall(D0, self.stall_s)),
            ("compound_stallP0P1_restartD_resume", lambda: self._compound([P0, P1], D1)),
            ("stall_prefill_long", lambda: self._stall(P1, 2.5 * self.stall_s)),
        ]
        try:
            while not self.stop_evt.is_set():
                for name, action in cycle:
                    if self._sleep(self.gap_s * self.rng.uniform(0.7, 1.3)):
                        return
                    self._check()
                    log(f"fault: {name}")
                    if action():
                        self.counts[name] += 1
                    else:
                        self.skipped[name] += 1
                        log(f"fault {name} not injected: its process is not running")
                    self._check()
                self.cycles += 1
        except Exception as e:  # a worker that can't restart: a violation, reported at the end
            self.errors.append(f"{type(e).__name__}: {e}")
            log(f"fault schedule stopped: {e}")

    def _kill_restart(self, p):
        if not p.check_alive():
            return False
        p.kill9()
        time.sleep(0.1)
        p.start()
        return True

    def _stall(self, p, secs):
        if not p.check_alive():
            return False
        p.stop()
        try:
            time.sleep(secs)
        finally:
            p.cont()
        return True

    def _compound(self, prefills, decode):
        """Defect 1's window: the decode worker restarts while prefills bound for it are stalled.
        With every prefill worker stalled, every request admitted meanwhile is in the window."""
        if not all(p.check_alive() for p in prefills) or not decode.check_alive():
            return False
        if self.probe is not None:
            self.probe(8)  # a burst: some are inside a prefill worker (queued or running) when it stops
            time.sleep(0.005)
        for p in prefills:
            p.stop()
        try:
            time.sleep(1.0)  # requests admitted on `decode` wait for a stalled prefill
            decode.kill9()
            time.sleep(0.1)
            decode.start()
            time.sleep(0.3)
        finally:
            for p in prefills:
                p.cont()
        return True


def get_loads(s, procs):
    out = {}
    for name, p in procs.items():
        if name == "router":
            continue
        addr = p.addr
        try:
            with s.grpc.insecure_channel(addr) as ch:
                if name.startswith("D"):
                    stub = s.worker_pb2_grpc.DecodeWorkerStub(ch)
                else:
                    stub = s.worker_pb2_grpc.PrefillWorkerStub(ch)
                out[name] = stub.GetLoad(s.worker_pb2.GetLoadRequest(), timeout=3)
        except s.grpc.RpcError as e:
            out[name] = f"{e.code().name}: {e.details()}"
    return out


def load_held(resp):
    if isinstance(resp, str):
        return {"error": resp}
    held = {}
    for f in ("kv_bytes_used", "kv_bytes_allocated", "queued_requests", "active_sequences"):
        v = getattr(resp, f, 0)
        if v:
            held[f] = v
    return held


def main():
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--build", default=os.path.join(SRC, "build"), help="CMake build directory (default: ./build)")
    ap.add_argument("--config", default=os.path.join(SRC, "configs", "tiny.json"), help="model config for pdserve-init-model")
    ap.add_argument("--n", type=int, default=300, help="requests (default 300)")
    ap.add_argument("--engine-args", default="", help="more engine flags for pdserve-generate and every worker, "
                    "e.g. '--weights-dtype bf16 --bf16-matmul dot'")
    ap.add_argument("--concurrency", type=int, default=16, help="client threads (default 16)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the request mix, the model and the fault schedule")
    ap.add_argument("--prompts", type=int, default=24, help="distinct prompts (default 24)")
    ap.add_argument("--max-new-tokens", type=int, default=24, help="largest max_new_tokens of a request")
    ap.add_argument("--warmup", type=int, default=0, help="warm-up requests (no server faults) before the RSS baseline "
                    "(default: n/5, between 32 and 200)")
    ap.add_argument("--handoff-fault-rate", type=float, default=0.1, help="PDSERVE_FAULT_HANDOFF rate on prefill workers")
    ap.add_argument("--handoff-fault-kinds", default="", help="'+'-separated subset of drop, corrupt, duplicate, "
                    "reorder, truncate, delay (default: all)")
    ap.add_argument("--no-server-faults", action="store_true", help="hand-off faults only")
    ap.add_argument("--handoff-timeout-s", type=int, default=3, help="decode workers' --handoff-timeout-s")
    ap.add_argument("--duration-s", type=float, default=0, help="seconds over which the requests after "
                    "warm-up arrive (default: max(36, their number / 8))")
    ap.add_argument("--fault-gap-s", type=float, default=1.5, help="mean seconds between server faults")
    ap.add_argument("--stall-s", type=float, default=1.0, help="SIGSTOP duration of a stall")
    ap.add_argument("--hang-s", type=float, default=90.0, help="bound for a request without a deadline")
    ap.add_argument("--rss-limit", type=float, default=0.10, help="largest RSS growth after warm-up (fraction)")
    ap.add_argument("--drain-s", type=float, default=0, help="seconds for the workers to drain (default: "
                    "handoff timeout + 10)")
    ap.add_argument("--no-faults", action="store_true", help="no server faults and no hand-off faults (a baseline)")
    ap.add_argument("--min-ok-fraction", type=float, default=0.5, help="least fraction of OK answers, of all "
                    "requests and of the chaos phase's (default 0.5; about 0.9 is usual)")
    ap.add_argument("--min-fault-cycles", type=int, default=1, help="least number of times each server fault of "
                    "the schedule is injected (default 1: one whole cycle; 0 turns the check off)")
    ap.add_argument("--fault-wait-s", type=float, default=120, help="seconds the chaos phase goes on (with a "
                    "light load of probes) after its requests, while a fault is short of --min-fault-cycles "
                    "(default 120)")
    ap.add_argument("--min-handoff-faults", type=int, default=-1, help="least number of hand-off faults injected "
                    "(default: a quarter of --handoff-fault-rate x the requests, at least 1)")
    ap.add_argument("--work-dir", default=None, help="keep the model and logs here (default: a temporary "
                    "directory, removed unless the run fails)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    if args.n < 1 or args.concurrency < 1 or args.max_new_tokens < 1 or args.prompts < 1:
        die("--n, --concurrency, --max-new-tokens and --prompts must be >= 1")
    if not 0 <= args.min_ok_fraction <= 1 or args.min_fault_cycles < 0:
        die("--min-ok-fraction must be in [0, 1] and --min-fault-cycles >= 0")
    build = os.path.abspath(args.build)
    for b in ("router/pdserve-router", "prefill_service/pdserve-prefill", "decode_service/pdserve-decode",
              "clients/pdserve-generate", "clients/pdserve-init-model"):
        if not os.access(os.path.join(build, b), os.X_OK):
            die(f"{os.path.join(build, b)} is missing; build first or pass --build")
    try:
        stubs.reexec_under_debian_python(os.path.abspath(__file__))
    except stubs.StubError as e:
        die(str(e))

    work = args.work_dir or tempfile.mkdtemp(prefix="pdserve-chaos-")
    os.makedirs(work, exist_ok=True)
    try:
        s = stubs.load_stubs(os.path.join(SRC, "proto"), os.path.join(work, "stubs"))
    except stubs.StubError as e:
        die(str(e))

    t_begin = time.monotonic()
    rng = random.Random(args.seed)
    model = os.path.join(work, "model")
    r = subprocess.run([os.path.join(build, "clients", "pdserve-init-model"), "--config", args.config, "--seed",
                        str(args.seed), "--out", model], capture_output=True, text=True)
    if r.returncode != 0:
        die(f"pdserve-init-model failed: {r.stderr.strip()}")
    model_name = os.path.splitext(os.path.basename(args.config))[0]

    # Prompts and their right answers.
    prompts = [[rng.randint(32, 126) for _ in range(rng.randint(3, 40))] for _ in range(args.prompts)]
    sampling = [(0.8, 0.95, 50, 11), (1.0, 0.0, 0, 23)]
    engine_args = args.engine_args.split()
    expected = [run_generate(build, model, prompts, args.max_new_tokens, None, work, "greedy", engine_args)]
    for k, sp in enumerate(sampling):
        expected.append(run_generate(build, model, prompts, args.max_new_tokens, sp, work, f"sampled{k}",
                                     engine_args))
    log(f"expected outputs from pdserve-generate: {len(prompts)} prompts x {1 + len(sampling)} settings")

    # The stack: every server on a port the kernel picks (Proc), the workers first.
    procs = {}
    common = ["--model", model, "--threads", "1", "--metrics-port", "0", *engine_args]
    for name in ("D0", "D1"):
        procs[name] = Proc(name, [os.path.join(build, "decode_service", "pdserve-decode"),
                                  "--handoff-timeout-s", str(args.handoff_timeout_s), *common],
                           os.path.join(work, f"{name}.log"))
    for idx, name in enumerate(("P0", "P1")):
        env = None
        if not args.no_faults and args.handoff_fault_rate > 0:
            env = (lambda idx: lambda starts: {
                "PDSERVE_FAULT_HANDOFF": f"rate={args.handoff_fault_rate},seed={args.seed * 1000 + idx * 100 + starts}"
                + (f",kinds={args.handoff_fault_kinds}" if args.handoff_fault_kinds else "")})(idx)
        procs[name] = Proc(name, [os.path.join(build, "prefill_service", "pdserve-prefill"), *common],
                           os.path.join(work, f"{name}.log"), env)
    failed_setup = None
    summary_ok = False
    addr = {}
    try:
        for name in ("D0", "D1", "P0", "P1"):
            procs[name].start()
            addr[name] = procs[name].addr
        procs["router"] = Proc("router", [os.path.join(build, "router", "pdserve-router"), "--model", model,
                                          "--prefill", f"{addr['P0']},{addr['P1']}", "--decode",
                                          f"{addr['D0']},{addr['D1']}", "--poll-interval-ms", "100",
                                          "--max-attempts", "3", "--metrics-port", "0", "--http-listen",
                                          "127.0.0.1:0"], os.path.join(work, "router.log"))
        procs["router"].start()
        addr["router"] = procs["router"].addr
        log(f"stack up in {work}: router {addr['router']}, prefill {addr['P0']},{addr['P1']}, "
            f"decode {addr['D0']},{addr['D1']}")
        summary_ok = run_chaos(args, s, procs, addr, prompts, sampling, expected, rng, model_name, work, t_begin)
    except RuntimeError as e:
        failed_setup = str(e)
    finally:
        for p in procs.values():
            if p.p is not None and p.p.poll() is None:
                p.cont()
                p.p.kill()
                p.p.wait()
    if failed_setup:
        dump_logs(work, procs)
        die(failed_setup)
    if summary_ok and not args.keep and args.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    elif not summary_ok:
        print(f"logs kept in {work}", file=sys.stderr)
    return 0 if summary_ok else 1


def dump_logs(work, procs, lines=40):
    for p in procs.values():
        try:
            with open(p.log_path, errors="replace") as f:
                tail = f.readlines()[-lines:]
            print(f"--- {p.name} ({p.log_path}), last {len(tail)} lines", file=sys.stderr)
            sys.stderr.write("".join(tail))
        except OSError:
            pass


def run_chaos(args, s, procs, addr, prompts, sampling, expected, rng, model_name, work, t_begin):
    violations = collections.defaultdict(list)
    run_id = f"{os.getpid()}-{args.seed}"
    load = Load(s, addr["router"], prompts, sampling, args.hang_s, run_id)
    warm_n = args.warmup or min(200, max(32, args.n // 5))
    warm_n = min(warm_n, args.n)
    warm_jobs = make_jobs(rng, warm_n, len(prompts), len(sampling), args.max_new_tokens, 0, "warmup")
    jobs = make_jobs(rng, args.n - warm_n, len(prompts), len(sampling), args.max_new_tokens, warm_n, "chaos")
    # The chaos phase's arrivals are spread over its duration, so that the
    # fault schedule runs under load from start to end.
    duration = args.duration_s or max(36.0, len(jobs) / 8.0)
    if not args.no_faults:
        for k, j in enumerate(jobs):
            j.at = duration * k / max(1, len(jobs))

    # Phase 1: warm-up, no faults; then the RSS baseline of the processes never restarted.
    t0 = time.monotonic()
    load.run(warm_jobs, args.concurrency)
    time.sleep(0.5)
    steady = ("router", "P0", "D0")

    def read_rss(when):  # {name: kB or None}; an unreadable /proc is a violation, not a skipped check
        out = {}
        for k in steady:
            try:
                out[k] = procs[k].rss_kb()
            except (OSError, ValueError) as e:
                out[k] = None
                violations["rss"].append(f"{k}: cannot read its VmRSS {when} (pid {procs[k].p.pid}): {e}")
        return out

    rss_warm = read_rss("after warm-up")
    log(f"warm-up: {warm_n} requests in {time.monotonic() - t0:.1f} s; RSS (kB) {rss_warm}")

    # Phase 2: load with faults.
    probe_rng = random.Random(args.seed + 2)
    probes = []

    def probe(k):  # greedy, no deadline, no cancel: requests that should simply succeed
        new = make_jobs(probe_rng, k, len(prompts), len(sampling), args.max_new_tokens, args.n + len(probes), "probe")
        for j in new:
            j.mode, j.deadline, j.cancel_tokens, j.cancel_s = 0, None, None, None
        probes.extend(new)
        load.probe(new)

    faults = Faults(procs, args.fault_gap_s, args.stall_s, random.Random(args.seed + 1), probe)
    t1 = time.monotonic()
    if not args.no_faults and not args.no_server_faults:
        faults.start()
    load.run(jobs, args.concurrency)
    # A slow machine may end the load before the schedule has injected every
    # fault --min-fault-cycles times: it goes on, under a light load of probes
    # (2 every 0.5 s), until it has or --fault-wait-s have passed.
    server_faults = not args.no_faults and not args.no_server_faults
    extra_end = time.monotonic() + args.fault_wait_s
    extended = False
    while (server_faults and faults.thread.is_alive() and time.monotonic() < extra_end and
           any(faults.counts[k] < args.min_fault_cycles for k in Faults.KINDS)):
        if not extended:
            log(f"the load ended before every fault was injected {args.min_fault_cycles} time(s) "
                f"({dict(faults.counts)}): probes go on for up to {args.fault_wait_s:.0f} s")
            extended = True
        probe(2)
        time.sleep(0.5)
    faults.finish()
    load.join_probes()
    load_s = time.monotonic() - t1
    log(f"chaos phase: {len(jobs)} requests + {len(probes)} probes in {load_s:.1f} s; faults {dict(faults.counts)}")
    for e in faults.errors:
        violations["fault_schedule"].append(e)
    # Every fault of the schedule injected --min-fault-cycles times (a run that
    # injected none tested nothing).
    if not args.no_faults and not args.no_server_faults and args.min_fault_cycles > 0:
        short = {k: faults.counts[k] for k in Faults.KINDS if faults.counts[k] < args.min_fault_cycles}
        if short:
            violations["too_few_faults"].append(
                f"server faults injected: {dict(faults.counts) or 'none'} "
                f"(not injected: {dict(faults.skipped) or 'none'}); "
                f"want each of the {len(Faults.KINDS)} kinds at least {args.min_fault_cycles} time(s), short: {short} "
                f"(the chaos phase ended after {load_s:.1f} s, up to --fault-wait-s {args.fault_wait_s:.0f} s after "
                "its load; a larger --n, --duration-s or --fault-wait-s, or a smaller --fault-gap-s, gives the "
                "schedule more time)")

    # Drain: every worker back to zero.
    drain_s = args.drain_s or args.handoff_timeout_s + 10
    end = time.monotonic() + drain_s
    while True:
        loads = get_loads(s, procs)
        held = {k: load_held(v) for k, v in loads.items()}
        if not any(held.values()) or time.monotonic() > end:
            break
        time.sleep(0.25)
    for k, h in sorted(held.items()):
        if h:
            violations["kv_held"].append(f"{k} ({addr[k]}) after {drain_s:.0f} s of drain: {h}")
    time.sleep(0.5)
    rss_end = read_rss("at the end")
    rss_growth = {}
    for k in steady:
        if rss_warm[k] is not None and rss_end[k] is not None:
            rss_growth[k] = (rss_end[k] - rss_warm[k]) / rss_warm[k]
            if rss_growth[k] > args.rss_limit:
                violations["rss"].append(f"{k}: VmRSS {rss_warm[k]} kB after warm-up, {rss_end[k]} kB at the end "
                                         f"(+{100 * rss_growth[k]:.1f}% > {100 * args.rss_limit:.0f}%)")

    # Per request.
    codes = collections.Counter()
    odd = collections.Counter()
    for r in sorted(load.results, key=lambda r: r.job.i):
        j = r.job
        codes[r.code] += 1
        want = expected[j.mode][j.prompt][:j.max_new]
        mode = "greedy" if j.mode == 0 else f"sampled{sampling[j.mode - 1]}"
        what = (f"req {j.i} ({j.phase}, {mode}, prompt {j.prompt}, max_new {j.max_new}, deadline "
                f"{'none' if j.deadline is None else f'{j.deadline:.2f}s'}"
                f"{', cancel after %d tokens' % j.cancel_tokens if j.cancel_tokens else ''}"
                f"{', cancel at %.2fs' % j.cancel_s if j.cancel_s else ''}): {r.code} {r.details!r} after "
                f"{r.elapsed:.2f} s, {len(r.tokens)} tokens")
        if r.hung:
            violations["hang"].append(what)
        if r.code not in DOCUMENTED:
            violations["undocumented_code"].append(what)
        if r.code == "OK":
            if r.tokens != want:
                violations["wrong"].append(f"{what}: got {r.tokens}, want {want}")
            elif not r.finish:
                violations["no_finish_reason"].append(what)
        elif r.tokens != want[:len(r.tokens)]:
            violations["wrong"].append(f"{what}: streamed {r.tokens}, not a prefix of {want}")
        if r.code == "CANCELLED" and not r.client_cancelled and not r.hung:
            # CANCELLED tells the client it cancelled: from the server, it hides the real failure.
            violations["cancelled_not_by_client"].append(what)
        if r.code == "DEADLINE_EXCEEDED" and j.deadline is None:
            odd["DEADLINE_EXCEEDED_without_deadline"] += 1
    with open(os.path.join(work, "results.jsonl"), "w") as f:
        for r in sorted(load.results, key=lambda r: r.job.i):
            j = r.job
            f.write(json.dumps({"i": j.i, "phase": j.phase, "prompt": j.prompt, "mode": j.mode, "max_new": j.max_new,
                                "deadline": j.deadline, "cancel_tokens": j.cancel_tokens, "cancel_s": j.cancel_s,
                                "code": r.code, "details": r.details, "tokens": r.tokens, "elapsed": r.elapsed,
                                "hung": r.hung, "client_cancelled": r.client_cancelled}) + "\n")
    messages = collections.Counter((r.code, re.sub(r"[0-9]+", "N", r.details)[:160]) for r in load.results
                                   if r.code != "OK")
    for (code, msg), c in messages.most_common(12):
        print(f"  {c:5d} x {code}: {msg}", flush=True)
    if len(load.results) != args.n + len(probes):
        violations["lost"].append(f"{args.n + len(probes) - len(load.results)} requests have no result")
    probe_codes = collections.Counter(r.code for r in load.results if r.job.phase == "probe")
    # Enough OK answers, overall and under faults: a stack that fails (almost)
    # everything with documented codes would otherwise pass.
    for what, rs in (("all requests", load.results), ("chaos-phase requests",
                                                      [r for r in load.results if r.job.phase != "warmup"])):
        if not rs:
            continue
        n_ok = sum(r.code == "OK" for r in rs)
        want = max(1, math.ceil(args.min_ok_fraction * len(rs)))
        if n_ok < want:
            violations["too_few_ok"].append(f"{what}: {n_ok} OK of {len(rs)}, want at least {want} "
                                            f"(--min-ok-fraction {args.min_ok_fraction})")

    # Deaths, then a clean SIGTERM.
    deaths = []
    for p in procs.values():
        p.check_alive()
        for rc, _ in p.deaths:
            deaths.append(f"{p.name} exited {rc} (not killed by the test)")
    for name in ("router", "P0", "P1", "D0", "D1"):
        p = procs[name]
        if p.p.poll() is not None:
            continue
        p.p.send_signal(signal.SIGTERM)
        try:
            rc = p.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            deaths.append(f"{name} still running 30 s after SIGTERM")
            continue
        if rc != 0:
            deaths.append(f"{name} exited {rc} on SIGTERM")
    violations["deaths"].extend(deaths)

    handoff_faults = collections.Counter()
    for name in ("P0", "P1"):
        with open(procs[name].log_path, errors="replace") as f:
            for line in f:
                m = re.search(r"kv hand-off fault injection: (\w+) at", line)  # text or JSON logs
                if m:
                    handoff_faults[m.group(1)] += 1
    if not args.no_faults and args.handoff_fault_rate > 0:
        # About rate x (hand-offs) faults; a hand-off per request that reaches a
        # prefill worker (every one here: no local prefill), and retries add some.
        want = args.min_handoff_faults
        if want < 0:
            want = max(1, int(args.handoff_fault_rate * len(load.results) / 4))
        got = sum(handoff_faults.values())
        if got < want:
            violations["too_few_faults"].append(
                f"hand-off faults injected: {got} ({dict(handoff_faults) or 'none'}) in the prefill workers' logs, "
                f"want at least {want} (--handoff-fault-rate {args.handoff_fault_rate} of {len(load.results)} "
                "requests' hand-offs; --min-handoff-faults)")

    ok = not any(violations.values())
    if not ok:
        dump_logs(work, procs, lines=15)
    for kind, items in sorted(violations.items()):
        for v in items[:10]:
            print(f"VIOLATION {kind}: {v}", flush=True)
        if len(items) > 10:
            print(f"VIOLATION {kind}: ... and {len(items) - 10} more", flush=True)
    total_held = sum(v for h in held.values() for k, v in h.items() if k != "error" and isinstance(v, int))
    codes_s = " ".join(f"{k}={v}" for k, v in codes.most_common())
    rss_s = " ".join(f"{k}{100 * g:+.1f}%" for k, g in rss_growth.items())
    odd_s = (" odd=" + ",".join(f"{k}:{v}" for k, v in odd.items())) if odd else ""
    probe_s = " ".join(f"{k}={v}" for k, v in probe_codes.most_common())
    print(f"chaos model={model_name} n={args.n}+{len(probes)} probes | codes: {codes_s} (probes: {probe_s}) | "
          f"hangs={len(violations['hang'])} "
          f"wrong={len(violations['wrong'])} undocumented={len(violations['undocumented_code'])} "
          f"cancelled_not_by_client={len(violations['cancelled_not_by_client'])}{odd_s} | "
          f"kv_held={total_held if violations['kv_held'] else 0} ({len(violations['kv_held'])} workers) | "
          f"rss_growth {rss_s} | deaths={len(deaths)} | server_faults={sum(faults.counts.values())} "
          f"handoff_faults={sum(handoff_faults.values())} ({','.join(f'{k}:{v}' for k, v in sorted(handoff_faults.items()))}) | "
          f"{time.monotonic() - t_begin:.0f} s | {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


if __name__ == "__main__":
    sys.exit(main())
