"""One library's own Client: connect, then sequential tools/call echo. Prints one JSON line.

    python client.py nimblemcp|mcp|fastmcp URL CALLS
    python client.py nimblemcp|mcp|fastmcp stdio:PYTHON:SERVER.py CALLS   (spawns the server)

Run with the library's own venv (client_roundtrip.py does). The first call is timed
from before the library is imported. `cpu_us` is this process's CPU time per timed call
(all its threads): what the library itself spends, apart from the server and the wait.
"""

import time

T0 = time.perf_counter()

import asyncio  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

LIB = sys.argv[1]
if LIB == "nimblemcp":
    from nimblemcp import Client
elif LIB == "mcp":
    from mcp import Client
elif LIB == "fastmcp":
    from fastmcp import Client
else:
    raise SystemExit(f"unknown client library {LIB!r}")


def target(spec: str):
    """The library's own way to name the server: a URL, or a stdio command."""
    if not spec.startswith("stdio:"):
        return spec
    python, script = spec[len("stdio:"):].split(":", 1)
    if LIB == "nimblemcp":
        return [python, script]
    if LIB == "mcp":
        from mcp import StdioServerParameters

        return StdioServerParameters(command=python, args=[script])
    from fastmcp.client.transports import StdioTransport

    return StdioTransport(python, [script])


async def main(url: str, calls: int) -> None:
    async with Client(target(url)) as client:
        await client.call_tool("echo", {"text": "hello"})
        first = time.perf_counter() - T0
        for _ in range(200):  # warm-up
            await client.call_tool("echo", {"text": "hello"})
        times = []
        cpu = time.process_time()  # this process only: the client's own work, not a stdio server's
        for _ in range(calls):
            t = time.perf_counter()
            result = await client.call_tool("echo", {"text": "hello"})
            times.append(time.perf_counter() - t)
        cpu = time.process_time() - cpu
        assert "hello" in str(result)
    print(json.dumps({"first_ms": first * 1e3, "times_us": [x * 1e6 for x in times], "cpu_us": cpu / calls * 1e6}))


asyncio.run(main(sys.argv[2], int(sys.argv[3])))
