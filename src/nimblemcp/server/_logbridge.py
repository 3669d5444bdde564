"""Route Python `logging` records from inside a handler to that request's stream.

With `Server(forward_logs=True)` (or a logger name), records emitted while a handler
runs become `notifications/message` on that request's own stream — only when the
request set `io.modelcontextprotocol/logLevel`, and only at or above it (LOG-02/03).
nimblemcp's own loggers are never forwarded (LOG-06: no internals to the client).
The current request travels in a ContextVar, so worker threads see it too.

No process-wide side effects: the root logger's level is never changed (that would
turn on every library's debug output for the whole process). With
`forward_logs=True` what reaches the client is what the application's own logger
levels let through, filtered again by each request's logLevel. A named logger
(`forward_logs="myapp"`) that has no level of its own is opened to DEBUG: only that
subtree, which the server author chose to forward.
"""

from __future__ import annotations

import contextvars
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nimblemcp.server._context import Context

current: contextvars.ContextVar[Context | None] = contextvars.ContextVar(
    "nimblemcp_request", default=None
)


def _level(levelno: int) -> str:
    if levelno >= logging.CRITICAL:
        return "critical"
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warning"
    if levelno >= logging.INFO:
        return "info"
    return "debug"


class RequestLogHandler(logging.Handler):
    """Forwards records to the Context of the request being handled, if any."""

    def emit(self, record: logging.LogRecord) -> None:
        ctx = current.get()
        if ctx is None or record.name.startswith("nimblemcp"):
            return
        try:
            ctx.log(_level(record.levelno), record.getMessage(), logger=record.name)
        except Exception:
            self.handleError(record)


_installed: dict[str, RequestLogHandler] = {}


def install(logger_name: str) -> None:
    """Attach the forwarding handler to `logger_name` ("" = root) once per process."""
    if logger_name in _installed:
        return
    handler = RequestLogHandler(logging.DEBUG)
    _installed[logger_name] = handler
    target = logging.getLogger(logger_name or None)
    target.addHandler(handler)
    if logger_name and target.level == logging.NOTSET:
        # Records below the logger's level never reach handlers; for the subtree the
        # author named, the request's logLevel decides what is sent. A level the
        # application set itself is kept, and the root logger is never touched.
        target.setLevel(logging.DEBUG)
