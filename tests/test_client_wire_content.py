"""Compressed answers (issue 31 point 6): both wires ask for `gzip, deflate, br` (br
because brotli is installed here, in the dev extra) and decode what comes back, JSON and
SSE alike; a body that cannot be decoded is an error naming its `Content-Encoding`
(before issue 31 the h1 wire asked for nothing and read a gzip body as invalid JSON).
Side by side with httpx, case by case; where the two differ the test says how.
"""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import brotli
import pytest
from _fake_mcp import FakeMcp, Seen, answer_body, fake_mcp, raw

from nimblemcp.client import Client
from nimblemcp.errors import MessageTooLarge, StreamBroken, TransportError
from nimblemcp.transports.client._wire import route
from nimblemcp.transports.client.http import HttpTransport
from nimblemcp.transports.h1.client import H1Pool

WIRES = ("h1", "httpx")


def raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


CODINGS = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,  # zlib-wrapped, as RFC 9110 says
    "deflate (raw)": raw_deflate,  # as some servers send it
    "br": brotli.compress,
    "gzip, br": lambda data: brotli.compress(gzip.compress(data)),  # applied in that order
}


def encoded(coding: str, pack: Any, chunked: bool = False) -> Any:
    name = coding.split(" (")[0]

    def answer(seen: Seen) -> bytes:
        if seen.message.get("method") != "tools/call" or "sse" not in str(seen.message["params"]):
            body = pack(answer_body(seen.message))
            return (f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: {name}\r\n"
                    f"content-length: {len(body)}\r\n\r\n").encode() + body
        note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "zipped"}}
        events = (b"event: message\ndata: " + json.dumps(note).encode() + b"\n\n"
                  + b"event: message\ndata: " + answer_body(seen.message) + b"\n\n")
        body = pack(events)
        pieces = [body[i:i + 9] for i in range(0, len(body), 9)]  # the coded stream cut anywhere
        return (f"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: {name}\r\n"
                f"transfer-encoding: chunked\r\n\r\n").encode() \
            + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"

    return answer


@pytest.mark.parametrize("coding", CODINGS)
@pytest.mark.parametrize("wire", WIRES)
async def test_json_and_sse_answers_in_each_coding(wire: str, coding: str) -> None:
    peer = FakeMcp(answer=raw(encoded(coding, CODINGS[coding])))
    logs: list[Any] = []
    async with fake_mcp(peer) as url, \
            Client(HttpTransport(url, wire=wire), mode="modern", on_log=logs.append) as client:  # type: ignore[arg-type]
        result = await client.call_tool("side_effect", {})
        assert result["content"][0]["text"] == "side_effect"
        result = await client.call_tool("side_effect", {"sse": True})
        assert result["content"][0]["text"] == "side_effect"
    assert [log["data"] for log in logs] == ["zipped"]
    assert {s.headers.get("accept-encoding") for s in peer.seen} == {"gzip, deflate, br"}


def gzip_answer(body: bytes, coding: str = "gzip") -> bytes:
    return (f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: {coding}\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


def bad_body(kind: str) -> Any:
    def answer(seen: Seen) -> bytes:
        whole = gzip.compress(answer_body(seen.message))
        if kind == "corrupt":
            return gzip_answer(whole[:10] + b"\x00not deflate at all" + whole[10:])
        if kind == "truncated":
            return gzip_answer(whole[:len(whole) * 2 // 3])
        if kind == "unknown coding":
            return gzip_answer(whole, "zstd")  # a coding neither wire decodes here: its bytes pass on
        return gzip_answer(answer_body(seen.message), "x-bogus")  # plain JSON, labelled wrong

    return answer


@pytest.mark.parametrize("wire", WIRES)
async def test_a_coding_without_a_decoder_passes_as_it_is_like_httpx(wire: str) -> None:
    peer = FakeMcp(script={"side_effect": [raw(bad_body("mislabelled"))]})
    async with fake_mcp(peer) as url, Client(HttpTransport(url, wire=wire), mode="modern") as client:  # type: ignore[arg-type]
        result = await client.call_tool("side_effect", {})
        assert result["content"][0]["text"] == "side_effect"


@pytest.mark.parametrize("kind", ["corrupt", "truncated", "unknown coding"])
@pytest.mark.parametrize("wire", WIRES)
async def test_a_body_that_cannot_be_decoded_names_its_content_encoding(wire: str, kind: str) -> None:
    peer = FakeMcp(script={"side_effect": [raw(bad_body(kind))]})
    async with fake_mcp(peer) as url, Client(HttpTransport(url, wire=wire), mode="modern") as client:  # type: ignore[arg-type]
        with pytest.raises(TransportError) as caught:
            await client.call_tool("side_effect", {})
        assert not isinstance(caught.value, StreamBroken)  # an answer arrived: never re-sent
        result = await client.call_tool("side_effect", {})  # and the client goes on
        assert result["content"][0]["text"] == "side_effect"
    message = str(caught.value)
    if kind == "corrupt" or (kind == "truncated" and wire == "h1"):
        assert "could not be decoded (Content-Encoding: gzip)" in message, message
    elif kind == "truncated":  # httpx hands a cut gzip stream's prefix on as the body
        assert "invalid JSON (Content-Encoding: gzip)" in message, message
    else:
        assert "invalid JSON (Content-Encoding: zstd)" in message, message
    assert peer.runs["side_effect"] == 2


@pytest.mark.parametrize("wire", WIRES)
async def test_a_small_body_that_inflates_past_the_limit_is_refused(wire: str) -> None:
    bomb = gzip.compress(b" " * (64 * 1024 * 1024))  # 64 MB of JSON whitespace, ~64 KB on the wire
    peer = FakeMcp(script={"side_effect": [raw(gzip_answer(bomb))]})
    async with fake_mcp(peer) as url, Client(HttpTransport(url, wire=wire), mode="modern") as client:  # type: ignore[arg-type]
        with pytest.raises(MessageTooLarge):
            await client.call_tool("side_effect", {})


async def test_the_h1_wire_inflates_in_bounded_pieces_and_passes_empty_bodies() -> None:
    """httpx inflates each chunk read whole (a 64 KiB chunk of zeros is 64 MB at once);
    the h1 wire hands out at most 64 KiB at a time."""
    zeros = gzip.compress(b"\0" * (8 * 1024 * 1024))
    peer = FakeMcp(answer=raw(lambda seen: gzip_answer(zeros) if seen.message["id"] == 1
                              else b"HTTP/1.1 202 Accepted\r\ncontent-encoding: gzip\r\ncontent-length: 0\r\n\r\n"))
    pool = H1Pool(route=route)
    async with fake_mcp(peer) as url:
        sizes = []
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover"}).encode()
        async with pool.stream("POST", url, {}, body) as response:
            async for piece in response.aiter_bytes():
                sizes.append(len(piece))
        assert sum(sizes) == 8 * 1024 * 1024 and max(sizes) <= 64 * 1024
        body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "server/discover"}).encode()
        async with pool.stream("POST", url, {}, body) as response:
            assert response.status_code == 202 and await response.aread() == b""
    await pool.aclose()


async def test_an_accept_encoding_of_the_callers_own_is_sent_instead() -> None:
    peer = FakeMcp()
    async with fake_mcp(peer) as url, \
            Client(HttpTransport(url, headers={"Accept-Encoding": "identity"}), mode="modern") as client:
        await client.discover()
    assert [s.headers.get("accept-encoding") for s in peer.seen] == ["identity"]
    assert all(s.headers.get("user-agent") == "nimblemcp" for s in peer.seen)
