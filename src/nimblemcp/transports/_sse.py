"""Server-Sent Events framing for the Streamable HTTP transport (HTTP-07/08/09).

Frames are bytes ready for an ASGI `http.response.body` message. Our JSON never
holds a raw newline (orjson escapes them), so one message is one `data:` line.
No event ids are written: the 2026-07-28 revision has no resumability (HTTP-09).
Also a small incremental parser, used by our tests and usable by a client.
Must not import asyncio, the server or any transport.
"""

from __future__ import annotations

from typing import Final

__all__ = ["KEEPALIVE", "SSE_HEADERS", "SSEParser", "frame"]

# A comment line: clients ignore it; it keeps proxies and idle timers awake (HTTP-08).
KEEPALIVE: Final = b": keep-alive\n\n"

SSE_HEADERS: Final[list[tuple[bytes, bytes]]] = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def frame(data: bytes) -> bytes:
    """One SSE event of the default type `message` carrying one JSON text."""
    return b"data: " + data + b"\n\n"


class SSEParser:
    """Incremental SSE reader: feed bytes, get back the `data` of complete events.

    Comment lines (keep-alives) are counted in `comments` and otherwise ignored;
    `id`, `event` and `retry` fields are ignored (HTTP-09).
    """

    __slots__ = ("_buf", "_data", "comments")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self.comments = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf += chunk
        events: list[bytes] = []
        while True:
            cut = self._buf.find(b"\n")
            if cut < 0:
                return events
            line = self._buf[:cut].rstrip(b"\r")
            self._buf = self._buf[cut + 1 :]
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b":"):
                self.comments += 1
            else:
                field, _, value = line.partition(b":")
                if field == b"data":
                    self._data.append(value[1:] if value.startswith(b" ") else value)
