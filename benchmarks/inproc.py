"""In-process cost of one `tools/call` through the guarded ASGI app, with no HTTP server.

    python benchmarks/inproc.py                       # CPU µs per request, per case
    python benchmarks/inproc.py --profile             # cProfile: calls and time per request
    python benchmarks/inproc.py --stages              # each stage of the request path alone
    python benchmarks/inproc.py --callgrind           # instructions per request (valgrind)
    python benchmarks/inproc.py --compare /other/src  # A/B: this tree vs another src/ dir

The app is `nimblemcp.serving.asgi_app(server, freeze_gc=True)`, the one `nimblemcp run
--transport http` serves (security middleware, the MCP endpoint, the legacy leg
plugged in, health routes), started through its ASGI lifespan. Each request is a fresh
scope with the headers a real client sends (Host, Content-Type, Accept, Content-Length,
MCP-Protocol-Version, Mcp-Method, Mcp-Name), a body message, and a `send` that keeps
what it gets: what an HTTP server hands the app, without the HTTP server. Requests run
one after another on one event loop (uvloop when installed, as under uvicorn); the time
is `time.process_time()` (every thread of the process: the worker-thread hop of a sync
tool counts) over the whole batch, minus nothing: the harness's own share (building
the scope, the receive and send callables) is shown on its own row, `harness`, measured
around an app that only reads the body and sends a canned answer.

Cases (each a different path, not only `echo`):
- `echo`: `def echo(text: str) -> str`, a sync tool: the worker-thread hop.
- `aecho`: the same as `async def`: no hop.
- `add`: `def add(a: int, b: int, scale: float = 1.0) -> int`, sync, with structured
  output (wrapped `{"result": ...}`, checked against its outputSchema).
- `discover`: `server/discover`, no tool at all.

`--compare SRC` runs the same cases against another checkout's `src/` (its own
PYTHONPATH) in interleaved rounds, each round a fresh process per side, and prints
the medians and the ratio. `--callgrind` runs the batch under `valgrind
--tool=callgrind` at two sizes and reports the difference per request: instruction
counts do not move when the machine is busy, timings do.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "nimblemcp-bench", "version": "1.0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
CASES: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    # case -> method, tool name, params (without _meta)
    "echo": ("tools/call", "echo", {"name": "echo", "arguments": {"text": "hello"}}),
    "aecho": ("tools/call", "aecho", {"name": "aecho", "arguments": {"text": "hello"}}),
    "add": ("tools/call", "add", {"name": "add", "arguments": {"a": 2, "b": 40, "scale": 1.5}}),
    "discover": ("server/discover", None, {}),
}


def build_server() -> Any:
    from nimblemcp import Server

    server = Server("inproc", "1.0.0")

    @server.tool
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    @server.tool
    async def aecho(text: str) -> str:
        """Echo the text back, from an async tool."""
        return text

    @server.tool
    def add(a: int, b: int, scale: float = 1.0) -> int:
        """Add two numbers and scale the sum."""
        return int((a + b) * scale)

    return server


def request_body(case: str, rid: int = 1) -> bytes:
    method, _, params = CASES[case]
    msg = {"jsonrpc": "2.0", "id": rid, "method": method, "params": {**params, "_meta": META}}
    return json.dumps(msg, separators=(",", ":")).encode()


def headers_for(case: str, body: bytes) -> list[tuple[bytes, bytes]]:
    method, name, _ = CASES[case]
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", VERSION.encode()),
        (b"mcp-method", method.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    if name is not None:
        headers.insert(5, (b"mcp-name", name.encode()))
    return headers


class _Never:
    """`receive` after the body: an HTTP server parks the caller until a disconnect."""

    async def wait(self) -> dict[str, Any]:
        await asyncio.get_running_loop().create_future()
        raise AssertionError("unreachable")


class _Sent(list):  # type: ignore[type-arg]
    async def append_async(self, message: Any) -> None:
        self.append(message)


class _Answers(_Sent):
    """`--serve-as engine`: what `_Offer.answer` was given, kept as `send` keeps messages."""

    def answer(self, status: int, body: bytes) -> None:
        self.append({"type": "http.response.start", "status": status})
        self.append({"type": "http.response.body", "body": body})


class _Offer:
    """`--serve-as engine`: what nimblemcp's engine offers the app under
    `scope["extensions"]["nimblemcp.engine"]` (`transports.h1.engine.EngineExtension`):
    its loop, and `answer(send, status, body)` for the very `send` it handed the app.
    Framing and writing the answer are the server's work, not counted here, as uvicorn's
    work on two ASGI messages is not in ASGI mode."""

    __slots__ = ("loop", "send", "sent")

    def answer(self, send: Any, status: int, body: bytes) -> bool:
        if send is not self.send:
            return False
        self.sent.answer(status, body)
        return True


# The extension nimblemcp's engine offers (`transports._asgi.ENGINE`), spelled out: a
# tree from before the engine ignores it.
ENGINE = "nimblemcp.engine"
SERVE_AS = "asgi"  # or "engine": set by --serve-as


async def canned(scope: Any, receive: Any, send: Any) -> None:
    """The harness alone: read the body, answer a fixed result."""
    message = await receive()
    del message
    extensions = scope.get("extensions")
    offer = extensions.get(ENGINE) if extensions else None
    if offer is not None and offer.answer(send, 200, b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}'):
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"55")]})
    await send({"type": "http.response.body", "body": b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}'})


async def start(app: Any) -> None:
    messages = [{"type": "lifespan.startup"}]
    out: list[Any] = []

    async def receive() -> Any:
        if messages:
            return messages.pop()
        await asyncio.get_running_loop().create_future()

    async def send(message: Any) -> None:
        out.append(message)

    task = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send))
    while not out:
        await asyncio.sleep(0)
    if out[0]["type"] != "lifespan.startup.complete":
        raise RuntimeError(out)
    task.cancel()


def make_app() -> Any:
    from nimblemcp.serving import asgi_app

    return asgi_app(build_server(), freeze_gc=True)


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError:
            return asyncio.new_event_loop()
        return uvloop.new_event_loop()  # type: ignore[no-any-return]
    return asyncio.new_event_loop()


async def drive(app: Any, case: str, n: int, check: bool = True) -> list[Any]:
    """`n` sequential requests; returns the last response's messages."""
    body = request_body(case)
    headers = headers_for(case, body)
    never = _Never()
    sent: Any = _Sent()
    engine = SERVE_AS == "engine"
    offer = _Offer()
    offer.loop = asyncio.get_running_loop()
    for _ in range(n):
        scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 50000), "scheme": "http",
            "method": "POST", "root_path": "", "path": "/mcp", "raw_path": b"/mcp",
            "query_string": b"", "headers": list(headers), "state": {},
        }
        first = [True]

        async def receive(first: list[bool] = first) -> dict[str, Any]:
            if first[0]:
                first[0] = False
                return {"type": "http.request", "body": body, "more_body": False}
            return await never.wait()

        if engine:
            offer.sent = sent = _Answers()
            offer.send = send = sent.append_async  # the very object handed as `send`
            scope["extensions"] = {ENGINE: offer}
            await app(scope, receive, send)
        else:
            sent = _Sent()
            await app(scope, receive, sent.append_async)
    if check and app is not canned:
        status = sent[0]["status"]
        out = b"".join(m.get("body", b"") for m in sent[1:])
        if status != 200 or b'"result"' not in out or b'"isError"' in out:
            raise RuntimeError(f"{case}: HTTP {status}: {out[:400]!r}")
    return list(sent)


