"""Event loop helpers: `running_loop()` and `maybe_await()`.

`maybe_await(value)` awaits what a callback returned when it is awaitable: callbacks
given to the client and the host may be sync or async.

`running_loop()` is the running event loop without a system call per lookup.

On Python 3.11 `asyncio.get_running_loop()` calls getpid() every time (a fork
check). On a loaded VM that one syscall was ~12% of an HTTP request's server time,
so the hot paths look the loop up here: the loop found last on this thread is the
answer while it is still running (two loops never run at once on one thread), and a
fork clears the cache. Python 3.12+ has no such cost and uses asyncio's own.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["maybe_await", "running_loop"]


async def maybe_await(value: Any) -> Any:
    """`value`, awaited first when it is awaitable (a sync or async callback's return)."""
    if inspect.isawaitable(value):
        return await value
    return value


running_loop: Callable[[], asyncio.AbstractEventLoop]

if sys.version_info >= (3, 12):
    running_loop = asyncio.get_running_loop
else:
    _seen = threading.local()

    def _running_loop() -> asyncio.AbstractEventLoop:
        loop: asyncio.AbstractEventLoop | None = getattr(_seen, "loop", None)
        if loop is None or not loop.is_running():
            loop = _seen.loop = asyncio.get_running_loop()
        return loop

    def _forget() -> None:
        _seen.__dict__.clear()

    running_loop = _running_loop
    os.register_at_fork(after_in_child=_forget)
