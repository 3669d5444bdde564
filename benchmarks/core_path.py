"""The server core alone: `Core.prepare` + `Core.execute` per request, no transport.

    python benchmarks/core_path.py seq aecho 20000 time    # CPU µs per request (best of 5)
    python benchmarks/core_path.py conc echo 20000 time    # 64 requests at a time
    python benchmarks/core_path.py callgrind aecho prompt  # instructions per request
    valgrind --tool=callgrind python benchmarks/core_path.py seq aecho 1280   # and 256:
        instructions per request = (total(1280) - total(256)) / 1024

Each request is one `orjson.loads` of the body `benchmarks/inproc.py` sends for the
case, then `server.prepare(message)` and `await server.execute(prepared, io)` with a
no-op `RequestIO` that carries the loop (as the HTTP transport's does). `seq` runs
requests one after another; `conc` runs them 64 at a time (`asyncio.gather`), where the
worker hop of a sync tool batches its wake-ups. The tool cases and the server are
inproc's; this script adds a prompt and two resources to that server:
- `prompt`: `prompts/get` of `async def greet(name: str) -> str` (one message);
- `sprompt`: the same prompt as a sync function (`sgreet`: the worker-thread hop);
- `resource`: `resources/read` of a fixed URI, `async def readme() -> str`;
- `template`: `resources/read` of `file:///{name}`, `async def file(name: str) -> str`;
- `list`: `tools/list` (the tools, one page);
- `cecho`: `tools/call` of `async def cecho(text: str, ctx: Context) -> str`;
- `cprompt`: `prompts/get` of `async def cgreet(name: str, ctx: Context) -> str`.

`callgrind CASE...` runs `seq` under `valgrind --tool=callgrind` (PYTHONHASHSEED=0) and
prints instructions per request: one run of 2048 requests, counted from `os.getppid()`
just before them to `os.getpgrp()` just after (callgrind's `--zero-before` and
`--dump-before` on CPython's `os_getppid`/`os_getpgrp`); where those symbols cannot be
found (a stripped build), the difference of two runs of 256 and 2304 requests. `--src
DIR` puts another checkout's `src/` first on the path (a "before" count).
"""

from __future__ import annotations

import asyncio
import gc
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import inproc

from nimblemcp import Context  # the annotation of two cases' functions (postponed: read by name)

# case -> method, params (without _meta): the cases this script adds to inproc's.
EXTRA: dict[str, tuple[str, dict[str, Any]]] = {
    "prompt": ("prompts/get", {"name": "greet", "arguments": {"name": "Ada"}}),
    "sprompt": ("prompts/get", {"name": "sgreet", "arguments": {"name": "Ada"}}),
    "resource": ("resources/read", {"uri": "docs://readme"}),
    "template": ("resources/read", {"uri": "file:///notes.txt"}),
    "list": ("tools/list", {}),
    "cecho": ("tools/call", {"name": "cecho", "arguments": {"text": "hello"}}),
    "cprompt": ("prompts/get", {"name": "cgreet", "arguments": {"name": "Ada"}}),
}


def request_body(case: str) -> bytes:
    if case not in EXTRA:
        return inproc.request_body(case)
    import json

    method, params = EXTRA[case]
    msg = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": inproc.META}}
    return json.dumps(msg, separators=(",", ":")).encode()


def build_server() -> Any:
    server = inproc.build_server()

    @server.tool
    async def cecho(text: str, ctx: Context) -> str:
        """Echo the text back, from a tool that takes a Context."""
        return text

    @server.prompt
    async def cgreet(name: str, ctx: Context) -> str:
        """Greet someone, from a prompt that takes a Context."""
        return f"Hello, {name}!"

    @server.prompt
    async def greet(name: str) -> str:
        """Greet someone."""
        return f"Hello, {name}!"

    @server.prompt
    def sgreet(name: str) -> str:
        """Greet someone, from a sync function."""
        return f"Hello, {name}!"

    @server.resource("docs://readme")
    async def readme() -> str:
        """The readme."""
        return "read me"

    @server.resource("file:///{name}")
    async def file(name: str) -> str:
        """A file by name."""
        return name

    return server


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

    body = request_body(case)
    io = NoopIO(asyncio.get_running_loop())
    prepare, execute, loads = core.prepare, core.execute, orjson.loads
    response: Any = None
    for _ in range(n):
        response = await execute(prepare(loads(body)), io)
    if "result" not in response or "isError" in response["result"]:
        raise RuntimeError(response)


async def conc(core: Any, case: str, n: int, width: int = 64) -> None:
    import orjson

    body = request_body(case)
    io = NoopIO(asyncio.get_running_loop())
    prepare, execute, loads = core.prepare, core.execute, orjson.loads

    async def one() -> Any:
        return await execute(prepare(loads(body)), io)

    responses: list[Any] = []
    for _ in range(max(1, n // width)):
        responses = await asyncio.gather(*[one() for _ in range(width)])
    if "result" not in responses[0]:
        raise RuntimeError(responses[0])


def callgrind(case: str, src: str | None, sizes: tuple[int, int] = (256, 2304)) -> float:
    """Instructions per request under callgrind (see the module's docstring)."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    if src:
        env["PYTHONPATH"] = src
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        n = sizes[1] - sizes[0]
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--zero-before=os_getppid",
             "--dump-before=os_getpgrp", sys.executable, __file__, "seq", case, str(n), "--marks"],
            env=env, check=True, capture_output=True)
        part = Path(f"{out}.1")
        if part.exists():  # the marked batch alone
            m = re.search(r"^(?:summary|totals): (\d+)", part.read_text(errors="replace"), re.M)
            assert m, "no totals in the callgrind output"
            return int(m.group(1)) / n
    counts = []
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "cg.out"
            subprocess.run(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                 sys.executable, __file__, "seq", case, str(size)],
                env=env, check=True, capture_output=True)
            m = re.search(r"^(?:summary|totals): (\d+)", out.read_text(errors="replace"), re.M)
            assert m, "no totals in the callgrind output"
            counts.append(int(m.group(1)))
    return (counts[1] - counts[0]) / (sizes[1] - sizes[0])


def main() -> None:
    if sys.argv[1] == "callgrind":
        args = sys.argv[2:]
        src = None
        if "--src" in args:
            i = args.index("--src")
            src = args[i + 1]
            del args[i : i + 2]
        for case in args:
            print(f"{case:10} {callgrind(case, src):10,.0f} instructions per request", flush=True)
        return
    mode, case, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    loop = inproc.new_loop("uvloop")
    asyncio.set_event_loop(loop)
    server = build_server()
    gc.collect()
    gc.freeze()
    run = seq if mode == "seq" else conc
    loop.run_until_complete(run(server, case, 128))  # warm-up
    if sys.argv[4:] == ["--marks"]:  # counted between the two marks (see `callgrind`)
        os.getppid()
        loop.run_until_complete(run(server, case, n))
        os.getpgrp()
    elif len(sys.argv) > 4:
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
