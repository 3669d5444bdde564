"""HTTP throughput: each server's ASGI app under uvicorn (or nimblemcp's engine), driven by wrk.

    python benchmarks/http_throughput.py [--rounds 3] [--duration 5] [--connections 64]

Every app runs under the same uvicorn settings (1 worker, uvloop + httptools, no
access log) on 127.0.0.1; nimblemcp's from benchmarks/.venv-nimble, the peers' from
benchmarks/.venv-peers. wrk (Debian package `wrk`) POSTs one fixed 2026-07-28
`tools/call echo` body with the headers the transport needs. Rounds are interleaved:
each round runs wrk once against every server, in rotated order. A bare ASGI app that
returns a canned result is the ceiling (`bare-asgi`, on uvicorn); `bare-asgi-engine` serves
the same app on nimblemcp's own engine, the engine's own ceiling. Idle RSS is read from
/proc after start-up and one request, before any load.

Besides req/s (which halves whenever other work shares the server's core), every run
reads the server's own CPU time from /proc (user + system, its threads and children)
and reports CPU microseconds per request and requests per CPU-second: what the server
can do on one core. It is less sensitive to other work on the box than req/s, not
immune (shared caches; an unsaturated server answers fewer requests per loop pass).
The load average is printed with the table; compare only rows of one run.

The `nimblemcp-run*` rows are not uvicorn apps: they run `nimblemcp run --transport
http` itself (the guarded app, as deployed) under uvicorn (`nimblemcp-run-uvicorn`, the
default since issue 31) and on nimblemcp's own engine (`nimblemcp-run`, `--engine
nimblemcp`); `nimblemcp-run-async` and `nimblemcp-run-inline` serve the same
`echo` as an `async def` and as a sync tool marked `run_in_thread=False` on the engine,
so that beside `nimblemcp-run` (a sync tool: a worker-thread hop per call) they show
what the hop costs. `--pin` puts the servers on CPU 0 and wrk on CPU 1 (taskset).
`--nice -20` (root) runs the servers and wrk each in a session of its own whose autogroup
gets that niceness (Linux autogroups make a plain `nice` count only within one session):
on a box shared with other work they then get nearly all of their core, as on a quiet
box, and the other work waits for the few minutes of the run. Without it, req/s under
load measure the scheduler's share as much as the server: a server whose sync tool hops
to a thread has more runnable threads and gets more of a contended core than a
single-threaded one (seen here: a single-threaded server got ~25% of its core at load 7,
`nimblemcp run` ~75%), which flatters it against the bare app.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from _common import (
    NIMBLE_PY,
    PEER_PY,
    SERVERS,
    VERSION,
    call_request,
    ensure_peers,
    median,
    save,
    say,
    table,
)

BODY = json.dumps(call_request(1), separators=(",", ":"))
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": VERSION,
    "Mcp-Method": "tools/call",
    "Mcp-Name": "echo",
}
APPS = {  # name -> (interpreter, module); "run:<engine>" = `nimblemcp run` on that engine
    "bare-asgi": (NIMBLE_PY, "bare_asgi"),
    "bare-asgi-engine": (NIMBLE_PY, "engine:bare_asgi"),  # the same app on nimblemcp's own engine
    "nimblemcp-run-uvicorn": (NIMBLE_PY, "run:uvicorn"),  # the guarded app, as deployed (the default)
    "nimblemcp-run": (NIMBLE_PY, "run:nimblemcp"),  # the same on nimblemcp's own engine (opt-in)
    # The same engine and guarded app with the other two kinds of tool, so that the
    # report shows what the sync tool's thread hop costs (issue 18):
    "nimblemcp-run-async": (NIMBLE_PY, "run:nimblemcp:nimble_async_server"),  # async def echo
    "nimblemcp-run-inline": (NIMBLE_PY, "run:nimblemcp:nimble_inline_server"),  # run_in_thread=False
    "nimblemcp": (NIMBLE_PY, "nimble_server"),
    "nimblemcp-async": (NIMBLE_PY, "nimble_async_server"),  # async def echo: no thread hop
    "nimblemcp-inline": (NIMBLE_PY, "nimble_inline_server"),  # sync echo, run_in_thread=False
    "mcp": (PEER_PY, "mcp_server"),
    "fastmcp": (PEER_PY, "fastmcp_server"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


NICE: list[int] = []  # [-20] with --nice -20: the autogroup niceness of servers and wrk


def prioritise(pid: int) -> None:
    """Give the session (autogroup) that `pid` leads the niceness of --nice."""
    if NICE:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(NICE[0]))


AGAINST: list[str] = []  # [SRC] with --against SRC: another checkout's src/


def start(name: str, py: str, module: str, port: int, pin: str | None = None) -> subprocess.Popen[bytes]:
    if module.startswith("run:"):  # run:<engine>[:<server module>]; engine "" = that tree's default
        engine, _, served = module.removeprefix("run:").partition(":")
        argv = [py, "-m", "nimblemcp", "run", f"{served or 'nimble_server'}.py", "--transport", "http",
                "--port", str(port), "--log-level", "warning", *(["--engine", engine] if engine else [])]
    elif module.startswith("engine:"):
        argv = [py, f"{module.removeprefix('engine:')}.py", str(port)]
    else:
        argv = [py, "-m", "uvicorn", f"{module}:http_app", "--factory", "--host", "127.0.0.1",
                "--port", str(port), "--workers", "1", "--loop", "uvloop", "--http", "httptools",
                "--no-access-log", "--log-level", "warning", "--lifespan", "auto"]
    if pin is not None:
        argv = ["taskset", "-c", pin, *argv]
    env = dict(os.environ, FASTMCP_SHOW_SERVER_BANNER="false", FASTMCP_LOG_LEVEL="WARNING",
               FASTMCP_CHECK_FOR_UPDATES="off")
    env.pop("PYTHONPATH", None)
    if name.endswith("@against"):
        env["PYTHONPATH"] = AGAINST[0]
    with open(os.path.join(tempfile.gettempdir(), f"bench-{name}.log"), "wb") as log:  # the child keeps its copy
        proc = subprocess.Popen(argv, cwd=str(SERVERS), env=env, stdout=subprocess.DEVNULL,
                                start_new_session=bool(NICE), stderr=log)
    prioritise(proc.pid)
    return proc


def post(port: int) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("POST", "/mcp", body=BODY, headers=HEADERS)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def wait_ready(name: str, proc: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited; see {tempfile.gettempdir()}/bench-{name}.log")
        try:
            status, body = post(port)
        except OSError:
            time.sleep(0.05)
            continue
        if status != 200 or b"hello" not in body:
            raise RuntimeError(f"{name}: HTTP {status}: {body[:400]!r}")
        return
    raise RuntimeError(f"{name} did not start")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid`, its threads and its live descendants."""
    total = 0.0
    todo = [pid]
    tick = os.sysconf("SC_CLK_TCK")
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