def measure(cases: list[str], n: int, loop_kind: str, repeat: int = 3) -> dict[str, float]:
    """CPU µs per request for each case (best of `repeat` batches: the least disturbed)."""
    loop = new_loop(loop_kind)
    asyncio.set_event_loop(loop)
    app = make_app()
    loop.run_until_complete(start(app))
    out: dict[str, float] = {}
    for case in ["harness", *cases]:
        target = canned if case == "harness" else app
        which = "aecho" if case == "harness" else case
        loop.run_until_complete(drive(target, which, min(n, 500)))  # warm-up
        best = float("inf")
        for _ in range(repeat):
            t0 = time.process_time()
            loop.run_until_complete(drive(target, which, n, check=False))
            best = min(best, time.process_time() - t0)
        loop.run_until_complete(drive(target, which, 1))  # still answering right
        out[case] = best / n * 1e6
    loop.close()
    return out


def profile(case: str, n: int, loop_kind: str, top: int) -> None:
    import cProfile
    import pstats

    loop = new_loop(loop_kind)
    asyncio.set_event_loop(loop)
    app = make_app()
    loop.run_until_complete(start(app))
    loop.run_until_complete(drive(app, case, 500))
    prof = cProfile.Profile()
    prof.enable()
    loop.run_until_complete(drive(app, case, n, check=False))
    prof.disable()
    stats = pstats.Stats(prof)
    total_calls = stats.total_calls  # type: ignore[attr-defined]
    print(f"{case}: {total_calls / n:.1f} Python-level calls per request (cProfile, {n} requests)")
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(file).name}:{line}({fn})" if line else fn
        rows.append((tt, nc / n, ct, where))
    rows.sort(reverse=True)
    print(f"{'tottime µs/req':>14} {'calls/req':>9} {'cumtime µs/req':>14}  function")
    for tt, calls, ct, where in rows[:top]:
        print(f"{tt / n * 1e6:14.2f} {calls:9.2f} {ct / n * 1e6:14.2f}  {where}")


