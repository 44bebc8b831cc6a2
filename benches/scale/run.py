#!/usr/bin/env python3
"""The scale bench (issue 23; docs/bench.md, "One worker, many runs"). Not part of
`cargo test`.

    benches/scale/run.py [N ...]          # default: 500 1000

For each N and each backend (SQLite; PostgreSQL too when AGENTRUN_TEST_PG names a
server, e.g. after `eval "$(.ci/pg start)"`): submit N runs of 6 model turns (5 calls
of the idempotent command tool `t` = `cat`, named on PATH, then an answer) against
the loopback model of model.py, which answers each request after 1 s; then time one
`agentrun worker --concurrency N --until-idle` draining them.

Reported per case: runs completed, model turns/s against the model-bound ideal
(N turns/s: every run waits 6 × 1 s), the worker's CPU, peak RSS (wait4) and peak RSS
per run in flight, heartbeat writes/s (the worker's own count, printed when it stops),
and the PostgreSQL connections the database saw (peak of pg_stat_activity). A second,
smaller pass per backend (STRACE_RUNS, default 100) counts the database's costs per
step: on SQLite fsync/fdatasync and pwrite64 calls of the worker (strace -f
--seccomp-bpf), on PostgreSQL the server's WAL syncs and commits (pg_stat_wal,
pg_stat_database). The report goes to target/scale-bench.md.

Each case runs with each tool of TOOLS (default "cat raw"): `cat` (glibc, dynamically
linked) and `raw` (benches/scale/echo.c, built here with gcc: the same copy of stdin to
stdout with raw system calls and no C library). Both are idempotent and named on
PATH. They separate the tool's own cost from agentrun's: on a VM that traps `cpuid`,
glibc's start-up alone makes each `cat` cost ~1.3 ms of CPU, more than agentrun's
whole turn (docs/bench.md).

Environment: BIN (default target/release/agentrun), DELAY (1), CALLS (5), TTL (30s),
POLL (500ms), STRACE_RUNS (100; 0 skips the pass), TOOLS ("cat raw").
"""
import concurrent.futures as cf
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.abspath(os.environ.get("BIN", os.path.join(ROOT, "target/release/agentrun")))
DELAY = float(os.environ.get("DELAY", "1"))
CALLS = int(os.environ.get("CALLS", "5"))
TTL = os.environ.get("TTL", "30s")
POLL = os.environ.get("POLL", "500ms")
STRACE_RUNS = int(os.environ.get("STRACE_RUNS", "100"))
TOOLS = os.environ.get("TOOLS", "cat raw").split()
PG = os.environ.get("AGENTRUN_TEST_PG")
OUT = os.path.join(ROOT, "target", "scale-bench.md")


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def psql(sql, db=PG):
    return subprocess.run(["psql", db, "-Atqc", sql], check=True, capture_output=True,
                          text=True).stdout.strip()


