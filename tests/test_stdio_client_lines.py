"""The stdio client's line cutter (issue 18, session 12; STDIO-01, STDIO-07): stdout is
cut into lines in the loop's read callback, so the cutting itself is tested here on
reads of every shape, then end to end through both pipe set-ups (our own pipe on POSIX,
the subprocess transport's pipe elsewhere)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from nimblemcp.client import Client, Limits, TransportError
from nimblemcp.transports.stdio_client import StdioTransport, _Lines, _StdoutPipe


def cutter(limit: int = 100) -> tuple[_Lines, list[bytes], list[str]]:
    got: list[bytes] = []
    events: list[str] = []
    loop = asyncio.new_event_loop()
    lines = _Lines(got.append, limit, lambda: events.append("oversized"), loop)
    loop.close()
    return lines, got, events


def test_lines_split_anywhere_come_out_whole_and_in_order() -> None:
    stream = b'{"a":1}\n{"b":2}\n\n{"c":3}\n'
    for cut in range(len(stream) + 1):
        lines, got, events = cutter()
        lines.feed(stream[:cut])
        lines.feed(stream[cut:])
        assert got == [b'{"a":1}\n', b'{"b":2}\n', b'{"c":3}\n'], cut  # the blank line is skipped
        assert events == []


def test_byte_by_byte_and_a_last_line_without_its_newline() -> None:
    lines, got, _ = cutter()
    for byte in b'{"a":1}\n{"tail":true}':
        lines.feed(bytes([byte]))
    assert got == [b'{"a":1}\n']
    lines.end()
    assert got == [b'{"a":1}\n', b'{"tail":true}']
    assert lines.ended.done()


def test_a_read_that_is_one_line_is_passed_on_uncopied() -> None:
    lines, got, _ = cutter()
    data = b'{"whole":1}\n'
    lines.feed(data)
    assert got[0] is data


@pytest.mark.parametrize("pieces", [1, 3, 50])
def test_a_line_over_the_limit_ends_the_stream_once_and_the_rest_is_dropped(pieces: int) -> None:
    lines, got, events = cutter(limit=100)
    big = b'{"x":"' + b"y" * 200 + b'"}\n'
    step = -(-len(big) // pieces)
    lines.feed(b'{"before":1}\n')
    for i in range(0, len(big), step):
        lines.feed(big[i:i + step])
    lines.feed(b'{"after":1}\n')
    lines.end()
    assert got == [b'{"before":1}\n']
    assert events == ["oversized"]


def test_a_line_of_exactly_the_limit_passes() -> None:
    lines, got, events = cutter(limit=10)
    lines.feed(b"0123456789\n")
    lines.feed(b"01234")
    lines.feed(b"56789\n")
    assert got == [b"0123456789\n", b"0123456789\n"] and events == []


def test_a_router_that_raises_does_not_stop_the_stream(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[bytes] = []

    def route(line: bytes) -> None:
        seen.append(line)
        if line.startswith(b"bad"):
            raise RuntimeError("a callback failed")

    loop = asyncio.new_event_loop()
    lines = _Lines(route, 100, lambda: None, loop)
    loop.close()
    lines.feed(b"bad\ngood\n")
    assert seen == [b"bad\n", b"good\n"]
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
        if isinstance(factory(), _StdoutPipe):  # asyncio's own pipes (stderr) still connect
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