# -- stages, each alone ----------------------------------------------------------------

STAGES = ("security", "headers", "decode", "http-checks", "prepare", "execute", "tool", "exchange",
          "encode", "respond", "next-pass")
STAGE_NAMES = {
    "security": "security middleware: Host/Origin, header count/size, Content-Length limit",
    "headers": "endpoint header view (from the guard's dict), Content-Type and Accept checks",
    "decode": "JSON decode with the depth guard, JSON-RPC shape (classify)",
    "http-checks": "headers against the body: version, method, name, Mcp-Param-*",
    "prepare": "_meta check, version, method table, capability gate (Core.prepare)",
    "execute": "Core.execute: Context, dispatch, tool call, result shaping, response",
    "tool": "  of which the tool call: arguments validated, function run, result built",
    "exchange": "the request's Exchange (RequestIO), disconnect watch entry, finish",
    "encode": "JSON encode (encode_reply)",
    "respond": "the two response messages (http.response.start, .body)",
    "next-pass": "one pass of the event loop before answering",
}


def stage_table(case: str, loop: asyncio.AbstractEventLoop, app: Any) -> dict[str, tuple[bool, Any]]:
    """stage -> (is async, a no-argument callable running it once with the case's inputs)."""
    from nimblemcp import jsonrpc
    from nimblemcp.transports.http import _asgi
    from nimblemcp.transports.http import app as http
    from nimblemcp.transports.http._exchange import Exchange
    from nimblemcp.transports.http._headers import RequestHeaders, check_standard

    body = request_body(case)
    headers = headers_for(case, body)
    mcp = app.app  # the endpoint inside SecurityMiddleware (and any auth layer)
    while not hasattr(mcp, "core"):
        mcp = mcp.app
    core = mcp.core
    msg = jsonrpc.decode_request(body)
    h = RequestHeaders(headers)
    prepared = core.prepare(msg)
    watchlist = mcp._watchlist(loop)

    async def null_app(scope: Any, receive: Any, send: Any) -> None:
        return None

    guard = type(app)(null_app, app.security)
    scope = {"type": "http", "method": "POST", "path": "/mcp", "root_path": "", "headers": headers}

    async def nothing(message: Any = None) -> Any:
        return None

    found = dict(headers)  # built by the security middleware, handed to the endpoint

    def header_checks() -> Any:
        h = RequestHeaders.of(found)
        value = h.found.get(b"content-type")
        if value != b"application/json" and not http._is_json(value):
            return False
        value = found.get(b"accept")
        return _asgi.ACCEPT_VERDICTS.get(value) is True or _asgi.accepts_json_and_sse(value)

    def http_checks() -> None:
        params = msg["params"]
        check_standard(h, msg["method"], params, params["_meta"][PROTOCOL_VERSION])
        if prepared.method == "tools/call":
            mcp.param_rules.check(h, params)

    class _IO:
        __slots__ = ()
        subject = None
        ask = None
        close_stream = None
        loop = asyncio.get_event_loop()

        def emit(self, message: Any) -> None:
            pass

    io = _IO()
    response = loop.run_until_complete(core.execute(prepared, io))
    encoded = jsonrpc.encode_reply(response)

    from nimblemcp.server._context import Context

    tool = core.tools.get(prepared.params.get("name", ""))
    ctx = Context(core, prepared, io, loop)
    arguments = prepared.params.get("arguments", {})

    def exchange() -> None:
        ex = Exchange(loop, nothing, nothing, 15.0, None, scope)
        watchlist.add(ex)
        ex.finish()

    async def respond() -> None:
        await nothing({"type": "http.response.start", "status": 200,
                       "headers": [_asgi.JSON, (b"content-length", b"%d" % len(encoded))]})
        await nothing({"type": "http.response.body", "body": body})

    @types.coroutine
    def next_pass() -> Any:
        yield

    table: dict[str, tuple[bool, Any]] = {
        "security": (True, lambda: guard(scope, nothing, nothing)),
        "headers": (False, header_checks),
        "decode": (False, lambda: jsonrpc.classify(jsonrpc.decode_request(body))),
        "http-checks": (False, http_checks),
        "prepare": (False, lambda: core.prepare(msg)),
        "execute": (True, lambda: core.execute(prepared, io)),
        "exchange": (False, exchange),
        "encode": (False, lambda: jsonrpc.encode_reply(response)),
        "respond": (True, respond),
        "next-pass": (True, next_pass),
    }
    if tool is not None:
        table["tool"] = (True, lambda: tool.call(ctx, arguments))
    return table


PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"


def run_stage(loop: asyncio.AbstractEventLoop, is_async: bool, fn: Any, n: int) -> None:
    if is_async:
        async def batch() -> None:
            for _ in range(n):
                await fn()

        loop.run_until_complete(batch())
    else:
        for _ in range(n):
            fn()


def stages(case: str, n: int, loop_kind: str) -> dict[str, float]:
    """CPU µs of each stage of one request, timed alone over `n` repetitions with the
    case's real inputs (best of 3). The sum is below the whole request: what joins the
    stages (the coroutine frames, the body read, the body deadline) is the rest."""
    loop = new_loop(loop_kind)
    asyncio.set_event_loop(loop)
    app = make_app()
    loop.run_until_complete(start(app))
    out: dict[str, float] = {}
    for name, (is_async, fn) in stage_table(case, loop, app).items():
        run_stage(loop, is_async, fn, min(n, 500))
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            run_stage(loop, is_async, fn, n)
            best = min(best, time.process_time() - t0)
        out[name] = best / n * 1e6
    loop.close()
    return out


# -- A/B and callgrind drivers ---------------------------------------------------------------


def child(src: Path, args: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, __file__, "--json", *args], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def compare(other: Path, cases: list[str], n: int, rounds: int, loop_kind: str) -> None:
    sides = {"this": SRC, "other": other}
    results: dict[str, dict[str, list[float]]] = {s: {} for s in sides}
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for side in order:
            got = child(sides[side], ["--cases", ",".join(cases), "--requests", str(n), "--loop", loop_kind,
                                          "--serve-as", SERVE_AS])
            for case, us in got.items():
                results[side].setdefault(case, []).append(us)
    print(f"this = {SRC}\nother = {other}\n{rounds} interleaved rounds, {n} requests per case, loop {loop_kind}, serve-as {SERVE_AS}")
    print(f"{'case':10} {'this µs':>9} {'other µs':>9} {'this/other':>10}")
    for case in ["harness", *cases]:
        a = statistics.median(results["this"][case])
        b = statistics.median(results["other"][case])
        print(f"{case:10} {a:9.2f} {b:9.2f} {a / b:10.3f}")


