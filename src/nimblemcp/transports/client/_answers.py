"""Reading what an HTTP server answers besides JSON-RPC, for the HTTP client: the
`Retry-After` delay (seconds or an HTTP-date), a `WWW-Authenticate` challenge, a
redirect's target and whether it stays on the same origin, and bodies and SSE lines
read with a size cap (`MessageTooLarge`) instead of whole.

Pure over the header values and byte chunks it is given; imports `errors` and the
standard library only (`email.utils` lazily, for HTTP-dates).
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

from nimblemcp.errors import MessageTooLarge
from nimblemcp.types._urls import origin

__all__ = [
    "Challenge",
    "bounded_lines",
    "parse_challenge",
    "read_capped",
    "redirect_target",
    "retry_after",
    "same_origin",
    "too_large",
]

_PARAM = re.compile(r'\s*([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?')


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """The delay in seconds a `Retry-After` value asks for (RFC 9110 10.2.3): digits,
    or an HTTP-date (a date in the past is 0). None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(int(value))
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True, slots=True)
class Challenge:
    """The first challenge of a `WWW-Authenticate` header, as sent."""

    raw: str
    scheme: str | None
    resource_metadata: str | None
    scope: str | None


def parse_challenge(value: str | None) -> Challenge:
    """The scheme and the `resource_metadata` / `scope` parameters (RFC 9728 5.1,
    RFC 6750 3) of the first challenge; missing parts are None."""
    raw = (value or "").strip()
    scheme, _, rest = raw.partition(" ")
    params: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        match = _PARAM.match(rest, pos)
        if match is None or match.end() == pos:
            break  # a second challenge or a token68: the first one's parameters end here
        name = match.group(1).lower()
        quoted = match.group(2)
        params.setdefault(name, re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else match.group(3))
        pos = match.end()
    return Challenge(raw, scheme or None, params.get("resource_metadata"), params.get("scope"))


def same_origin(a: str, b: str) -> bool:
    """Same scheme, host and port (RFC 6454)."""
    return origin(a) == origin(b)


def redirect_target(base: str, location: str | None) -> str | None:
    """The absolute URL a `Location` names, resolved against the request's URL."""
    from urllib.parse import urljoin

    return urljoin(base, location.strip()) if location and location.strip() else None


def too_large(limit: int, what: str) -> MessageTooLarge:
    return MessageTooLarge(limit, f"the server sent {what} larger than {limit} bytes "
                                  f"(the client's max_message_bytes); it was not read")


async def read_capped(chunks: AsyncIterable[bytes], limit: int, declared: str | None) -> bytes:
    """A whole body, refused as soon as it (or its `Content-Length`) passes `limit`."""
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise too_large(limit, "a response body")
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise too_large(limit, "a response body")
        parts.append(chunk)
    return b"".join(parts)


async def bounded_lines(chunks: AsyncIterable[bytes], limit: int) -> AsyncIterator[str]:
    """The text lines of an event stream (CR, LF or CRLF endings), refusing an event
    (the lines up to a blank one) whose bytes pass `limit` before it is complete.
    Linear in the bytes read: a long line's pieces are joined once."""
    parts: list[bytes] = []  # the line being read, when it spans chunks
    partial = 0
    event = 0  # bytes of the event being read, its complete lines so far
    skip_lf = False  # the last chunk ended in CR: a leading LF is its CRLF's end
    async for chunk in chunks:
        if not chunk:
            continue
        pos = 1 if skip_lf and chunk[:1] == b"\n" else 0
        skip_lf = False
        size = len(chunk)
        lf = chunk.find(b"\n", pos)
        cr = chunk.find(b"\r", pos)
        while lf >= 0 or cr >= 0:
            cut = lf if cr < 0 or 0 <= lf < cr else cr
            piece = chunk[pos:cut]
            line = b"".join([*parts, piece]) if parts else piece
            parts.clear()
            partial = 0
            pos = cut + 1
            if cut == cr:
                if pos == size:
                    skip_lf = True
                elif chunk[pos] == 0x0A:
                    pos += 1
            event = event + len(line) if line else 0
            if event > limit:
                raise too_large(limit, "an SSE event")
            yield line.decode("utf-8", "replace")
            if lf >= 0 and lf < pos:
                lf = chunk.find(b"\n", pos)
            if cr >= 0 and cr < pos:
                cr = chunk.find(b"\r", pos)
        if pos < size:
            parts.append(chunk[pos:])
            partial += size - pos
            if event + partial > limit:
                raise too_large(limit, "an SSE event")
    if parts:
        yield b"".join(parts).decode("utf-8", "replace")
