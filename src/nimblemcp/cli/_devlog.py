"""The request log of `nimblemcp dev`: one stderr line per JSON-RPC request.

    [dev] tools/call "search" 2.4 ms -> complete
    [dev] tools/call "nope" 0.6 ms -> error -32602: Unknown tool: nope

The log is taken at the transport boundary, never inside the server: the stdio proxy
of `_dev` feeds it the lines it relays, and `RequestLog` is an ASGI wrapper that reads
the request body and the response body (JSON or SSE) of each POST. Development only:
it buffers what it logs (up to `LIMIT` bytes per message). Standard library only.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["LIMIT", "RequestLog", "emit", "label", "line", "outcome"]

LIMIT = 1024 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def emit(text: str) -> None:
    """Write one log line to stderr at once."""
    sys.stderr.write(f"[dev] {text}\n")
    sys.stderr.flush()


def label(message: Any) -> tuple[str, str]:
    """A request's method and what it names (tool or prompt name, resource URI)."""
    if not isinstance(message, dict):
        return "(not a JSON-RPC message)", ""
    method = str(message.get("method", "(no method)"))
    params = message.get("params")
    name: Any = None
    if isinstance(params, dict):
        name = params.get("name") or params.get("uri")
        ref = params.get("ref")
        if name is None and isinstance(ref, dict):
            name = ref.get("name") or ref.get("uri")
    return method, "" if name is None else str(name)


def outcome(response: Any) -> str:
    """`complete`, `input_required`, ... or `error CODE: message`."""
    if not isinstance(response, dict):
        return "no JSON-RPC response"
    error = response.get("error")
    if isinstance(error, dict):
        return f"error {error.get('code')}: {error.get('message')}"
    result = response.get("result")
    if not isinstance(result, dict):
        return "result"
    text = str(result.get("resultType", "complete"))
    return text + (" (isError: the tool failed)" if result.get("isError") is True else "")


def line(method: str, name: str, seconds: float, result: str) -> str:
    named = f" {json.dumps(name, ensure_ascii=False)}" if name else ""
    return f"{method}{named} {seconds * 1000:.1f} ms -> {result}"


def _sse_messages(body: bytes) -> list[Any]:
    out: list[Any] = []
    for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(part[5:].lstrip(b" ") for part in event.split(b"\n")
                          if part.startswith(b"data:"))
        if data:
            try:
                out.append(json.loads(data))
            except ValueError:
                continue
    return out


def _response_for(request: Any, status: int, content_type: str, body: bytes) -> str:
    if isinstance(request, dict) and "id" not in request:
        return f"accepted (HTTP {status})" if status < 400 else f"HTTP {status}"
    candidates: list[Any] = []
    if content_type.startswith("application/json"):
        try:
            candidates = [json.loads(body)]
        except ValueError:
            candidates = []
    elif content_type.startswith("text/event-stream"):
        candidates = _sse_messages(body)
    rid = request.get("id") if isinstance(request, dict) else None
    for message in reversed(candidates):
        if isinstance(message, dict) and "method" not in message and message.get("id") == rid:
            return outcome(message)
    return f"HTTP {status}" + (" (stream ended without a response)"
                               if content_type.startswith("text/event-stream") else "")


class RequestLog:
    """ASGI wrapper: logs each request to the MCP endpoint when its response ends."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]],
                 log: Callable[[str], None] = emit) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        body = bytearray()
        out = bytearray()
        state: dict[str, Any] = {"status": 0, "type": "", "logged": False}

        async def receive_logged() -> Message:
            message = await receive()
            if message["type"] == "http.request" and len(body) < LIMIT:
                body.extend(message.get("body", b""))
            return message

        async def send_logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                for key, value in message.get("headers", ()):
                    if key.lower() == b"content-type":
                        state["type"] = value.decode("latin-1").lower()
            elif message["type"] == "http.response.body":
                if len(out) < LIMIT:
                    out.extend(message.get("body", b""))
                if not message.get("more_body", False):
                    self._done(scope, started, bytes(body), state, bytes(out))
            await send(message)

        try:
            await self.app(scope, receive_logged, send_logged)
        finally:
            self._done(scope, started, bytes(body), state, bytes(out))

    def _done(self, scope: Scope, started: float, body: bytes, state: dict[str, Any],
              out: bytes) -> None:
        if state["logged"]:
            return
        state["logged"] = True
        seconds = time.perf_counter() - started
        if scope.get("method") != "POST":
            status = state["status"] or "(no response)"
            self.log(f"{scope.get('method')} {scope.get('path')} {seconds * 1000:.1f} ms -> HTTP {status}")
            return
        try:
            request: Any = json.loads(body)
        except ValueError:
            request = None
        method, name = label(request)
        result = _response_for(request, int(state["status"]), str(state["type"]), out)
        self.log(line(method, name, seconds, result))