class Case:
    def __init__(self, work, backend, n, label, tool="cat"):
        self.work, self.backend, self.n, self.label = work, backend, n, label
        self.tools = f"tools-{tool}.toml"
        self.env = dict(os.environ, OPENAI_BASE_URL="", AGENTRUN_DB=self.fresh_db(),
                        PATH=os.path.join(work, "bin") + os.pathsep + os.environ["PATH"])
        self.env.pop("OPENAI_API_KEY", None)

    def fresh_db(self):
        if self.backend == "sqlite":
            return os.path.join(self.work, f"{self.label}.db")
        schema = f"scale_{self.label}_{os.getpid()}"
        psql(f"SET client_min_messages = warning; DROP SCHEMA IF EXISTS {schema} CASCADE; "
             f"CREATE SCHEMA {schema}")
        return f"{PG}?options=-c%20search_path%3D{schema}"

    def start_model(self):
        port = free_port()
        self.model_log = os.path.join(self.work, f"{self.label}.model")
        self.model = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "benches/scale/model.py"), str(port),
             str(DELAY), str(CALLS), self.model_log], stdout=subprocess.PIPE, text=True)
        assert self.model.stdout.readline().strip() == "ready"
        self.env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{port}/v1"

    def stop_model(self):
        self.model.terminate()
        self.model.wait()
        return [(float(a), float(b), int(p)) for a, b, p in
                (line.split() for line in open(self.model_log))]

    def submit(self):
        def one(_):
            subprocess.run([BIN, "submit", "task.md", "--tools", self.tools, "-q"],
                           cwd=self.work, env=self.env, check=True,
                           stdout=subprocess.DEVNULL)
        with cf.ThreadPoolExecutor(4) as pool:
            list(pool.map(one, range(self.n)))

    def worker(self, wrap=()):
        args = [*wrap, BIN, "worker", "--concurrency", str(self.n), "--until-idle",
                "--lease-ttl", TTL, "--poll", POLL]
        err = open(os.path.join(self.work, f"{self.label}.worker.err"), "w+")
        t0 = time.monotonic()
        proc = subprocess.Popen(args, cwd=self.work, env=self.env, stderr=err,
                                stdout=subprocess.DEVNULL)
        peak_conns = 0
        next_pg = 0.0
        while proc.poll() is None:
            now = time.monotonic()
            if self.backend == "pg" and now >= next_pg:
                next_pg = now + 0.5
                conns = int(psql("SELECT count(*) FROM pg_stat_activity WHERE "
                                 "datname = current_database() AND pid <> pg_backend_pid()"))
                peak_conns = max(peak_conns, conns)
            time.sleep(0.05)
        wall = time.monotonic() - t0
        err.seek(0)
        text = err.read()
        err.close()
        return proc.returncode, wall, peak_conns, text

    def runs(self):
        out = subprocess.run([BIN, "runs", "list", "--json", "-q"], cwd=self.work,
                             env=self.env, check=True, capture_output=True, text=True).stdout
        return json.loads(out)


def setup(work):
    """The task, a tools file per tool, and the `raw` tool built into work/bin (None
    when it cannot be built)."""
    for tool, program in (("cat", "cat"), ("raw", "agentrun-bench-echo")):
        with open(os.path.join(work, f"tools-{tool}.toml"), "w") as f:
            f.write('[tools.t]\ndescription = "Echoes its arguments"\n'
                    f'input_schema = {{ type = "object" }}\ncommand = ["{program}"]\n'
                    'idempotent = true\n')
    with open(os.path.join(work, "task.md"), "w") as f:
        f.write(f'+++\nmodel = "openai:bench"\nstream = false\nmax_steps = {CALLS + 5}\n'
                '+++\nCall t until it is done.\n')
    os.makedirs(os.path.join(work, "bin"))
    built = subprocess.run(
        ["gcc", "-O2", "-static", "-nostdlib", "-fno-stack-protector", "-o",
         os.path.join(work, "bin", "agentrun-bench-echo"),
         os.path.join(ROOT, "benches/scale/echo.c")], capture_output=True, text=True)
    if built.returncode != 0:
        print(f"skipped: the raw tool (gcc could not build benches/scale/echo.c: "
              f"{built.stderr.strip()[:200]})", flush=True)
        return False
    return True


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, len(values) * p // 100)] if values else float("nan")


def turn_gaps(turns):
    """Per connection (each run keeps its own): ms from an answer to the run's next
    request — agentrun's own time per turn — and each run's first request."""
    by_peer = {}
    for a, b, peer in turns:
        by_peer.setdefault(peer, []).append((a, b))
    gaps, firsts = [], []
    for seq in by_peer.values():
        seq.sort()
        firsts.append(seq[0][0])
        gaps += [nxt[0] - prev[1] for prev, nxt in zip(seq, seq[1:])]
    return gaps, firsts


