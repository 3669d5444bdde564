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
import subprocess
import time

from _common import save, say, table
from _fleet import (
    SERVERS_DIR,
    Nginx,
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
    wrk_options(ap)
    ap.add_argument("--nginx-workers", type=int, default=1)
    args = ap.parse_args()
    bench = WrkBench({"NIMBLEMCP_ALLOWED_HOSTS": "nimblemcp,nimblemcp_sticky,bench_single"})
    load_before = bench.load_before
    instances: list[tuple[subprocess.Popen[bytes], int]] = []
    nginx: Nginx | None = None
    runs: dict[str, list[dict]] = {}
    with bench:
        try:
            for name in "ABC":
                port = free_port()
                instances.append((launch(TARGET, port, f"pool-{name}", env={**bench.env, "INSTANCE": name}), port))
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
                bench.warm(url, args)
            for name in rotations(list(routes), args.rounds):
                url, serving = routes[name]
                watch = {"server": [pid for proc, _ in serving for pid in serving_pids(proc)],
                         "nginx": nginx.pids() if "nginx" in name else []}
                runs[name].append(bench.run(url, args, watch=watch))
        finally:
            if nginx is not None:
                nginx.close()
            for proc, _ in instances:
                stop(proc)
    load_after = load()
    summary = summarize(runs, ("rps", "p50_ms", "p99_ms", "server_cores", "nginx_cores", "wrk_cores"))
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
