"""Three `nimblemcp run --transport http` instances behind nginx round-robin vs one direct.

    python benchmarks/nginx_pool.py [--rounds 5] [--duration 4] [--connections 64]

The deployment of issue 13 as a user builds it: one Redis, one state key, three instances
of `servers/nimble_server.py` (sync `echo`) started by the CLI with `--allowed-hosts` for
the upstream names, and Debian's nginx running `deploy/nginx/nimblemcp.conf` (upstream
addresses and listen port rewritten to loopback ones; 2026-07-28 traffic takes the
round-robin pool, with upstream keep-alive). Three routes, wrk on each in interleaved
rounds (medians):

- `1 direct`: wrk straight at instance A.
- `1 via nginx`: nginx in front of instance A alone (an extra server block): what the
  proxy hop costs.
- `3 via nginx`: the kit's round-robin pool over A, B and C.

Nothing is pinned: on a 2-core machine the instances, nginx and wrk all share two cores,
so three instances cannot serve more than about what two cores minus nginx and wrk leave
them. The table gives the cores each group used (CPU seconds / wall seconds from /proc and
wait4) so the figures carry over to machines with more cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

from _common import ensure_peers, median, save, say, table
from _fleet import (
    SERVERS_DIR,
    Nginx,
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
SINGLE = """
upstream bench_single {{
    server 127.0.0.1:{port};
    keepalive 32;
}}
server {{
    listen 127.0.0.1:{listen};
    location /mcp {{
        proxy_pass http://bench_single;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_buffering off;
    }}
}}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=4, help="seconds of wrk per run")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="wrk threads")
    ap.add_argument("--nginx-workers", type=int, default=1)
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk not found: apt-get update && apt-get install -y wrk")
    ensure_peers()
    load_before = load()
    redis = Redis()
    env = {"NIMBLEMCP_STATE_KEYS": state_key(), "NIMBLEMCP_REDIS_URL": redis.url,
           "NIMBLEMCP_ALLOWED_HOSTS": "nimblemcp,nimblemcp_sticky,bench_single"}
    script = wrk_script()
    instances: list[tuple[subprocess.Popen[bytes], int]] = []
    nginx: Nginx | None = None
    runs: dict[str, list[dict]] = {}
    try:
        for name in "ABC":
            port = free_port()
            instances.append((launch(TARGET, port, f"pool-{name}", env={**env, "INSTANCE": name}), port))
        for proc, port in instances:
            wait_port(port, proc)
        listen, single = free_port(), free_port()
        nginx = Nginx([p for _, p in instances], listen,
                      SINGLE.format(port=instances[0][1], listen=single), workers=args.nginx_workers)
        routes = {"1 direct": (f"http://127.0.0.1:{instances[0][1]}/mcp", instances[:1]),
                  "1 via nginx": (f"http://127.0.0.1:{single}/mcp", instances[:1]),
                  "3 via nginx": (f"http://127.0.0.1:{listen}/mcp", instances)}
        runs = {n: [] for n in routes}
        time.sleep(0.5)
        for url, _ in routes.values():  # warm-up (and upstream keep-alive), not counted
            warm = run_wrk(url, script, args.connections, 1, args.threads)
            if warm["non2xx"]:
                raise RuntimeError(f"{url}: {warm['non2xx']} non-2xx answers; see /tmp/bench-pool-*.log")
        names = list(routes)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                url, serving = routes[name]
                watch = {"server": [pid for proc, _ in serving for pid in serving_pids(proc)],
                         "nginx": nginx.pids() if "nginx" in name else []}
                runs[name].append(run_wrk(url, script, args.connections, args.duration, args.threads,
                                          watch=watch))
    finally:
        if nginx is not None:
            nginx.close()
        for proc, _ in instances:
            stop(proc)
        redis.close()
        os.unlink(script)
    load_after = load()
    summary = {}
    for n, rs in runs.items():
        summary[n] = {k: median([float(x[k]) for x in rs])
                      for k in ("rps", "p50_ms", "p99_ms", "server_cores", "nginx_cores", "wrk_cores")}
        summary[n]["non2xx"] = sum(int(x["non2xx"]) for x in rs)
        summary[n]["runs"] = rs
    base = summary["1 direct"]["rps"]
    rows = [[n, f"{s['rps']:.0f}", f"{s['p50_ms']:.2f}", f"{s['p99_ms']:.2f}", f"{s['rps'] / base:.2f}x",
             f"{s['server_cores']:.2f}", f"{s['nginx_cores']:.2f}", f"{s['wrk_cores']:.2f}", str(s["non2xx"])]
            for n, s in summary.items()]
    out = (f"3 `nimblemcp run` instances + Redis behind nginx ({args.nginx_workers} worker, "
           f"deploy/nginx/nimblemcp.conf) vs 1 direct; sync echo, wrk -t{args.threads} -c{args.connections}, "
           f"{args.rounds} interleaved rounds x {args.duration:g}s; medians. {os.cpu_count()} cores; "
           f"{load_before} before, {load_after} after.\n\n"
           + table(["route", "req/s", "p50 ms", "p99 ms", "vs 1 direct", "instance cores", "nginx cores",
                    "wrk cores", "non-2xx"], rows))
    say(out)
    save("nginx_pool", out, {"args": vars(args), "load_before": load_before, "load_after": load_after,
                             "results": summary})


if __name__ == "__main__":
    main()