def callgrind(src: Path, case: str, sizes: tuple[int, int], loop_kind: str, stage: str | None = None) -> float:
    """Instructions per request: the difference of two batch sizes under callgrind."""
    counts = []
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            outfile = Path(tmp) / "cg.out"
            env = dict(os.environ, PYTHONPATH=str(src))
            subprocess.run(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={outfile}",
                 sys.executable, __file__, "--json", "--once", "--cases", case, "--requests", str(size),
                 "--loop", loop_kind, "--serve-as", SERVE_AS, *(["--stage", stage] if stage else [])],
                env=env, check=True, capture_output=True)
            text = outfile.read_text(errors="replace")
            m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            assert m, "no totals in the callgrind output"
            counts.append(int(m.group(1)))
    return (counts[1] - counts[0]) / (sizes[1] - sizes[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--stages", action="store_true")
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--compare", type=Path, metavar="SRC")
    ap.add_argument("--trees", type=Path, nargs="*", metavar="SRC",
                    help="--callgrind: the src/ trees to count (default: this one)")
    ap.add_argument("--serve-as", choices=["asgi", "engine"], default="asgi",
                    help="the server interface: plain ASGI, as uvicorn or any ASGI server hands it "
                         "(default), or nimblemcp's engine's (its scope extension: the loop and "
                         "the one-step answer), as `nimblemcp run --engine nimblemcp` serves")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    global SERVE_AS
    SERVE_AS = args.serve_as
    if args.once:  # one batch, nothing else (what callgrind counts)
        loop = new_loop(args.loop)
        asyncio.set_event_loop(loop)
        app = make_app()
        loop.run_until_complete(start(app))
        if args.stage:
            table = stage_table(cases[0], loop, app)
            if args.stage in table:
                run_stage(loop, *table[args.stage], args.requests)
        elif cases[0] == "harness":
            loop.run_until_complete(drive(canned, "aecho", args.requests))
        else:
            loop.run_until_complete(drive(app, cases[0], args.requests))
        return
    if args.compare:
        compare(args.compare.resolve(), cases, args.requests, args.rounds, args.loop)
        return
    if args.callgrind:
        for src in args.trees or [SRC]:
            for case in cases:
                if args.stages:
                    for stage in STAGES:
                        per = callgrind(src.resolve(), case, (500, 2500), args.loop, stage)
                        print(f"{src}  {case:10} {per:12,.0f}  {STAGE_NAMES[stage]}", flush=True)
                    continue
                per = callgrind(src.resolve(), case, (500, 2500), args.loop)
                print(f"{src}  {case:10} {per:12,.0f} instructions per request (serve-as {SERVE_AS})", flush=True)
        return
    if args.profile:
        for case in cases:
            profile(case, args.requests, args.loop, args.top)
        return
    if args.stages:
        for case in cases:
            print(f"{case}:")
            for stage, us in stages(case, args.requests, args.loop).items():
                print(f"  {us:7.2f} µs  {STAGE_NAMES[stage]}")
        return
    got = measure(cases, args.requests, args.loop)
    if args.json:
        print(json.dumps(got))
        return
    gc.collect()
    print(f"CPU µs per request ({args.requests} requests per case, best of 3 batches, loop {args.loop}, serve-as {SERVE_AS})")
    for case, us in got.items():
        print(f"  {case:10} {us:8.2f}")


if __name__ == "__main__":
    main()
