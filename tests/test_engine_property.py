"""Fuzzing nimblemcp's own HTTP engine (issue 18) on loopback, as test_property_wire does
for the codec: random and garbled bytes, split at random points, never crash it.

One real engine (`transports.h1.engine_server.serve`) runs the guarded app of a small
server in a background thread for the whole module; every example talks to it over a
real socket. Each example asserts: every answer is a well-formed HTTP/1.1 status line
(never a 500), a refused request is a 400, no error reached the
engine's log or the event loop's exception handler, and a fresh valid request still
gets its 200.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nimblemcp as m
from nimblemcp.serving import asgi_app
from nimblemcp.transports.h1.engine_server import EngineConfig, serve

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}
BODY = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"_meta": META, "name": "echo", "arguments": {"text": "hi"}}})
GOOD = (b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"accept: application/json, text/event-stream\r\nmcp-protocol-version: " + V.encode() +
        b"\r\nmcp-method: tools/call\r\nmcp-name: echo\r\ncontent-length: " + str(len(BODY)).encode() +
        b"\r\n\r\n" + BODY)
HEALTH = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Running:
    def __init__(self) -> None:
        self.port = 0
        self.loop_errors: list[dict[str, Any]] = []
        self.log = _Errors()


@pytest.fixture(scope="module")
def engine() -> Iterator[Running]:
    server = m.Server("fuzz", "1.0")

    @server.tool
    def echo(text: str) -> str:
        return text

    running = Running()
    logging.getLogger("nimblemcp.http").addHandler(running.log)
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def main() -> None:
        async def go() -> None:
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(lambda _loop, context: running.loop_errors.append(context))
            holder["loop"], holder["stop"] = loop, asyncio.Event()

            def started(address: tuple[str, int]) -> None:
                running.port = address[1]
                ready.set()

            config = EngineConfig(port=0, head_timeout=2.0, idle_timeout=2.0)
            await serve(asgi_app(server), config, stop_event=holder["stop"], started=started)

        asyncio.run(go())

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert ready.wait(30), "the engine did not start"
    try:
        yield running
    finally:
        holder["loop"].call_soon_threadsafe(holder["stop"].set)
        thread.join(30)
        logging.getLogger("nimblemcp.http").removeHandler(running.log)


def exchange(port: int, pieces: list[bytes], pause: float = 0.0, quiet: float = 0.4) -> bytes:
    """Send `pieces` (a pause between them) and read until the server closes or stays
    quiet for `quiet` seconds (a keep-alive connection waiting for more)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for piece in pieces:
            try:
                sock.sendall(piece)
            except OSError:  # the server already closed: it may, after a 400
                break
            if pause:
                time.sleep(pause)
        sock.settimeout(quiet)
        answer = bytearray()
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            answer += chunk
        return bytes(answer)


def statuses(answer: bytes) -> list[int]:
    return [int(s) for s in STATUS.findall(answer)]


def check_healthy(running: Running, answer: bytes) -> None:
    if answer:
        assert answer.startswith(b"HTTP/1.1 "), answer[:200]
        assert 500 not in statuses(answer), answer[:500]
    assert not running.log.records, [r.getMessage() for r in running.log.records]
    assert not running.loop_errors, running.loop_errors
    assert statuses(exchange(running.port, [GOOD])) == [200]  # still serving


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, start = [], 0
    for point in [*points, len(data)]:
        if point > start:
            pieces.append(data[start:point])
            start = point
    return pieces


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(data=st.binary(max_size=600), cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=4))
def test_random_bytes_get_400_or_a_close_and_serving_goes_on(engine: Running, data: bytes, cuts: list[int]) -> None:
    answer = exchange(engine.port, split(data, cuts))
    if answer:
        assert statuses(answer)[-1] == 400 or data.startswith((b"GET", b"POST", b"HEAD", b"PUT", b"DELETE")), answer
    check_healthy(engine, answer)


@st.composite
def garbled(draw: st.DrawFn) -> bytes:
    """A valid request (or two pipelined) with a few bytes replaced, inserted or dropped."""
    data = bytearray(draw(st.sampled_from([GOOD, GOOD + HEALTH, HEALTH + GOOD])))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        at = draw(st.integers(min_value=0, max_value=len(data) - 1))
        kind = draw(st.sampled_from(["replace", "insert", "drop"]))
        byte = draw(st.sampled_from([0, 10, 13, 32, 58, 127, 255, *b"Gx:%?"]))
        if kind == "replace":
            data[at] = byte
        elif kind == "insert":
            data.insert(at, byte)
        elif len(data) > 1:
            del data[at]
    return bytes(data)


@FUZZ
@given(data=garbled(), cuts=st.lists(st.integers(min_value=0, max_value=1200), max_size=5))
def test_garbled_requests_are_answered_or_refused_and_serving_goes_on(
    engine: Running, data: bytes, cuts: list[int]
) -> None:
    answer = exchange(engine.port, split(data, cuts))
    check_healthy(engine, answer)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(count=st.integers(min_value=1, max_value=5), cuts=st.lists(st.integers(min_value=0, max_value=3000),
                                                                   max_size=8))
def test_valid_pipelined_requests_split_anywhere_all_get_200_in_order(
    engine: Running, count: int, cuts: list[int]
) -> None:
    requests = [GOOD if i % 2 == 0 else HEALTH for i in range(count)]
    answer = exchange(engine.port, split(b"".join(requests), cuts), pause=0.001)
    assert statuses(answer) == [200] * count, answer[:600]
    # In order: the MCP answers carry the echo, the health answers the status.
    kinds = [b"hi" if r is GOOD else b'"ok"' for r in requests]
    positions = [answer.find(k, answer.find(b"HTTP/1.1", i * 1)) for i, k in enumerate(kinds)]
    assert all(p >= 0 for p in positions)
    check_healthy(engine, b"")
