"""What can still keep a stopping stdio server's process alive (STDIO-06).

After the shutdown grace the transport cancels the requests still running. An async
request then ends by itself; a sync tool in a worker thread cannot be stopped, and
neither can work a tool handed to `asyncio.to_thread` or another thread pool (asyncio
waits for those when its runner closes, the interpreter at exit). `busy_pool_threads()`
counts such threads: a pool thread (nimblemcp's own sync-tool workers, any
`concurrent.futures` worker) whose innermost Python frame is not the pool's waiting
loop is running work. Read from `sys._current_frames()` at shutdown only: nothing is
recorded per request. Imports stdlib only: the workers' loop is known by its module and
function name (`nimblemcp.server._workers`, `Workers._work`; a transport never imports
the server), and tests/test_stdio_exit.py fails if that name drifts.
"""

from __future__ import annotations

import sys
import threading
from types import FrameType

__all__ = ["busy_pool_threads"]

# The loops an idle pool thread waits in (a blocking `get` on a queue, a C call, so
# the loop's own frame is the innermost Python frame while the thread is idle).
# Both known by (module, function name), so that neither module is imported here (a
# stdio server that never used a thread pool has not loaded `concurrent.futures.thread`,
# nor its `queue`: start-up, issue 18).
_POOL_LOOPS = frozenset({
    ("concurrent.futures.thread", "_worker"),
    ("nimblemcp.server._workers", "_work"),
})


def _is_pool_loop(frame: FrameType) -> bool:
    return (frame.f_globals.get("__name__"), frame.f_code.co_name) in _POOL_LOOPS


def _pool_thread_busy(frame: FrameType) -> bool | None:
    """True: a pool thread running work; False: an idle one; None: no pool thread."""
    if _is_pool_loop(frame):
        return False
    outer = frame.f_back
    while outer is not None:
        if _is_pool_loop(outer):
            return True
        outer = outer.f_back
    return None


def busy_pool_threads() -> list[str]:
    """The names of pool threads running work now (the calling thread excluded)."""
    me = threading.get_ident()
    names = {t.ident: t.name for t in threading.enumerate()}
    return [names.get(ident, str(ident)) for ident, frame in sys._current_frames().items()
            if ident != me and _pool_thread_busy(frame)]
