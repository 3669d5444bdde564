"""The stdio client's stdout (issue 18, session 12; STDIO-01, STDIO-07): cut into lines
by the stdio server's `LineSplitter` (tested on reads of every shape in test_stdio_lines)
in the loop's read callback. Here: what the client does with the lines (a line over the
cap ends the connection at once, blank lines and a failing router), then end to end
through both pipe set-ups (our own pipe on POSIX, the subprocess transport's pipe
elsewhere)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from nimblemcp.client import Client, Limits, TransportError
from nimblemcp.transports.client._router import Inbox
from nimblemcp.transports.stdio._lines import LineSplitter
from nimblemcp.transports.stdio.client import StdioTransport


def wired(limit: int = 100) -> tuple[StdioTransport, LineSplitter, list[bytes], Inbox]:
    """A transport whose stdout splitter is fed by hand, one request pending."""
    transport = StdioTransport("unused")
    routed: list[bytes] = []
    transport._route = routed.append  # type: ignore[method-assign,assignment]
    loop = asyncio.new_event_loop()
    splitter = transport._lines = LineSplitter(transport._line, loop.create_future(), limit)
    inbox = transport._router.open({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}})
    loop.close()
    return transport, splitter, routed, inbox


def items(inbox: Inbox) -> list[Any]:
    """What the request's reader would read next, without waiting."""
    out = []
    while not inbox.empty():
        out.append(inbox.get_nowait())
    return out


def test_a_line_over_the_cap_ends_the_stream_at_once_and_nothing_after_it_is_routed() -> None:
    transport, splitter, routed, inbox = wired(limit=100)
    splitter.data_received(b'{"a":1}\n' + b"x" * 150)  # no newline yet: already over
    assert routed == [b'{"a":1}\n']
    assert transport._lost is not None and "max_message_bytes" in transport._lost
    assert items(inbox) == [None]  # the pending request ends with that reason
    splitter.data_received(b'tail\n{"b":2}\n')
    splitter.data_received(b'{"c":3}\n')
    splitter.eof_received()
    assert routed == [b'{"a":1}\n'] and items(inbox) == []  # nothing more after the end


def test_a_line_over_the_cap_inside_one_read_stops_the_rest_of_that_read() -> None:
    transport, splitter, routed, _ = wired(limit=10)
    splitter.data_received(b'{"a":1}\n' + b"y" * 20 + b'\n{"b":2}\n')
    assert routed == [b'{"a":1}\n'] and transport._lost is not None


def test_blank_lines_are_not_routed_and_a_router_that_raises_does_not_stop_the_stream(
        caplog: pytest.LogCaptureFixture) -> None:
    transport, splitter, _, _ = wired()
    seen: list[bytes] = []

    def route(line: bytes) -> None:
        seen.append(line)
        if line.startswith(b"bad"):
            raise RuntimeError("a callback failed")

    transport._route = route  # type: ignore[method-assign]
    splitter.data_received(b"bad\n\n  \ngood\n")
    assert seen == [b"bad\n", b"good\n"] and transport._lost is None
    assert any("error routing" in r.getMessage() for r in caplog.records)


SERVER = '''
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    rid = message.get("id")
    if message.get("method") == "server/discover":
        out = {"resultType": "complete", "supportedVersions": ["2026-07-28"],
               "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "0"}}
    elif message["params"]["name"] == "big":
        out = {"resultType": "complete", "content": [{"type": "text", "text": "x" * 300000}]}
    else:
        text = message["params"]["arguments"]["text"]
        # a progress-free notification first, then the answer in two writes
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                                     "params": {"level": "info", "data": "hi"}}) + "\\n")
        body = json.dumps({"jsonrpc": "2.0", "id": rid,
                           "result": {"resultType": "complete", "content": [{"type": "text", "text": text}]}})
        sys.stdout.write(body[:7]); sys.stdout.flush()
        sys.stdout.write(body[7:] + "\\n"); sys.stdout.flush()
        continue
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": out}) + "\\n")
    sys.stdout.flush()
'''


async def call_cap_and_close(tmp_path: Path, own_pipe: bool) -> None:
    path = tmp_path / "server.py"
    path.write_text(SERVER)
    async with Client([sys.executable, str(path)], limits=Limits(max_message_bytes=64 * 1024)) as client:
        transport = client.transport
        assert isinstance(transport, StdioTransport)
        assert (transport._stdout is not None) is own_pipe
        for text in ("one", "two" * 1000, "three"):
            result = await client.call_tool("echo", {"text": text})
            assert result["content"][0]["text"] == text
        with pytest.raises(TransportError, match="max_message_bytes"):
            await client.call_tool("big", {})
        with pytest.raises(TransportError, match="max_message_bytes"):
            await client.call_tool("echo", {"text": "after"})
        process = transport.process
        assert process is not None
    assert process.returncode is not None  # STDIO-06
    assert transport._stdout is None


@pytest.mark.parametrize("own_pipe", [True, False], ids=["own-pipe", "subprocess-pipe"])
async def test_both_pipe_set_ups_call_cap_and_close(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_pipe: bool) -> None:
    monkeypatch.setattr(StdioTransport, "_own_stdout_pipe", own_pipe)
    await call_cap_and_close(tmp_path, own_pipe)


@pytest.mark.parametrize("own_pipe", [True, False], ids=["own-pipe", "subprocess-pipe"])
def test_both_pipe_set_ups_under_uvloop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_pipe: bool) -> None:
    """uvloop's process and pipe transports differ from asyncio's (no `max_size`, no
    `asyncio.SubprocessTransport` base): the same steps must hold there."""
    import uvloop  # a dev dependency (the [http] extra)
    monkeypatch.setattr(StdioTransport, "_own_stdout_pipe", own_pipe)
    uvloop.run(call_cap_and_close(tmp_path, own_pipe))


async def test_a_pipe_that_cannot_be_read_is_a_clear_error_and_the_child_is_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    loop = asyncio.get_running_loop()
    script = tmp_path / "server.py"
    script.write_text("import time\ntime.sleep(60)\n")
    spawned: list[int] = []
    spawn = loop.subprocess_exec

    async def spawn_and_note(*args: Any, **kwargs: Any) -> Any:
        transport, protocol = await spawn(*args, **kwargs)
        spawned.append(transport.get_pid())
        return transport, protocol

    connect = loop.connect_read_pipe

    async def refuse_ours(factory: Any, pipe: Any) -> Any:
        if isinstance(factory(), LineSplitter):  # asyncio's own pipes (stderr) still connect
            raise OSError("no polling here")
        return await connect(factory, pipe)

    monkeypatch.setattr(loop, "subprocess_exec", spawn_and_note)
    monkeypatch.setattr(loop, "connect_read_pipe", refuse_ours)
    transport = StdioTransport(sys.executable, [str(script)])
    with pytest.raises(TransportError, match=r"cannot read from .*no polling here"):
        await transport.open()
    assert transport.process is None and len(spawned) == 1
    async with asyncio.timeout(10):
        while True:  # killed, and reaped by asyncio's child watcher
            try:
                os.kill(spawned[0], 0)
            except ProcessLookupError:
                break
            await asyncio.sleep(0.02)
