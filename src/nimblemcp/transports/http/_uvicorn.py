"""The connection-level limits `run_http` gives uvicorn, in one place.

uvicorn times out an idle keep-alive connection (`timeout_keep_alive`) but not one
that never finishes its request head: a client trickling header bytes (slowloris), or
connecting and sending nothing, holds a connection for ever, and the httptools parser
buffers whatever head it is sent. `guarded_httptools` is uvicorn's httptools protocol
with what nimblemcp's own engine does too (issue 31; tests/test_http1_blackbox.py):
- a deadline and a size cap on each request head: past either, the connection is
  closed (no response: the request was never read, and the peer may not be HTTP at
  all). The deadline runs from the connection's start and from the first byte of each
  later request; between requests uvicorn's keep-alive timeout applies. The cap counts
  the reads a head spans, a read that begins in a head in slices of `_SLICE` bytes, so
  a burst of pipelined requests in one read is not taken for one oversized head;
- at most `MAX_PIPELINE` pipelined requests queued: past them the input is not
  answered (read and dropped while the last answer is written, so that the close is no
  reset), those queued are answered, and the last of them closes the connection;
- a client that shuts its write side after its request still gets its answer (uvicorn
  closes at the end of the input, answer unsent), then the connection closes;
- when the connection is lost with requests pipelined, the request running hears it too
  (uvicorn tells only the last one parsed, and the running one's `send` then fails).
With h11 (uvicorn without httptools) uvicorn's own `h11_max_incomplete_event_size`
caps the head; there is none of the above then.

Imported only when serving under uvicorn (by `nimblemcp.serving`). Must not import
the server.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nimblemcp.transports.http.security import HttpSecurity

__all__ = ["head_limit", "uvicorn_limits"]

# Head bytes allowed beyond the header budget of `HttpSecurity` (request line, CRLFs).
_HEAD_SLACK = 8 * 1024
_SLICE = 8 * 1024  # as nimblemcp's engine (`h1.engine._SLICE`)
MAX_PIPELINE = 100  # as nimblemcp's engine (`h1.engine.MAX_PIPELINE`)


def guarded_httptools(head_timeout: float, max_head: int) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with a deadline and a size cap on each request head."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeadGuardedProtocol(HttpToolsProtocol):
        head_timer: asyncio.TimerHandle | None = None
        head_bytes = 0
        in_head = True  # reading a request head (or connected, nothing sent yet)
        overflowed = False  # pipelined past MAX_PIPELINE: nothing more is parsed (`data_received`)
        eof = False  # the client shut its write side (`eof_received`)
        running: Any = None  # the request whose app runs (uvicorn's `cycle` is the last parsed)

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            self.in_head = True
            self.head_bytes = 0
            if self.head_timer is not None:
                self.head_timer.cancel()
            self.head_timer = self.loop.call_later(head_timeout, self._expire)

        def _expire(self) -> None:
            self.head_timer = None
            if self.in_head and not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self.overflowed:
                # Dropped: what comes while the last answer is written is drained, so that
                # the close after it is no reset; before that (uvicorn resumes reading with
                # every request it starts), one read at a time, so that a client reading
                # none of its answers is not read either.
                if self.pipeline or self.flow.write_paused:
                    self.flow.pause_reading()
                return
            if self.in_head and len(data) > _SLICE:
                start, end = 0, len(data)
                while start < end and self.in_head:
                    self.data_received(data[start:start + _SLICE])
                    if self.overflowed or self.transport.is_closing():
                        return
                    start += _SLICE
                if start < end:
                    self.data_received(data[start:])
                return
            if self.in_head:
                self.head_bytes += len(data)
            # One read may hold the head and the start of the body: parse it first, and
            # close only if the head is still not complete.
            super().data_received(data)
            if self.in_head and self.head_bytes > max_head and not self.transport.is_closing():
                self.transport.close()
            elif len(self.pipeline) > MAX_PIPELINE:
                self._overflow()

        def _overflow(self) -> None:
            # uvicorn queues the newest first (`appendleft`): keep the oldest, and let
            # the last of them close the connection.
            self.overflowed = True
            while len(self.pipeline) > MAX_PIPELINE:
                self.pipeline.popleft()
            self.cycle = self.pipeline[0][0]
            self.cycle.keep_alive = False
            self.flow.pause_reading()

        def resume_writing(self) -> None:
            super().resume_writing()
            if self.overflowed and not self.pipeline:
                self.flow.resume_reading()  # drop what came meanwhile (see `data_received`)

        def eof_received(self) -> bool | None:  # type: ignore[override]  # asyncio.Protocol says bool | None
            # The client shut its write side (a half-close, or the first half of a close):
            # answers still go out, the last closes the connection, and an app that asks
            # for more of a request read whole hears `http.disconnect` (`_until_eof`), as
            # on nimblemcp's engine (`h1.engine.Connection.eof_received`).
            cycle = self.cycle
            if (cycle is None or cycle.more_body or (cycle.response_complete and not self.pipeline)
                    or self.scheme == "https"):  # TLS cannot write on after the peer's end
                return None  # nothing to answer, or a request that can no longer end: close
            self.eof = True
            cycle.keep_alive = False  # its `send` closes the connection after the answer
            cycle.message_event.set()  # a `receive` waiting for more looks again
            return True

        def on_headers_complete(self) -> None:
            self.in_head = False
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None
            before = self.cycle
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is not before:  # a request (not an upgrade): its task takes `receive` later
                cycle.receive = self._until_eof(cycle, cycle.receive)  # type: ignore[method-assign]
                if not self.pipeline or self.pipeline[0][0] is not cycle:  # started at once
                    self.running = cycle

        def on_response_complete(self) -> None:
            done = self.running
            if done is not None:
                # `_until_eof` and its cycle refer to each other: undone here, the cycle
                # would wait for the cyclic collector (measured: +7 us per request).
                try:  # noqa: SIM105  (no context manager per request)
                    del done.receive
                except AttributeError:  # an upgrade's: never wrapped
                    pass
            nxt = self.pipeline[-1][0] if self.pipeline else None
            super().on_response_complete()
            if nxt is not None and (not self.pipeline or self.pipeline[-1][0] is not nxt):
                self.running = nxt  # started from the queue

        def _until_eof(self, cycle: Any, receive: Any) -> Any:
            async def until_eof() -> Any:
                if self.eof and not cycle.more_body and not cycle.body:
                    return {"type": "http.disconnect"}
                return await receive()

            return until_eof

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if not self.in_head:  # the first byte of the next request on this connection
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None
            # uvicorn tells only the last request parsed that the client is gone: with
            # requests pipelined behind it, the one running would write to the closed
            # transport once its `send` stops waiting for the drain (a RuntimeError).
            running = self.running
            if running is not None and running is not self.cycle and not running.response_complete:
                running.disconnected = True
                running.message_event.set()
            super().connection_lost(exc)

    return HeadGuardedProtocol


def head_limit(security: HttpSecurity) -> int:
    """The most bytes a request head may take (on either engine)."""
    return security.max_header_bytes + _HEAD_SLACK


def uvicorn_limits(security: HttpSecurity) -> dict[str, Any]:
    """The `uvicorn.Config` keyword arguments that carry `security`'s connection limits."""
    max_head = head_limit(security)
    options: dict[str, Any] = {
        "timeout_keep_alive": max(1, round(security.idle_timeout)),
        "h11_max_incomplete_event_size": max_head,
    }
    try:
        import httptools  # noqa: F401  (what http="auto" would pick)
    except ImportError:
        options["http"] = "h11"
    else:
        options["http"] = guarded_httptools(security.head_timeout, max_head)
    return options
