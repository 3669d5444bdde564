"""Server-Sent Events, both directions: the server's framing and the one parser.

Writing (HTTP-07/08/09): frames are bytes ready for an ASGI `http.response.body`
message. Our JSON never holds a raw newline (orjson escapes them), so one message is
one `data:` line. `frame` writes no event id: the 2026-07-28 revision has no
resumability (HTTP-09); the legacy leg's resumable streams frame with ids in `_sse_log`.

Reading: `SSEDecoder` applies the WHATWG event-stream rules one line at a time:
`data:` lines join with newlines, one leading space after the colon is dropped,
comment lines (starting with `:`, our keep-alives, HTTP-08) are counted and otherwise
ignored, a blank line dispatches the event (one without data is dropped), `id` sticks
until changed (never with a NUL), `retry:` must be all digits. `iter_sse` runs it over
an async iterator of text lines (the HTTP client); the tests run it over raw byte
chunks (`tests/_sse_parser.py`).
Pure: imports only `types`; must not import asyncio, httpx, the server, the client or
any transport.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Final

from nimblemcp.types._http import SSE_TYPE

__all__ = [
    "KEEPALIVE",
    "SSE_HEADERS",
    "SSEDecoder",
    "ServerSentEvent",
    "frame",
    "iter_sse",
]

# --- writing -------------------------------------------------------------------------

# A comment line: clients ignore it; it keeps proxies and idle timers awake (HTTP-08).
KEEPALIVE: Final = b": keep-alive\n\n"

SSE_HEADERS: Final[list[tuple[bytes, bytes]]] = [
    (b"content-type", SSE_TYPE.encode()),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def frame(data: bytes) -> bytes:
    """One SSE event of the default type `message` carrying one JSON text."""
    return b"data: " + data + b"\n\n"


# --- reading -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str
    data: str
    id: str | None
    retry: int | None


class SSEDecoder:
    """The event-stream rules over single lines (without their line ending)."""

    __slots__ = ("_data", "_event", "_id", "_retry", "comments")

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self._retry: int | None = None
        self.comments = 0

    def line(self, line: str) -> ServerSentEvent | None:
        """Take one line; returns the event a blank line dispatches, if it has data."""
        if not line:
            return self.flush()
        if line.startswith(":"):
            self.comments += 1
            return None
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\x00" not in value:
                self._id = value
        elif field == "retry" and value.isdigit():
            self._retry = int(value)
        return None

    def flush(self) -> ServerSentEvent | None:
        """Dispatch what is pending (a blank line, or the end of the stream)."""
        event = None
        if self._data:
            event = ServerSentEvent(self._event or "message", "\n".join(self._data), self._id, self._retry)
        self._event, self._data, self._retry = "", [], None
        return event


async def iter_sse(lines: AsyncIterable[str]) -> AsyncIterator[ServerSentEvent]:
    """Yield one event per dispatch; a stream that ends without the final blank line
    still delivers its last event."""
    decoder = SSEDecoder()
    async for raw in lines:
        event = decoder.line(raw.rstrip("\r\n"))
        if event is not None:
            yield event
    event = decoder.flush()
    if event is not None:
        yield event
