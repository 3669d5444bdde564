"""A small Server-Sent Events parser over an async iterator of text lines.

Follows the WHATWG event-stream rules that matter here: `data:` lines join with
newlines, one leading space after the colon is dropped, comment lines (starting with
`:`, used as keep-alives) are ignored (HTTP-08), a blank line dispatches the event,
`retry:` must be all digits. Pure parsing: no httpx, no asyncio, no nimblemcp imports.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

__all__ = ["ServerSentEvent", "iter_sse"]


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str
    data: str
    id: str | None
    retry: int | None


async def iter_sse(lines: AsyncIterable[str]) -> AsyncIterator[ServerSentEvent]:
    """Yield one event per dispatch; events without data are dropped as the spec says."""
    event = ""
    data: list[str] = []
    last_id: str | None = None
    retry: int | None = None
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield ServerSentEvent(event or "message", "\n".join(data), last_id, retry)
            event, data, retry = "", [], None
            continue
        if line.startswith(":"):
            continue
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            event = value
        elif field == "id":
            if "\x00" not in value:
                last_id = value
        elif field == "retry" and value.isdigit():
            retry = int(value)
    if data:  # a stream that ends without the final blank line still delivered this
        yield ServerSentEvent(event or "message", "\n".join(data), last_id, retry)