LUA = """wrk.method = "POST"
wrk.body = {body}
{headers}
"""

_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def run_wrk(port: int, script: str, conns: int, duration: int, threads: int, pin: str | None = None,
            server_pid: int | None = None) -> dict:
    cpu0 = cpu_seconds(server_pid) if server_pid is not None else 0.0
    wrk = subprocess.Popen(
        [*(["taskset", "-c", pin] if pin is not None else []), "wrk", f"-t{threads}", f"-c{conns}", f"-d{duration}s", "--latency", "-s", script,
         f"http://127.0.0.1:{port}/mcp"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=bool(NICE))
    prioritise(wrk.pid)
    out, err = wrk.communicate()
    if wrk.returncode:
        raise RuntimeError(f"wrk failed: {err}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = {}
    for p in ("50", "99"):
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        lat[p] = float(m.group(1)) * _UNIT[m.group(2)]
    cpu = cpu_seconds(server_pid) - cpu0 if server_pid is not None else float("nan")
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errs = re.search(r"Socket errors:.*", out)
    return {"rps": rps, "p50_ms": lat["50"], "p99_ms": lat["99"], "requests": requests,
            "cpu_us_per_req": cpu / requests * 1e6 if requests else float("nan"),
            "non2xx": int(bad.group(1)) if bad else 0, "socket_errors": errs.group(0) if errs else ""}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)  # medians: the box is noisy, p99 most
    ap.add_argument("--duration", type=int, default=4, help="seconds of wrk per run")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="wrk threads (2-core box: 1)")
    ap.add_argument("--only", nargs="*", help="subset of " + ",".join(APPS))
    ap.add_argument("--pin", action="store_true",
                    help="servers on CPU 0 and wrk on CPU 1 (taskset), as in README's engine table")
    ap.add_argument("--nice", type=int, default=None,
                    help="run servers and wrk at this niceness (negative needs root), e.g. -20 on a busy box")
    ap.add_argument("--no-peers", action="store_true", help="skip the peers' venv check (with --only)")
    ap.add_argument("--against", metavar="SRC",
                    help="add nimblemcp-run-uvicorn@against and nimblemcp-run@against: `nimblemcp run` "
                         "of another checkout's src/ on either engine")
    args = ap.parse_args()
    server_cpu, wrk_cpu = ("0", "1") if args.pin else (None, None)
    if args.nice is not None:
        NICE[:] = [args.nice]
    if shutil.which("wrk") is None:
        sys.exit("wrk not found: apt-get update && apt-get install -y wrk")
    if not args.no_peers:
        ensure_peers()
    apps = {k: v for k, v in APPS.items() if not args.only or k in args.only}
    if args.against:
        AGAINST[:] = [os.path.abspath(args.against)]
        apps["nimblemcp-run-uvicorn@against"] = (NIMBLE_PY, "run:uvicorn")
        apps["nimblemcp-run@against"] = (NIMBLE_PY, "run:nimblemcp")
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:  # removed at the end
        lua.write(LUA.format(body=json.dumps(BODY), headers="\n".join(
            f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in HEADERS.items())))
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    runs: dict[str, list[dict]] = {n: [] for n in apps}
    idle: dict[str, float] = {}
    try:
        for name, (py, module) in apps.items():
            port = free_port()
            procs[name] = (start(name, py, module, port, server_cpu), port)
        for name, (proc, port) in procs.items():
            wait_ready(name, proc, port)
            time.sleep(0.5)
            idle[name] = rss_mib(proc.pid)
        for _proc, port in procs.values():  # warm-up, not counted
            run_wrk(port, lua.name, args.connections, 1, args.threads, wrk_cpu)
        names = list(procs)
        load_before = os.getloadavg()[0]
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                runs[name].append(run_wrk(procs[name][1], lua.name, args.connections,
                                          args.duration, args.threads, wrk_cpu, procs[name][0].pid))
        load_after = os.getloadavg()[0]
        loaded = {n: rss_mib(p.pid) for n, (p, _) in procs.items()}
    finally:
        for proc, _ in procs.values():
            proc.terminate()
        for proc, _ in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        os.unlink(lua.name)
    summary = {}
    for n, rs in runs.items():
        summary[n] = {"rps": median([x["rps"] for x in rs]),
                      "p50_ms": median([x["p50_ms"] for x in rs]),
                      "p99_ms": median([x["p99_ms"] for x in rs]),
                      "cpu_us_per_req": median([x["cpu_us_per_req"] for x in rs]),
                      "non2xx": sum(x["non2xx"] for x in rs),
                      "idle_rss_mib": idle[n], "rss_after_load_mib": loaded[n], "runs": rs}
    ref = summary.get("mcp", {}).get("rps")
    ceil = summary.get("bare-asgi", {}).get("rps")
    ceil_cpu = summary.get("bare-asgi", {}).get("cpu_us_per_req")
    rows = []
    for n, s in summary.items():
        rows.append([n, f"{s['rps']:.0f}", f"{s['p50_ms']:.2f}", f"{s['p99_ms']:.2f}",
                     f"{s['rps'] / ref:.2f}x" if ref else "-",
                     f"{s['rps'] / ceil:.0%}" if ceil else "-",
                     f"{s['cpu_us_per_req']:.1f}", f"{1e6 / s['cpu_us_per_req']:.0f}",
                     f"{ceil_cpu / s['cpu_us_per_req']:.0%}" if ceil_cpu else "-",
                     f"{s['idle_rss_mib']:.1f}", f"{s['rss_after_load_mib']:.1f}", str(s["non2xx"])])
    out = (f"HTTP tools/call echo (uvicorn rows: 1 worker, uvloop+httptools; *-engine and nimblemcp-run: "
           f"nimblemcp's engine; nimblemcp-run-uvicorn: `nimblemcp run` on uvicorn, the default), wrk -t{args.threads} -c{args.connections}"
           f"{', servers pinned to CPU 0 and wrk to CPU 1' if args.pin else ''}"
           f"{f', servers and wrk at nice {args.nice}' if args.nice is not None else ''}, {args.rounds} interleaved "
           f"rounds x {args.duration}s; medians of rounds. Load average {load_before:.2f} before, "
           f"{load_after:.2f} after (2 cores): req/s fall with it, server CPU per request less so.\n\n"
           + table(["server", "req/s", "p50 ms", "p99 ms", "vs mcp", "of ceiling", "CPU us/req",
                    "req per CPU-s", "of ceiling (CPU)", "idle RSS MiB", "RSS after MiB", "non-2xx"], rows))
    if "nimblemcp" in summary and ref and ceil:
        s = summary["nimblemcp"]
        out += (f"\n\nnimblemcp: {s['rps'] / ref:.2f}x mcp (target >= 10x), {s['rps'] / ceil:.0%} "
                f"of bare ASGI (target >= 50%), p99 {s['p99_ms']:.2f} ms (target < 5 ms), "
                f"idle RSS {s['idle_rss_mib']:.1f} MiB (target <= 40 MiB)")
    run = summary.get("nimblemcp-run")
    if run and ceil:
        vs_mcp = f", {run['rps'] / ref:.1f}x mcp (goal >= 15x)" if ref else ""
        out += (f"\n\nnimblemcp-run (the engine): {run['rps'] / ceil:.2f}x bare-asgi on uvicorn by req/s, "
                f"{ceil_cpu / run['cpu_us_per_req']:.2f}x by CPU per request (goal >= 1.2x){vs_mcp}, "
                f"p99 {run['p99_ms']:.2f} ms (goal <= 3 ms)")
    for mine, before in (("nimblemcp-run-uvicorn", "nimblemcp-run-uvicorn@against"),
                         ("nimblemcp-run", "nimblemcp-run@against")):
        if mine in summary and before in summary:
            a, b = summary[mine], summary[before]
            out += (f"\n{mine}: {a['rps'] / b['rps']:.2f}x the --against tree's req/s, "
                    f"{b['cpu_us_per_req'] / a['cpu_us_per_req']:.2f}x by CPU per request, "
                    f"p99 {a['p99_ms']:.2f} vs {b['p99_ms']:.2f} ms")
    hop = [(n, summary[n]) for n in ("nimblemcp-run-async", "nimblemcp-run-inline") if n in summary]
    if run and hop:
        out += "\nthe sync tool's thread hop: nimblemcp-run serves " + ", ".join(
            f"{run['rps'] / s['rps']:.0%} of {n}'s req/s at {run['cpu_us_per_req'] / s['cpu_us_per_req']:.2f}x "
            "its CPU per request" for n, s in hop)
    say(out)
    save("http_throughput", out, {"args": vars(args), "load_average": [load_before, load_after],
                                  "results": summary})


if __name__ == "__main__":
    main()
