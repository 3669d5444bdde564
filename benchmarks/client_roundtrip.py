"""Client round trip: each library's own high-level Client calls one shared server.

    python benchmarks/client_roundtrip.py [--calls 2000] [--rounds 5]

The server is nimblemcp's `async def echo` under uvicorn (uvloop + httptools), so the
server's share is small and the same for every client. Each client runs in its own
process from its own venv (`clients/client.py LIB`): connect, one first call (timed, with
discovery), 200 warm-up calls, then `--calls` sequential `tools/call echo`. Rounds are
interleaved; the table gives medians over rounds of each round's median and p99.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess

from _common import HERE, NIMBLE_PY, PEER_PY, ensure_peers, median, pct, save, say, table
from http_throughput import free_port, start, wait_ready

CLIENTS = {"nimblemcp": NIMBLE_PY, "mcp": PEER_PY, "fastmcp": PEER_PY}  # name -> interpreter


def run_client(name: str, url: str, calls: int) -> dict[str, float]:
    env = dict(os.environ, FASTMCP_SHOW_SERVER_BANNER="false", FASTMCP_LOG_LEVEL="WARNING",
               FASTMCP_CHECK_FOR_UPDATES="off")
    env.pop("PYTHONPATH", None)
    out = subprocess.run([CLIENTS[name], str(HERE / "clients" / "client.py"), name, url, str(calls)], env=env,
                         capture_output=True, text=True, check=True, timeout=300).stdout
    data = json.loads(out.strip().splitlines()[-1])
    times = data["times_us"]
    return {"first_ms": data["first_ms"], "median_us": median(times), "p99_us": pct(times, 99)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    ensure_peers()
    port = free_port()
    server = start("client-bench-server", NIMBLE_PY, "nimble_async_server", port)
    try:
        wait_ready("client-bench-server", server, port)
        url = f"http://127.0.0.1:{port}/mcp"
        names = list(CLIENTS)
        runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                runs[name].append(run_client(name, url, args.calls))
            say(f"round {r + 1}/{args.rounds} done")
    finally:
        server.terminate()
        server.wait(10)
    base = median([x["median_us"] for x in runs["mcp"]])
    rows, data = [], {}
    for name in names:
        med = median([x["median_us"] for x in runs[name]])
        p99 = median([x["p99_us"] for x in runs[name]])
        first = median([x["first_ms"] for x in runs[name]])
        data[name] = {"median_us": med, "p99_us": p99, "first_call_ms": first}
        rows.append([name, f"{med:.0f}", f"{p99:.0f}", f"{first:.0f}", f"{base / med:.2f}x"])
    text = (f"Client round trip over Streamable HTTP, sequential tools/call echo against one "
            f"nimblemcp server ({args.calls} calls per run, {args.rounds} interleaved rounds)\n\n"
            + table(["client", "median us", "p99 us", "first call ms", "speed vs mcp"], rows))
    say(text)
    save("client_roundtrip", text, data)


if __name__ == "__main__":
    main()
