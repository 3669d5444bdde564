"""The server core alone: `Core.prepare` + `Core.execute` per request, no transport.

    python benchmarks/core_path.py seq aecho 20000 time    # CPU µs per request (best of 5)
    python benchmarks/core_path.py conc echo 20000 time    # 64 requests at a time
    valgrind --tool=callgrind python benchmarks/core_path.py seq aecho 1280   # and 256:
        instructions per request = (total(1280) - total(256)) / 1024

Each request is one `orjson.loads` of the body `benchmarks/inproc.py` sends for the
case, then `server.prepare(message)` and `await server.execute(prepared, io)` with a
no-op `RequestIO` that carries the loop (as the HTTP transport's does). `seq` runs
requests one after another; `conc` runs them 64 at a time (`asyncio.gather`), where the
worker hop of a sync tool batches its wake-ups. Cases and the server are inproc's.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import inproc


class NoopIO:
    """A `RequestIO` that drops notifications and holds the running loop."""

    __slots__ = ("loop",)
    subject = None
    ask = None
    close_stream = None

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def emit(self, message: dict[str, Any], /) -> None:
        return None


async def seq(core: Any, case: str, n: int) -> None:
    import orjson

    body = inproc.request_body(case)
    io = NoopIO(asyncio.get_running_loop())
    prepare, execute, loads = core.prepare, core.execute, orjson.loads
    response: Any = None
    for _ in range(n):
        response = await execute(prepare(loads(body)), io)
    if "result" not in response or "isError" in response["result"]:
        raise RuntimeError(response)


async def conc(core: Any, case: str, n: int, width: int = 64) -> None:
    import orjson

    body = inproc.request_body(case)
    io = NoopIO(asyncio.get_running_loop())
    prepare, execute, loads = core.prepare, core.execute, orjson.loads

    async def one() -> Any:
        return await execute(prepare(loads(body)), io)

    responses: list[Any] = []
    for _ in range(max(1, n // width)):
        responses = await asyncio.gather(*[one() for _ in range(width)])
    if "result" not in responses[0]:
        raise RuntimeError(responses[0])


def main() -> None:
    mode, case, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    loop = inproc.new_loop("uvloop")
    asyncio.set_event_loop(loop)
    server = inproc.build_server()
    gc.collect()
    gc.freeze()
    run = seq if mode == "seq" else conc
    loop.run_until_complete(run(server, case, 128))  # warm-up
    if len(sys.argv) > 4:
        best = float("inf")
        for _ in range(5):
            t0 = time.process_time()
            loop.run_until_complete(run(server, case, n))
            best = min(best, time.process_time() - t0)
        print(f"{mode} {case} {best / n * 1e6:.2f} µs CPU per request")
    else:
        loop.run_until_complete(run(server, case, n))


if __name__ == "__main__":
    main()
