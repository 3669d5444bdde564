"""The child of `nimblemcp dev`: one server generation, started by the supervisor in `_dev`.

    python -m nimblemcp.cli._dev_child TARGET --transport stdio
    python -m nimblemcp.cli._dev_child TARGET --transport http --fd N --ready-fd R [--reloaded]

It loads the server with its errors unmasked (this is development: a tool's unexpected
exception answers with its type and message, not only a reference), then serves:

- stdio: stdin and stdout, as `nimblemcp run` does (stdout reserved for the protocol
  before the server's module runs);
- http: the listening socket the supervisor holds (inherited as fd N), so the port
  keeps accepting across reloads; the endpoint is the same ASGI app `run_http` serves
  (`secure_app`), wrapped in the request log (`_devlog.RequestLog`). When stopped, its
  listen streams end without their closing result, so clients listen again, to the
  next generation; that one (`--reloaded`) is wrapped in `ReloadNotice`: the lists a
  client holds are stale, so each new listen stream gets the list changes it asked for
  right after its acknowledgement. A byte on fd R tells the
  supervisor the child accepts connections. Logging goes to stderr at INFO, so a
  handler's unexpected exception shows with its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import sys
from dataclasses import replace
from typing import Any

from nimblemcp._extras import needs_extra
from nimblemcp.cli._devlog import Message, Receive, RequestLog, Scope, Send
from nimblemcp.transports.http.security import HttpSecurity

__all__ = ["ReloadNotice", "main"]

_ACK = b"notifications/subscriptions/acknowledged"
_CHANGES = {"toolsListChanged": "tools", "promptsListChanged": "prompts",
            "resourcesListChanged": "resources"}


class ReloadNotice:
    """ASGI wrapper: a `subscriptions/listen` stream gets `notifications/*/list_changed`
    (tagged with its subscription id) for each list it asked about, right after the
    acknowledgement: the server it listened to before was replaced."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        state = {"stream": False, "told": False}

        async def receive_kept() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
            return message

        async def send_told(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["stream"] = any(k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                                      for k, v in message.get("headers", ()))
            await send(message)
            if (message["type"] == "http.response.body" and state["stream"] and not state["told"]
                    and _ACK in message.get("body", b"") and message.get("more_body", False)):
                state["told"] = True
                events = _changes(bytes(body))
                if events:
                    await send({"type": "http.response.body", "body": events, "more_body": True})

        await self.app(scope, receive_kept, send_told)


def _changes(body: bytes) -> bytes:
    """The SSE events telling the listen in `body` that its lists changed."""
    try:
        request = json.loads(body)
    except ValueError:
        return b""
    if not isinstance(request, dict) or request.get("method") != "subscriptions/listen":
        return b""
    params: Any = request.get("params")
    wanted: Any = params.get("notifications") if isinstance(params, dict) else None
    if not isinstance(wanted, dict):
        return b""
    out = b""
    for key, kind in _CHANGES.items():
        if wanted.get(key) is True:
            note = {"jsonrpc": "2.0", "method": f"notifications/{kind}/list_changed",
                    "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": request.get("id")}}}
            out += b"event: message\ndata: " + json.dumps(note).encode() + b"\n\n"
    return out


def unmask(server: Any) -> None:
    """Show unexpected errors in full: for the tools registered now and later."""
    server.tool_options = replace(server.tool_options, mask_errors=False)
    for tool in server.tools.values():
        tool.mask_errors = False


def _serve_http(server: Any, args: argparse.Namespace) -> None:
    with needs_extra("http", "HTTP serving"):
        import uvicorn

    from nimblemcp.transports.http._drain import ListenDrain
    from nimblemcp.transports.http.security import secure_app

    sock = socket.socket(fileno=args.fd)
    host = str(sock.getsockname()[0])
    allowed_hosts = None if host in ("127.0.0.1", "::1") else ["*"]
    drain = ListenDrain(secure_app(server, path=args.path, security=HttpSecurity(allowed_hosts=allowed_hosts)))
    app: Any = RequestLog(drain.entry)
    if args.reloaded:
        app = ReloadNotice(app)
    config = uvicorn.Config(app, lifespan="on", log_level="warning", server_header=False,
                            timeout_graceful_shutdown=1)

    class _Uvicorn(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started and args.ready_fd is not None:
                os.write(args.ready_fd, b"1")
                os.close(args.ready_fd)

        async def shutdown(self, sockets: Any = None) -> None:
            # Listen streams never end by themselves. End them without the closing
            # result: to a client the stream went away, so it listens again, to the
            # next generation (SUB-10), where the closing result would end its listen.
            await drain.drain()
            server.close_listeners()
            await super().shutdown(sockets)

    with contextlib.suppress(KeyboardInterrupt):
        _Uvicorn(config).run(sockets=[sock])


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="nimblemcp dev (child)")
    parser.add_argument("target")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--fd", type=int, help="the listening socket (http)")
    parser.add_argument("--ready-fd", type=int, help="written to once serving (http)")
    parser.add_argument("--path", default="/mcp")
    parser.add_argument("--reloaded", action="store_true", help="not the first generation")
    args = parser.parse_args(argv)
    if args.transport == "stdio":
        from nimblemcp.transports.stdio.server import protect_stdout

        protect_stdout()  # before the module runs: its print() is not protocol
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    from nimblemcp.cli import load_server

    server = load_server(args.target)
    unmask(server)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        _serve_http(server, args)


if __name__ == "__main__":
    main(sys.argv[1:])
