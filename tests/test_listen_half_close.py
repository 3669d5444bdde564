"""A listen whose client shuts its sending side (a half-close, what many clients do when
they close, before the reset) is cancelled (HTTP-10), and its response is still ended
cleanly: the chunked body gets its last chunk and the server logs no error (found by
the chaos run, issue 34: uvicorn logged "ASGI callable returned without completing
response" for every such listen). Real `nimblemcp run` processes, both engines, raw
sockets."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest
from _deploy import HANG_GUARD, META, launch, stop, write_server
from _redis import free_port


@pytest.mark.parametrize("engine", ["uvicorn", "nimblemcp"])
async def test_a_half_closed_listen_ends_its_body_and_logs_no_error(tmp_path: Path, engine: str) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    proc = launch(write_server(tmp_path), port, log, "--engine", engine)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {
        "_meta": META, "notifications": {"resourceSubscriptions": ["test://doc"]}}}).encode()
    head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
            f"Mcp-Method: subscriptions/listen\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + body)
        seen = b""
        async with asyncio.timeout(HANG_GUARD):
            while b"acknowledged" not in seen:
                seen += await reader.read(65536)
            writer.transport.get_extra_info("socket").shutdown(socket.SHUT_WR)
            while chunk := await reader.read(65536):
                seen += chunk
        writer.close()
        assert seen.startswith(b"HTTP/1.1 200")
        assert seen.endswith(b"0\r\n\r\n"), seen[-200:]  # the body's last chunk: ended, not cut
        await asyncio.sleep(0.3)
        assert "ERROR" not in log.read_text(), log.read_text()
    finally:
        stop(proc)
