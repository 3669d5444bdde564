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
import subprocess
import time
import urllib.request

from _common import median, save, say, table
from _fleet import (
    BODY,
    HEADERS,
    SERVERS_DIR,
    WrkBench,
    free_port,
    launch,
    load,
    rotations,
    serving_pids,
    stop,
    summarize,
    wait_port,
    wrk_options,
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
    wrk_options(ap)
    args = ap.parse_args()
    bench = WrkBench()
    load_before = bench.load_before
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    runs: dict[str, list[dict]] = {n: [] for n in SETUPS}
    with bench:
        try:
            for name, (workers, cpus, _) in SETUPS.items():
                port = free_port()
                procs[name] = (launch(TARGET, port, "workers-" + name.replace(" ", "").replace(",", "-"),
                                      "--workers", str(workers), env=bench.env, cpus=cpus), port)
            for name, (proc, port) in procs.items():
                wait_port(port, proc, name)
                deadline = time.monotonic() + 30
                while len(serving_pids(proc)) < SETUPS[name][0] or not post_ok(port):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{name} did not get ready")
                    time.sleep(0.1)
            time.sleep(1.0)  # every worker of `2 workers` bound and idle
            for name, (_proc, port) in procs.items():  # warm-up, not counted
                bench.warm(f"http://127.0.0.1:{port}/mcp", args, cpus=SETUPS[name][2])
            for name in rotations(list(procs), args.rounds):
                proc, port = procs[name]
                runs[name].append(bench.run(f"http://127.0.0.1:{port}/mcp", args, cpus=SETUPS[name][2],
                                            watch={"server": serving_pids(proc)}))
        finally:
            for proc, _ in procs.values():
                stop(proc)
    load_after = load()
    summary = summarize(runs, ("rps", "p50_ms", "p99_ms", "server_cores", "wrk_cores"))
    for n, rs in runs.items():
        summary[n]["rps_per_server_core"] = median([float(x["rps"]) / max(float(x["server_cores"]), 1e-9)
                                                    for x in rs])
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
