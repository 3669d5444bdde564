"""nimblemcp: the listen fan-out benchmark's server (benchmarks/listen_fanout.py).

    nimblemcp run nimble_listen_server.py --transport http --redis-url redis://...

Listeners subscribe to `bench://t/<k>`; the `burst` tool publishes `n` resource-updated
events round-robin over `topics` such URIs, each URI carrying its sequence number and its
publish time (`time.monotonic_ns()`, the same clock in every process of this machine):
`bench://t/<k>/<seq>/<ns>`, beneath `bench://t/<k>`, so it reaches that topic's listeners.
`BENCH_LISTEN_QUEUE` sets how many events a listener may fall behind before it is ended
(`Server(listen=ListenOptions(queue=...))`, default 256).
"""

import asyncio
import os
import time

from nimblemcp import ListenOptions, Server

server = Server("bench-listen", "1.0.0", listen=ListenOptions(queue=int(os.environ.get("BENCH_LISTEN_QUEUE", "256"))))


@server.resource("bench://t")
def topics() -> str:
    """The parent of every topic URI."""
    return "topics"


@server.tool
async def burst(n: int, topics: int, rate: float = 0.0) -> int:
    """Publish `n` resource-updated events over `topics` URIs: all at once (`rate` 0), or
    paced at `rate` events per second."""
    clock = time.monotonic_ns
    start = time.monotonic()
    for i in range(n):
        if rate > 0:
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        server.notify_resource_updated(f"bench://t/{i % topics}/{i}/{clock()}")
    return n