def time_case(work, backend, n, pass_no, tool):
    # Its own database per pass: `run.py 500 500` times the same size twice.
    case = Case(work, backend, n, f"{backend}{n}_{tool}_{pass_no}", tool)
    case.start_model()
    case.submit()
    before = load()
    args = [BIN, "worker", "--concurrency", str(n), "--until-idle", "--lease-ttl", TTL,
            "--poll", POLL]
    err_path = os.path.join(work, f"{case.label}.worker.err")
    err = open(err_path, "w")
    t0, started = time.monotonic(), time.time()
    proc = subprocess.Popen(args, cwd=work, env=case.env, stderr=err,
                            stdout=subprocess.DEVNULL)
    peak_conns, next_pg = 0, 0.0
    own_cpu, tick = 0.0, os.sysconf("SC_CLK_TCK")
    while True:
        # wait4 on this one child: its CPU (its reaped children, the tools, included)
        # and peak RSS (ru_maxrss, KiB).
        wpid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if wpid:
            break
        # The worker's own CPU, without its children's: utime + stime of
        # /proc/PID/stat, as last read before it exited.
        try:
            with open(f"/proc/{proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            own_cpu = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
        now = time.monotonic()
        if backend == "pg" and now >= next_pg:
            next_pg = now + 0.5
            peak_conns = max(peak_conns, int(psql(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()")))
        time.sleep(0.05)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err.close()
    after = load()
    turns = case.stop_model()
    runs = case.runs()
    text = open(err_path).read()
    hb = re.search(r"(\d+) heartbeat writes", text)
    done = sum(1 for r in runs if r["status"] == "completed")
    steps = sum(r["steps"] for r in runs)
    # Turns in flight: the most requests the model held at once.
    edges = sorted([(a, 1) for a, _, _ in turns] + [(b, -1) for _, b, _ in turns])
    inflight = peak_inflight = 0
    for _, d in edges:
        inflight += d
        peak_inflight = max(peak_inflight, inflight)
    gaps, firsts = turn_gaps(turns)
    ideal = (CALLS + 1) * DELAY
    return {
        "case": f"{'SQLite' if backend == 'sqlite' else 'PostgreSQL'}, {n} runs, tool {tool}",
        "exit": proc.returncode, "completed": f"{done}/{n}", "steps": steps,
        "turns": len(turns), "wall": wall, "turns_s": len(turns) / wall,
        "ideal": n / DELAY, "of_ideal": ideal / wall,
        "cpu_user": usage.ru_utime, "cpu_sys": usage.ru_stime, "own_cpu": own_cpu,
        "peak_rss_kib": usage.ru_maxrss, "per_run_kib": usage.ru_maxrss / n,
        "peak_inflight": peak_inflight,
        "gap_ms": (pct(gaps, 50), pct(gaps, 90), pct(gaps, 99)),
        "first_s": (pct(firsts, 50) - started * 1000) / 1000,
        "heartbeats_s": (int(hb[1]) / wall) if hb else None,
        "pg_conns": peak_conns if backend == "pg" else None,
        "load": f"{before} → {after}",
        "stderr_tail": text.strip().splitlines()[-1:] if text.strip() else [],
    }


def count_case(work, backend, n):
    """Database costs per step, on a smaller drain."""
    case = Case(work, backend, n, f"{backend}{n}c")
    case.start_model()
    case.submit()
    if backend == "sqlite":
        trace = os.path.join(work, f"{case.label}.strace")
        code, _, _, _ = case.worker(("strace", "-f", "--seccomp-bpf", "-c", "-o", trace,
                                     "-e", "trace=fsync,fdatasync,pwrite64"))
        counts = {}
        for line in open(trace):
            parts = line.split()
            if len(parts) >= 5 and parts[-1] in ("fsync", "fdatasync", "pwrite64"):
                counts[parts[-1]] = int(parts[3])
        case.stop_model()
        steps = sum(r["steps"] for r in case.runs())
        return {"backend": "SQLite", "runs": n, "steps": steps,
                "fsyncs_step": (counts.get("fsync", 0) + counts.get("fdatasync", 0)) / steps,
                "writes_step": counts.get("pwrite64", 0) / steps,
                "what": "worker's fsync+fdatasync / pwrite64 (strace -f)"}
    wal = "SELECT wal_sync || ' ' || wal_write FROM pg_stat_wal"
    xact = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    w0, x0 = psql(wal).split(), int(psql(xact))
    case.worker()
    w1, x1 = psql(wal).split(), int(psql(xact))
    case.stop_model()
    steps = sum(r["steps"] for r in case.runs())
    return {"backend": "PostgreSQL", "runs": n, "steps": steps,
            "fsyncs_step": (int(w1[0]) - int(w0[0])) / steps,
            "writes_step": (x1 - x0) / steps,
            "what": "server's WAL syncs / commits (pg_stat_wal, pg_stat_database; "
                    "the whole server)"}


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [500, 1000]
    backends = ["sqlite"] + (["pg"] if PG else [])
    os.makedirs(os.path.join(ROOT, "target"), exist_ok=True)
    work = tempfile.mkdtemp(prefix="scale-bench.", dir=os.path.join(ROOT, "target"))
    raw_built = setup(work)
    tools = [t for t in TOOLS if t != "raw" or raw_built]
    lines = [f"Binary: {BIN}; model delay {DELAY} s, {CALLS} tool calls + 1 answer per run, "
             f"lease TTL {TTL}, poll {POLL}; {os.cpu_count()} cores.", "",
             "| case | completed | model turns | wall s | turns/s | ideal turns/s | of ideal "
             "| CPU user+sys s (tools included) | agentrun's own CPU s | peak RSS MiB | KiB per run in flight | turns in flight "
             "(peak) | first request s (median) | turn gap ms (p50/p90/p99) | heartbeat writes/s "
             "| PG connections | load (1/5/15 min) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    marginal = []
    try:
        for backend in backends:
            peaks = {}
            for pass_no, (n, tool) in enumerate((n, t) for n in sizes for t in tools):
                r = time_case(work, backend, n, pass_no, tool)
                peaks.setdefault(n, r["peak_rss_kib"])
                hb = "n/a" if r["heartbeats_s"] is None else f"{r['heartbeats_s']:.2f}"
                conns = "—" if r["pg_conns"] is None else str(r["pg_conns"])
                row = (f"| {r['case']} | {r['completed']} | {r['turns']} | {r['wall']:.1f} "
                       f"| {r['turns_s']:.0f} | {r['ideal']:.0f} | {100 * r['of_ideal']:.0f}% "
                       f"| {r['cpu_user']:.1f}+{r['cpu_sys']:.1f} | {r['own_cpu']:.1f} "
                       f"| {r['peak_rss_kib'] / 1024:.1f} | {r['per_run_kib']:.0f} "
                       f"| {r['peak_inflight']} | {r['first_s']:.2f} "
                       f"| {'/'.join(f'{g:.0f}' for g in r['gap_ms'])} "
                       f"| {hb} | {conns} | {r['load']} |")
                print(row, "exit", r["exit"], r["stderr_tail"], flush=True)
                lines.append(row)
            if len(peaks) > 1:
                lo, hi = min(peaks), max(peaks)
                marginal.append(f"{backend}: peak RSS grows {(peaks[hi] - peaks[lo]) / (hi - lo):.0f} "
                                f"KiB per run in flight from {lo} to {hi} runs")
        lines += ["", *[f"- {m}" for m in marginal]]
        if STRACE_RUNS:
            lines += ["", "| database costs per step | runs | steps | fsyncs / step "
                      "| writes / step | counted |", "|---|---|---|---|---|---|"]
            for backend in backends:
                c = count_case(work, backend, STRACE_RUNS)
                row = (f"| {c['backend']} | {c['runs']} | {c['steps']} "
                       f"| {c['fsyncs_step']:.2f} | {c['writes_step']:.2f} | {c['what']} |")
                print(row, flush=True)
                lines.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
