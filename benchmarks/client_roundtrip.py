"""Client round trip: each library's own high-level Client calls one shared server.

    python benchmarks/client_roundtrip.py [--calls 2000] [--rounds 5] [--base SRC]

Over HTTP the server is nimblemcp's `async def echo` under uvicorn (uvloop + httptools),
so the server's share is small and the same for every client. Over stdio each client
spawns its own copy of that server (`python nimble_async_server.py`, nimblemcp's venv).
`--base SRC` adds a "nimblemcp-base" row: the same client run with another source tree
first on `PYTHONPATH` (an A/B against an older checkout: `git archive` it to a folder). Each client runs in its own
process from its own venv (`clients/client.py LIB`): connect, one first call (timed, with
discovery), 200 warm-up calls, then `--calls` sequential `tools/call echo`. Rounds are
interleaved; the table gives medians over rounds of each round's median and p99, and
of the client process's own CPU time per call (its threads, not the server's): over
stdio the wall time per call is mostly two processes waking each other on this VM, and
the CPU column is what the client library itself costs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess

from _common import HERE, NIMBLE_PY, PEER_PY, ensure_peers, median, pct, save, say, table
from http_throughput import free_port, start, wait_ready

CLIENTS = {"nimblemcp": NIMBLE_PY, "mcp": PEER_PY, "fastmcp": PEER_PY}  # name -> interpreter


def run_client(name: str, url: str, calls: int, base: str | None = None) -> dict[str, float]:
    env = dict(os.environ, FASTMCP_SHOW_SERVER_BANNER="false", FASTMCP_LOG_LEVEL="WARNING",
               FASTMCP_CHECK_FOR_UPDATES="off")
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the peers' site-packages have their .pyc too
    lib = name
    if name == "nimblemcp-base":
        env["PYTHONPATH"], lib = str(base), "nimblemcp"
    out = subprocess.run([CLIENTS[lib], str(HERE / "clients" / "client.py"), lib, url, str(calls)], env=env,
                         capture_output=True, text=True, check=True, timeout=300).stdout
    data = json.loads(out.strip().splitlines()[-1])
    times = data["times_us"]
    return {"first_ms": data["first_ms"], "median_us": median(times), "p99_us": pct(times, 99),
            "cpu_us": data["cpu_us"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base", help="a nimblemcp source tree (its src/) for a nimblemcp-base row")
    ap.add_argument("--wires", default="http,stdio", help="http, stdio or both (comma-separated)")
    args = ap.parse_args()
    ensure_peers()
    for tree in [HERE.parent / "src", *([args.base] if args.base else [])]:  # as pip does for the peers
        subprocess.run([NIMBLE_PY, "-m", "compileall", "-q", str(tree)], check=True)
    wires = args.wires.split(",")
    port = free_port()
    server = start("client-bench-server", NIMBLE_PY, "nimble_async_server", port) if "http" in wires else None
    targets = {"http": f"http://127.0.0.1:{port}/mcp",
               "stdio": f"stdio:{NIMBLE_PY}:{HERE / 'servers' / 'nimble_async_server.py'}"}
    names = list(CLIENTS) + (["nimblemcp-base"] if args.base else [])
    runs: dict[tuple[str, str], list[dict[str, float]]] = {(w, n): [] for w in wires for n in names}
    try:
        if server is not None:
            wait_ready("client-bench-server", server, port)
        for r in range(args.rounds):
            for wire in wires:
                for name in names[r % len(names):] + names[:r % len(names)]:
                    runs[(wire, name)].append(run_client(name, targets[wire], args.calls, args.base))
            say(f"round {r + 1}/{args.rounds} done")
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
    rows, data = [], {}
    for wire in wires:
        base = median([x["median_us"] for x in runs[(wire, "mcp")]])
        base_cpu = median([x["cpu_us"] for x in runs[(wire, "mcp")]])
        for name in names:
            got = runs[(wire, name)]
            med = median([x["median_us"] for x in got])
            p99 = median([x["p99_us"] for x in got])
            first = median([x["first_ms"] for x in got])
            cpu = median([x["cpu_us"] for x in got])
            data[f"{wire}/{name}"] = {"median_us": med, "p99_us": p99, "first_call_ms": first, "cpu_us": cpu}
            rows.append([wire, name, f"{med:.0f}", f"{p99:.0f}", f"{first:.0f}", f"{base / med:.2f}x",
                         f"{cpu:.0f}", f"{base_cpu / cpu:.2f}x"])
    text = (f"Client round trip, sequential tools/call echo against a nimblemcp server "
            f"({args.calls} calls per run, {args.rounds} interleaved rounds)\n\n"
            + table(["wire", "client", "median us", "p99 us", "first call ms", "speed vs mcp",
                     "client CPU us/call", "CPU vs mcp"], rows))
    say(text)
    save("client_roundtrip", text, data)


if __name__ == "__main__":
    main()
