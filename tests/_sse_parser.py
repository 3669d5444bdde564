"""Server-Sent Events from raw byte chunks, for tests that read a response body by
hand: the library's one decoder (`SSEDecoder`) fed line by line."""

from __future__ import annotations

from nimblemcp.transports._sse import SSEDecoder

__all__ = ["SSEParser"]


class SSEParser:
    """Incremental reader over byte chunks: feed bytes, get back the `data` of complete
    events (as UTF-8 bytes; events with empty data, such as a resumable stream's priming
    event, are skipped); keep-alive comments are counted in `comments`."""

    __slots__ = ("_buf", "_decoder")

    def __init__(self) -> None:
        self._buf = b""
        self._decoder = SSEDecoder()

    @property
    def comments(self) -> int:
        return self._decoder.comments

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf += chunk
        events: list[bytes] = []
        while True:
            cut = self._buf.find(b"\n")
            if cut < 0:
                return events
            line = self._buf[:cut].rstrip(b"\r")
            self._buf = self._buf[cut + 1 :]
            event = self._decoder.line(line.decode("utf-8"))
            if event is not None and event.data:
                events.append(event.data.encode("utf-8"))
