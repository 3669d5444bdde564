"""nimblemcp's own HTTP/1.1 engine (issue 18) behind a real `nimblemcp run` process.

Raw sockets for what a client library hides (pipelining, garbage, chunked request
bodies, `Expect: 100-continue`, HEAD, HTTP/1.0), httpx for the streamed (SSE) answer,
signals for shutdown. The timeouts (slow heads, idle keep-alive) are pinned by
test_hardening_wire, the shutdown drain by test_deploy_shutdown, workers by
test_deploy_run: all of them now run on this engine, the default.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from _deploy import HANG_GUARD, META, V, headers, launch, stop, wait_port
from _redis import free_port

from nimblemcp.transports.h1.proxies import TrustedProxies

SOURCE = '''
import asyncio
import sys

import nimblemcp as m

server = m.Server("engine")


@server.tool
def echo(text: str) -> str:
    return text


@server.tool
async def counting(ctx: m.Context) -> str:
    for i in range(1, 4):
        ctx.report_progress(i, 3)
        await asyncio.sleep(0.01)
    return "counted"


@server.route("/scope")
def scope(scope):
    return {"client": list(scope["client"]), "scheme": scope["scheme"], "path": scope["path"],
            "query": scope["query_string"].decode(), "uvicorn": "uvicorn" in sys.modules}
'''

ACCEPT = b"application/json, text/event-stream"


def body(name: str, arguments: dict[str, object], meta: dict[str, object] | None = None) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": {"_meta": meta or META, "name": name, "arguments": arguments}})


def post(data: bytes, name: str = "echo", *, extra: bytes = b"", length: bool = True) -> bytes:
    head = (b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\naccept: " + ACCEPT +
            b"\r\nmcp-protocol-version: " + V.encode() + b"\r\nmcp-method: tools/call\r\nmcp-name: " +
            name.encode() + b"\r\n" + extra)
    if length:
        head += b"content-length: %d\r\n" % len(data)
    return head + b"\r\n" + data


HEALTH = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"


class Served:
    def __init__(self, port: int, log: Path, proc: subprocess.Popen[bytes]) -> None:
        self.port, self.log, self.proc = port, log, proc


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("engine")
    (tmp / "engine_server.py").write_text(SOURCE)
    port = free_port()
    log = tmp / "run.log"
    proc = launch(tmp / "engine_server.py", port, log, "--max-body", "4096",
                  env={"NIMBLEMCP_ENGINE": "nimblemcp"})
    try:
        yield Served(port, log, proc)
    finally:
        assert stop(proc, signal.SIGINT) == 0, log.read_text()
        assert "Traceback" not in log.read_text(), log.read_text()


async def read_responses(reader: asyncio.StreamReader, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """`count` responses with a content-length, as (status, headers, body)."""
    out = []
    for _ in range(count):
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HANG_GUARD)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        fields = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        data = await reader.readexactly(int(fields.get("content-length", "0")))
        out.append((status, fields, data))
    return out


async def closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), HANG_GUARD) == b""
    except ConnectionError:
        return True


async def test_pipelined_requests_are_answered_in_order_on_one_connection(served: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(post(body("echo", {"text": "one"})) + HEALTH + post(body("echo", {"text": "three"})))
    answers = await read_responses(reader, 3)
    assert [a[0] for a in answers] == [200, 200, 200]
    assert b'"one"' in answers[0][2] and b'"ok"' in answers[1][2] and b'"three"' in answers[2][2]
    assert all("date" in a[1] and "server" not in a[1] for a in answers)
    writer.write(HEALTH)  # still open: keep-alive
    assert (await read_responses(reader, 1))[0][0] == 200
    writer.close()


async def test_garbage_after_a_request_is_answered_400_after_it_then_closed(served: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(HEALTH + b"NOT HTTP AT ALL\r\n\r\n")
    answers = await read_responses(reader, 2)
    assert [a[0] for a in answers] == [200, 400]
    assert answers[1][1]["connection"] == "close"
    assert await closed(reader)
    writer.close()
    async with httpx.AsyncClient(timeout=HANG_GUARD) as c:  # still serving
        assert (await c.get(f"http://127.0.0.1:{served.port}/healthz")).status_code == 200


@pytest.mark.parametrize("bad", [
    b"GET /\x00 HTTP/1.1\r\n\r\n",
    b"POST /mcp HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 7\r\n\r\n",
    post(b"", extra=b"transfer-encoding: chunked\r\n", length=False) + b"zz\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello on the plain port
])
async def test_malformed_requests_get_400_and_the_connection_closes(served: Served, bad: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(bad)
    answer = await asyncio.wait_for(reader.read(), HANG_GUARD)  # to the close
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    writer.close()
    await writer.wait_closed()


async def test_a_chunked_request_body_is_read_whole(served: Served) -> None:
    data = body("echo", {"text": "in chunks"})
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + 17]), data[i:i + 17]) for i in range(0, len(data), 17))
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(post(b"", extra=b"transfer-encoding: chunked\r\n", length=False))
    for i in range(0, len(chunked), 40):  # trickled, so the app waits for the rest
        writer.write(chunked[i:i + 40])
        await writer.drain()
        await asyncio.sleep(0.005)
    writer.write(b"0\r\n\r\n")
    [(status, _, reply)] = await read_responses(reader, 1)
    assert status == 200 and b"in chunks" in reply
    writer.close()


async def test_expect_100_continue_is_answered_before_the_body_is_sent(served: Served) -> None:
    data = body("echo", {"text": "after 100"})
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(post(data, extra=b"expect: 100-continue\r\n")[: -len(data)])
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HANG_GUARD)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(data)
    [(status, _, reply)] = await read_responses(reader, 1)
    assert status == 200 and b"after 100" in reply
    writer.close()


async def test_a_body_over_the_limit_is_413_and_the_answer_is_not_lost(served: Served) -> None:
    data = body("echo", {"text": "x" * 10_000})
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(post(data))  # sent whole: the body is read, the connection stays usable
    [(status, _, _)] = await read_responses(reader, 1)
    assert status == 413
    writer.write(HEALTH)
    assert (await read_responses(reader, 1))[0][0] == 200
    writer.close()
    # Answered while the body is still on its way: the rest is read and dropped, then
    # the connection closes (not a reset that would lose the 413).
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    big = body("echo", {"text": "x" * 2_000_000})
    writer.write(post(big)[:-1_900_000])
    [(status, fields, _)] = await read_responses(reader, 1)
    assert status == 413 and fields["connection"] == "close"
    writer.write(big[-1_900_000:])
    await writer.drain()
    assert await closed(reader)
    writer.close()


async def test_a_streamed_answer_is_chunked_sse(served: Served) -> None:
    meta = {**META, "progressToken": "p1"}
    async with httpx.AsyncClient(timeout=HANG_GUARD) as c, c.stream(
        "POST", f"http://127.0.0.1:{served.port}/mcp", content=body("counting", {}, meta),
        headers=headers("tools/call", "counting"),
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["transfer-encoding"] == "chunked" and "content-length" not in r.headers
        events = [json.loads(line[5:]) for line in [ln async for ln in r.aiter_lines()] if line.startswith("data:")]
    assert [e["params"]["progress"] for e in events if e.get("method") == "notifications/progress"] == [1, 2, 3]
    assert events[-1]["result"]["content"][0]["text"] == "counted"


async def test_head_has_no_body_and_the_connection_stays_usable(served: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(b"HEAD /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n" + HEALTH)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HANG_GUARD)
    assert head.startswith(b"HTTP/1.1 200 ")
    [(status, _, reply)] = await read_responses(reader, 1)  # the next bytes are the GET's answer
    assert status == 200 and reply == b'{"status":"ok"}'
    writer.close()


async def test_http_1_0_is_answered_and_closed(served: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(b"GET /healthz HTTP/1.0\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), HANG_GUARD)
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b'{"status":"ok"}')
    writer.close()


async def test_trusted_proxy_headers_set_client_and_scheme_and_uvicorn_is_not_loaded(served: Served) -> None:
    async with httpx.AsyncClient(timeout=HANG_GUARD) as c:
        r = await c.get(f"http://127.0.0.1:{served.port}/scope?a=1",
                        headers={"x-forwarded-for": "203.0.113.7, 127.0.0.1", "x-forwarded-proto": "https"})
        seen = r.json()
        assert seen["client"][0] == "203.0.113.7" and seen["scheme"] == "https"
        assert seen["path"] == "/scope" and seen["query"] == "a=1"
        assert seen["uvicorn"] is False
        plain = (await c.get(f"http://127.0.0.1:{served.port}/scope")).json()
        assert plain["client"][0] == "127.0.0.1" and plain["scheme"] == "http"
    assert "running on http://127.0.0.1:" in served.log.read_text()


def test_forwarded_headers_follow_uvicorns_trust_rules() -> None:
    hdrs = [(b"x-forwarded-for", b"198.51.100.1, 10.0.0.5"), (b"x-forwarded-proto", b"https")]
    only_lb = TrustedProxies("10.0.0.0/8")
    assert not only_lb.trusts(("127.0.0.1", 5000))  # a peer not in the list: headers ignored
    assert only_lb.trusts(("10.1.2.3", 5000))
    # From the right: 10.0.0.5 is trusted, so the client is the hop before it.
    assert only_lb.apply(hdrs, "http", ("10.1.2.3", 1)) == ("https", ("198.51.100.1", 0))
    anyone = TrustedProxies("*")
    assert anyone.trusts(None)
    assert anyone.apply([(b"x-forwarded-for", b"[2001:db8::1]:4711, 10.0.0.5")], "http", None) == (
        "http", ("2001:db8::1", 4711))
    assert only_lb.apply([(b"x-forwarded-proto", b"gopher")], "http", None) == ("http", None)


def test_sigint_with_an_idle_keep_alive_connection_exits_at_once(tmp_path: Path) -> None:
    (tmp_path / "engine_server.py").write_text(SOURCE)
    port = free_port()
    log = tmp_path / "run.log"
    proc = launch(tmp_path / "engine_server.py", port, log, env={"NIMBLEMCP_ENGINE": "nimblemcp"})
    with httpx.Client(timeout=HANG_GUARD) as c:  # keeps its connection open
        assert c.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        began = time.monotonic()
        assert stop(proc, signal.SIGINT) == 0, log.read_text()
        assert time.monotonic() - began < 5, log.read_text()
    assert "shutting down" in log.read_text()


def test_engine_flag_and_env_choose_the_engine(tmp_path: Path) -> None:
    (tmp_path / "engine_server.py").write_text(SOURCE)
    # uvicorn is the default (issue 31); the engine is opt-in, by flag, environment or file.
    (tmp_path / "engine.toml").write_text('[run]\nengine = "nimblemcp"\n')
    cases = (([], {}, "uvicorn"), (["--engine", "nimblemcp"], {}, "nimblemcp"),
             ([], {"NIMBLEMCP_ENGINE": "nimblemcp"}, "nimblemcp"),
             (["--config", str(tmp_path / "engine.toml")], {}, "nimblemcp"),
             (["--engine", "uvicorn"], {"NIMBLEMCP_ENGINE": "nimblemcp"}, "uvicorn"))
    for i, (flag, env, expected) in enumerate(cases):
        port = free_port()
        log = tmp_path / f"{expected}-{i}.log"
        clean = {k: v for k, v in os.environ.items() if k != "NIMBLEMCP_ENGINE"}
        with log.open("wb") as sink:
            proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "run", str(tmp_path / "engine_server.py"),
                                     "--transport", "http", "--port", str(port), "-v", *flag],
                                    stdout=sink, stderr=sink, env={**clean, **env})
        try:
            wait_port(port, proc, log)
            seen = httpx.get(f"http://127.0.0.1:{port}/scope", timeout=HANG_GUARD).json()
            assert seen["uvicorn"] is (expected == "uvicorn"), log.read_text()
        finally:
            stop(proc, signal.SIGINT)
        assert f'"engine": "{expected}"' in log.read_text()
