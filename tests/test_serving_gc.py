"""The serving GC tuning (`transports/http/_serving_gc.py`), the one speed measure the
performance policy kept (issue 32; the numbers in benchmarks/README.md): it changes no
answer. The same requests through the guarded ASGI app, with `freeze_gc` on and off,
each in a fresh interpreter (the collector is the process's), give the same statuses
and bodies; with it on, what start-up built is frozen and the young threshold raised,
and an application that turned the collector off keeps it off."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

from nimblemcp.transports.http._serving_gc import YOUNG_GC_THRESHOLD

DRIVE = textwrap.dedent('''
    import asyncio, gc, json, sys
    from nimblemcp import Server
    from nimblemcp.serving import asgi_app

    FREEZE, OFF = sys.argv[1] == "on", sys.argv[2] == "off"
    if OFF:
        gc.set_threshold(0)
    server = Server("gc", "1.0")

    @server.tool
    def echo(text: str) -> str:
        return text

    @server.tool
    async def add(a: int, b: int) -> int:
        return a + b

    META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}
    REQUESTS = [
        ("tools/call", "echo", {"name": "echo", "arguments": {"text": "hi"}}),
        ("tools/call", "add", {"name": "add", "arguments": {"a": 2, "b": 3}}),
        ("tools/call", "add", {"name": "add", "arguments": {"a": "x"}}),
        ("tools/list", None, {}),
        ("server/discover", None, {}),
        ("tools/call", "nope", {"name": "nope"}),
    ]

    async def post(app, rid, method, name, params):
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                           "params": {**params, "_meta": META}}).encode()
        headers = [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                   (b"accept", b"application/json, text/event-stream"),
                   (b"mcp-protocol-version", b"2026-07-28"), (b"mcp-method", method.encode()),
                   (b"content-length", str(len(body)).encode())]
        if name is not None:
            headers.append((b"mcp-name", name.encode()))
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000), "scheme": "http",
                 "method": "POST", "root_path": "", "path": "/mcp", "raw_path": b"/mcp",
                 "query_string": b"", "headers": headers, "state": {}}
        done = asyncio.Event()
        sent = []

        async def receive():
            if not sent and not done.is_set():
                done.set()
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()

        async def send(message):
            sent.append(message)

        await app(scope, receive, send)
        status = sent[0]["status"]
        text = b"".join(m.get("body", b"") for m in sent[1:]).decode()
        return [status, json.loads(text)]

    async def main():
        app = asgi_app(server, freeze_gc=FREEZE)
        startup = asyncio.Queue()
        await startup.put({"type": "lifespan.startup"})
        said = []

        async def lifespan_send(message):
            said.append(message["type"])

        life = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}},
                                         startup.get, lifespan_send))
        while not said:
            await asyncio.sleep(0.01)
        answers = [await post(app, i, *r) for i, r in enumerate(REQUESTS)]
        await startup.put({"type": "lifespan.shutdown"})
        await life
        print(json.dumps([said, answers, gc.get_freeze_count() > 0, list(gc.get_threshold())]))

    asyncio.run(main())
''')


def _serve(freeze: bool, collector: str = "on") -> list[Any]:
    out = subprocess.run([sys.executable, "-c", DRIVE, "on" if freeze else "off", collector],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    result: list[Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _masked(answers: list[Any]) -> list[Any]:
    """The answers with the reference ids of masked errors cut (random per process)."""
    text = json.dumps(answers)
    while "reference " in text:
        start = text.index("reference ") + len("reference ")
        text = text[:start] + text[start + 8:]
    return list(json.loads(text))


def test_the_answers_are_the_same_with_and_without_the_tuning() -> None:
    said_on, answers_on, frozen_on, threshold_on = _serve(True)
    said_off, answers_off, _, threshold_off = _serve(False)
    assert said_on == said_off == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert _masked(answers_on) == _masked(answers_off)
    statuses = [status for status, _ in answers_on]
    assert statuses == [200, 200, 200, 200, 200, 400]  # -32602 is a 400 on HTTP
    assert answers_on[0][1]["result"]["content"][0]["text"] == "hi"
    assert answers_on[2][1]["result"]["isError"] is True  # a bad argument: a tool error
    assert answers_on[5][1]["error"]["code"] == -32602  # an unknown tool
    # What the tuning does, and that it is off by default.
    assert frozen_on and threshold_on[0] == YOUNG_GC_THRESHOLD
    assert threshold_on[1:] == threshold_off[1:]
    assert threshold_off[0] != YOUNG_GC_THRESHOLD


def test_a_collector_turned_off_stays_off() -> None:
    _, answers, frozen, threshold = _serve(True, collector="off")
    assert threshold[0] == 0 and frozen
    assert answers[0][1]["result"]["content"][0]["text"] == "hi"
