"""`nimblemcp run --transport http --workers 2` against `--workers 1`, under wrk.

    python benchmarks/workers.py [--rounds 5] [--duration 4] [--connections 64]

Three setups of the same `servers/nimble_server.py` (sync `echo`), all started by the
CLI exactly as a deployment would (state key and Redis URL in the environment for all
three, since `--workers 2` refuses to start without them; `tools/call echo` never touches
Redis):

- `1 worker, pinned`: the server on core 0 and wrk on core 1 (taskset), the set-up of
  http_throughput.py and issue 18: what one core of server does.
- `1 worker`: nothing pinned; the server and wrk share both cores.
- `2 workers`: nothing pinned; two SO_REUSEPORT worker processes and wrk share both cores.

The ratio that answers "does it scale" is `2 workers` / `1 worker` (same placement). On a
2-core machine wrk itself needs CPU, so two workers can never get two whole cores: the
table shows how many cores the servers and wrk each used (CPU seconds / wall seconds from
/proc and wait4) and req/s per server core, which is what carries over to bigger machines.
Rounds are interleaved (each round visits every setup, in rotated order); medians.
wrk drives the fixed 2026-07-28 `tools/call` body and headers of http_throughput.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import urllib.request

from _common import ensure_peers, median, save, say, table
from _fleet import (
    BODY,
    HEADERS,
    SERVERS_DIR,
    Redis,
    free_port,
    launch,
    load,
    run_wrk,
    serving_pids,
    state_key,
    stop,
    wait_port,
    wrk_script,
)

TARGET = SERVERS_DIR / "nimble_server.py"
# name -> (--workers, taskset cpus for the server, taskset cpus for wrk)
SETUPS = {
    "1 worker, pinned": (1, "0", "1"),
    "1 worker": (1, None, None),
    "2 workers": (2, None, None),
}


def post_ok(port: int) -> bool:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=BODY.encode(), headers=HEADERS)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status == 200 and b"hello" in resp.read()
    except OSError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=4, help="seconds of wrk per run")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="wrk threads")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk not found: apt-get update && apt-get install -y wrk")
    ensure_peers()
    load_before = load()
    redis = Redis()
    env = {"NIMBLEMCP_STATE_KEYS": state_key(), "NIMBLEMCP_REDIS_URL": redis.url}
    script = wrk_script()
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    runs: dict[str, list[dict]] = {n: [] for n in SETUPS}
    try:
        for name, (workers, cpus, _) in SETUPS.items():
            port = free_port()
            procs[name] = (launch(TARGET, port, "workers-" + name.replace(" ", "").replace(",", "-"),
                                  "--workers", str(workers), env=env, cpus=cpus), port)
        for name, (proc, port) in procs.items():
            wait_port(port, proc, name)
            deadline = time.monotonic() + 30
            while len(serving_pids(proc)) < SETUPS[name][0] or not post_ok(port):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not get ready")
                time.sleep(0.1)
        time.sleep(1.0)  # every worker of `2 workers` bound and idle
        for name, (_proc, port) in procs.items():  # warm-up, not counted
            run_wrk(f"http://127.0.0.1:{port}/mcp", script, args.connections, 1, args.threads,
                    cpus=SETUPS[name][2])
        names = list(procs)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                proc, port = procs[name]
                runs[name].append(run_wrk(f"http://127.0.0.1:{port}/mcp", script, args.connections,
                                          args.duration, args.threads, cpus=SETUPS[name][2],
                                          watch={"server": serving_pids(proc)}))
    finally:
        for proc, _ in procs.values():
            stop(proc)
        redis.close()
        os.unlink(script)
    load_after = load()
    summary = {}
    for n, rs in runs.items():
        summary[n] = {k: median([float(x[k]) for x in rs])
                      for k in ("rps", "p50_ms", "p99_ms", "server_cores", "wrk_cores")}
        summary[n]["rps_per_server_core"] = median([float(x["rps"]) / max(float(x["server_cores"]), 1e-9)
                                                    for x in rs])
        summary[n]["non2xx"] = sum(int(x["non2xx"]) for x in rs)
        summary[n]["runs"] = rs
    base = summary["1 worker"]["rps"]
    rows = [[n, f"{s['rps']:.0f}", f"{s['p50_ms']:.2f}", f"{s['p99_ms']:.2f}", f"{s['rps'] / base:.2f}x",
             f"{s['server_cores']:.2f}", f"{s['wrk_cores']:.2f}", f"{s['rps_per_server_core']:.0f}",
             str(s["non2xx"])] for n, s in summary.items()]
    two = summary["2 workers"]
    out = (f"`nimblemcp run --transport http --workers N`, sync echo, wrk -t{args.threads} "
           f"-c{args.connections}, {args.rounds} interleaved rounds x {args.duration:g}s; medians. "
           f"{os.cpu_count()} cores; {load_before} before, {load_after} after.\n\n"
           + table(["setup", "req/s", "p50 ms", "p99 ms", "vs 1 worker", "server cores", "wrk cores",
                    "req/s per server core", "non-2xx"], rows)
           + f"\n\n2 workers / 1 worker: {two['rps'] / base:.2f}x req/s (issue 13 target >= 1.6x); "
           f"per server core {two['rps_per_server_core'] / summary['1 worker']['rps_per_server_core']:.2f}x.")
    say(out)
    save("workers", out, {"args": vars(args), "load_before": load_before, "load_after": load_after,
                          "results": summary})


if __name__ == "__main__":
    main()
