"""The official SDK (mcp 2.3.0) high-level Client: connect, then sequential tools/call echo. Prints one JSON line.

    python mcp_client.py URL CALLS
"""

import time

T0 = time.perf_counter()  # before the library's imports: the first call pays for them

import asyncio  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

from mcp import Client  # noqa: E402


async def main(url: str, calls: int) -> None:
    async with Client(url) as client:
        await client.call_tool("echo", {"text": "hello"})
        first = time.perf_counter() - T0
        for _ in range(200):  # warm-up
            await client.call_tool("echo", {"text": "hello"})
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            result = await client.call_tool("echo", {"text": "hello"})
            times.append(time.perf_counter() - t)
        assert "hello" in str(result)
    print(json.dumps({"first_ms": first * 1e3, "times_us": [x * 1e6 for x in times]}))


asyncio.run(main(sys.argv[1], int(sys.argv[2])))
