"""The one SSE module: framing and the parser read each other (HTTP-07/08/09, LEGC-04)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from _sse_parser import SSEParser

from nimblemcp.transports._sse import KEEPALIVE, ServerSentEvent, frame, iter_sse

STREAM = (
    b": keep-alive\r\n\r\n"
    b"id: 7\nretry: 1500\ndata: {\"a\":1}\n\n"
    b"event: ping\ndata:  two spaces\ndata: second line\n\n"
    b"retry: soon\nid: bad\x00id\ndata: 3\n\n"
    b"data: no final blank line"
)


async def _lines(raw: bytes) -> AsyncIterator[str]:
    for line in raw.decode().splitlines(keepends=True):
        yield line


async def test_iter_sse_applies_the_event_stream_rules() -> None:
    events = [e async for e in iter_sse(_lines(STREAM))]
    assert events == [
        ServerSentEvent("message", '{"a":1}', "7", 1500),
        ServerSentEvent("ping", " two spaces\nsecond line", "7", None),
        ServerSentEvent("message", "3", "7", None),
        ServerSentEvent("message", "no final blank line", "7", None),
    ]


def test_bytes_parser_gives_the_same_data_in_any_chunking() -> None:
    expected = [b'{"a":1}', b" two spaces\nsecond line", b"3"]
    for size in (1, 2, 5, len(STREAM)):
        parser = SSEParser()
        got: list[bytes] = []
        for i in range(0, len(STREAM), size):
            got += parser.feed(STREAM[i : i + size])
        assert got == expected and parser.comments == 1


async def test_our_frames_read_back() -> None:
    raw = KEEPALIVE + frame(b'{"jsonrpc":"2.0"}') + KEEPALIVE + frame("ü".encode())
    parser = SSEParser()
    assert parser.feed(raw) == [b'{"jsonrpc":"2.0"}', "ü".encode()] and parser.comments == 2
    assert [e.data async for e in iter_sse(_lines(raw))] == ['{"jsonrpc":"2.0"}', "ü"]
