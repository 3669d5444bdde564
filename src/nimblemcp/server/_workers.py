"""Worker threads for sync handlers, with a cheap hop back to the event loop.

`asyncio.to_thread` pays for a concurrent.futures Future, a chained asyncio Future and
one self-pipe write per call. Here a worker appends its result to its loop's inbox and
wakes the loop only when the inbox was empty, so under load one wake-up delivers many
results (about ten times cheaper per call measured in-process). Context variables are
copied as `to_thread` does. Workers are daemon threads started on demand, up to
`min(32, cpu + 4)`, and retired after `idle_timeout` seconds without work.

No head-of-line blocking: `submit` reserves a worker for each job (takes an idle
token, or starts a thread), so a job never waits behind a blocked one while the
pool has room. A job whose awaiting request was cancelled or disconnected before a
worker took it up is skipped at hand-off: abandoned sync calls never start; one
cancelled while it ran has its result dropped in the drain. A handler raising
StopIteration fails with RuntimeError (a future refuses StopIteration itself).

Idle workers wait under SCHED_BATCH (Linux; issue 18, round six). On a busy core a
worker woken by a submission used to preempt the loop thread at once, only to find the
GIL taken and sleep again: ~0.35 context switches per request under load. A worker that
waits as a batch thread is not allowed that wake-up preemption: it runs when the loop
yields the core. It switches back to its own policy as soon as `get` returns, before
any user code, so a handler, the threads it starts and its subprocesses run under the
policy they would have had (`SCHED_BATCH` for the whole thread, measured in round four,
leaked into all of those). Only a worker on a busy pool waits that way: one that found
a job already queued since it last slept. Called one request at a time, a worker never
finds one, and pays neither the two system calls (~9 us a call measured) nor a later
start; under load it sleeps about once per several jobs, and the switch is paid then,
never per job. A thread under any policy but SCHED_OTHER, another OS, or a refusal by
the system leaves the policy alone; `Workers(batch_wait=False)` turns it off.

`call` hands the values by position, or the keywords when given (a registered
function's are keywords). A job carries either values or keywords and the worker makes
one call form of the two.

The hot path takes no lock for a job queued on a full pool, on either side (see
`_reserve`), and the drain hands results over without asking each future first.
Must not import the registry, the dispatcher or transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from asyncio import InvalidStateError
from collections import deque
from collections.abc import Callable, Sequence
from contextvars import copy_context
from queue import Empty, SimpleQueue
from typing import Any

from nimblemcp._loop import running_loop

_MAX_WORKERS = min(32, (os.cpu_count() or 1) + 4)
_IDLE_TIMEOUT = 60.0  # seconds an idle worker thread lives before it exits


class _Inbox:
    """Results for one event loop, drained in batches on that loop.

    No lock: `deque.append` and `popleft` are atomic, and the order of the steps
    makes a wake-up impossible to lose. A worker appends, then asks for a drain
    unless one is pending; the drain clears `waiting` before it takes the items, so
    a result appended after that sees `waiting` false and asks again (at worst an
    empty extra drain)."""

    __slots__ = ("items", "loop", "waiting")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.items: deque[tuple[asyncio.Future[Any], bool, Any]] = deque()
        self.waiting = False  # a drain is scheduled on the loop

    def put(self, item: tuple[asyncio.Future[Any], bool, Any]) -> None:
        self.items.append(item)
        if self.waiting:
            return
        self.waiting = True
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            self.loop.call_soon_threadsafe(self.drain)

    def drain(self) -> None:
        self.waiting = False
        items = self.items
        pop = items.popleft
        while items:  # this loop is the only consumer: a non-empty deque pops
            future, ok, value = pop()
            # A future cancelled while its job ran refuses the value; asking
            # `cancelled()` first would cost a call per result (issue 18).
            try:
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
            except InvalidStateError:
                pass


class Workers:
    """A small thread pool for sync handlers; see the module docstring."""

    def __init__(
        self, max_workers: int = _MAX_WORKERS, idle_timeout: float = _IDLE_TIMEOUT, batch_wait: bool = True
    ) -> None:
        self.max_workers = max_workers
        self.idle_timeout = idle_timeout
        # Idle workers wait under SCHED_BATCH where the OS has it (read by each new
        # worker thread; see the module docstring).
        self.batch_wait = batch_wait
        self.jobs: SimpleQueue[Any] = SimpleQueue()
        self.lock = threading.Lock()
        self.threads = 0
        # One token per idle worker not yet reserved by a submitted job: list append
        # and pop are atomic under the GIL, so the hot path takes no lock for this.
        self.idle: list[None] = []
        self.skipped = 0  # jobs dropped at hand-off because nobody awaited them any more
        # One entry per job queued on a full pool: the next free workers take them
        # without a token. Appended under `lock`, popped without it (atomic).
        self.owed: list[None] = []
        self.inboxes: dict[asyncio.AbstractEventLoop, _Inbox] = {}
        # The last loop served and its inbox, as one tuple (replaced whole, so two
        # loops in two threads never see each other's inbox): no dict look-up per call.
        self.last: tuple[asyncio.AbstractEventLoop | None, _Inbox | None] = (None, None)

    def run(self, fn: Callable[..., Any], /, **kwargs: Any) -> asyncio.Future[Any]:
        """Run `fn(**kwargs)` in a worker; await the returned future for its result."""
        return self.call(running_loop(), fn, (), kwargs)

    def submit(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], kwargs: dict[str, Any]
    ) -> asyncio.Future[Any]:
        """`run` for a caller that already holds the running loop (no second look-up)."""
        return self.call(loop, fn, (), kwargs)

    def call(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], args: Sequence[Any],
        kwargs: dict[str, Any] | None = None,
    ) -> asyncio.Future[Any]:
        """`fn(*args)` in a worker, or `fn(**kwargs)` when keywords are given (a job makes
        one call form, see the module docstring); await the returned future for its
        result. The request path calls this directly: no wrapper frame per job."""
        last = self.last
        inbox = last[1] if last[0] is loop else self._inbox(loop)
        future: asyncio.Future[Any] = loop.create_future()
        self.jobs.put((inbox, future, copy_context(), fn, args, kwargs))
        idle = self.idle
        if idle:  # tested first: an empty pop raises, which costs more than the test
            try:
                idle.pop()  # reserve an idle worker for this job
                return future
            except IndexError:  # a retiring worker took the last token meanwhile
                pass
        elif self.threads >= self.max_workers:  # a full pool (most jobs under load): queued
            # for the next worker to free up, without the lock. `threads` only falls once a
            # retiring worker has given up its idle token, so a stale read here is the same
            # window the locked path has (see `_reserve`).
            self.owed.append(None)
            return future
        return self._reserve(future)

    def _reserve(self, future: asyncio.Future[Any]) -> asyncio.Future[Any]:
        """A worker for the job just queued when no idle one was free: a new one, or
        the next one to free up on a full pool (no head-of-line blocking while the
        pool has room)."""
        idle = self.idle
        with self.lock:
            spawn = self.threads < self.max_workers
            if spawn:
                self.threads += 1
            elif idle:
                try:
                    idle.pop()  # a worker freed up meanwhile
                except IndexError:
                    self.owed.append(None)
            else:
                self.owed.append(None)
        if spawn:  # a new worker, reserved for this job from the start
            threading.Thread(target=self._work, daemon=True, name="nimblemcp-worker").start()
        # else: the pool is full; the job waits for the first worker to free up
        return future

    def _inbox(self, loop: asyncio.AbstractEventLoop) -> _Inbox:
        """The inbox of `loop` (made on its first job), remembered as the last one."""
        inbox = self.inboxes.get(loop)
        if inbox is None:
            inbox = self.inboxes[loop] = _Inbox(loop)
            for old in [k for k in self.inboxes if k.is_closed()]:
                del self.inboxes[old]
        self.last = (loop, inbox)
        return inbox

    def _work(self) -> None:
        # The name `_work` and this module's are how transports/stdio/_stuck.py knows a
        # worker thread's frames (STDIO-06): keep both.
        get, empty, idle, owed = self.jobs.get, self.jobs.empty, self.idle, self.owed
        timeout = self.idle_timeout
        # Wait for jobs under SCHED_BATCH, run them under the thread's own policy.
        calm = _calm_policy() if self.batch_wait else None
        if calm is not None:
            setsched, mine, param = calm
        # True once this worker found a job already queued since it last slept: the
        # pool is busy, and its next wait is a calm one. Called one job at a time it
        # stays False, and the two system calls are not paid.
        busy = False
        while True:
            try:
                if not empty():  # a job waits: no policy switch (most `get`s under load)
                    busy = True
                    inbox, future, ctx, fn, args, kwargs = get(True, timeout)  # positional: no keyword parsing
                elif busy and calm is not None:  # about to sleep on a busy pool
                    busy = False
                    try:  # a wake-up from now on does not preempt the loop
                        setsched(0, _SCHED_BATCH, param)
                    except OSError:  # refused after all (the probe passed): wait as before
                        calm = None
                    try:
                        inbox, future, ctx, fn, args, kwargs = get(True, timeout)
                    finally:  # before any user code: its threads and children inherit this
                        if calm is not None:
                            try:
                                setsched(0, mine, param)
                            except OSError:  # the reverse of a call that just succeeded
                                calm = None
                else:
                    inbox, future, ctx, fn, args, kwargs = get(True, timeout)
            except Empty:
                try:
                    idle.pop()  # retire: one idle worker less
                except IndexError:
                    continue  # a job just reserved us: it is on its way
                with self.lock:
                    self.threads -= 1
                return
            if future.cancelled():  # the request is gone: never start its work
                self.skipped += 1
            else:
                try:  # one call form per job
                    if kwargs is None:
                        item = (future, True, ctx.run(fn, *args))
                    else:
                        item = (future, True, ctx.run(fn, **kwargs))
                except BaseException as exc:  # handed to the awaiting task, as to_thread does
                    item = (future, False, exc if not isinstance(exc, StopIteration) else _stopped(exc))
                inbox.put(item)
                del item
            del inbox, future, ctx, fn, args, kwargs
            if owed:  # a job queued on the full pool is ours, without a token
                try:
                    owed.pop()
                    continue
                except IndexError:  # another worker took it meanwhile
                    pass
            idle.append(None)


_SCHED_BATCH: int = getattr(os, "SCHED_BATCH", -1)


def _calm_policy() -> tuple[Callable[[int, int, Any], None], int, Any] | None:
    """What a worker needs to wait under SCHED_BATCH and switch back (Linux only):
    `os.sched_setscheduler`, the thread's own policy, its parameters. None where that
    is not possible: another OS, a thread under a real-time or other policy (left as it
    is), or a system that refuses the switch (seccomp, for one)."""
    setsched = getattr(os, "sched_setscheduler", None)
    other = getattr(os, "SCHED_OTHER", None)
    if setsched is None or other is None or _SCHED_BATCH < 0:
        return None
    try:
        mine = os.sched_getscheduler(0)
        if mine != other:
            return None
        param = os.sched_getparam(0)
        setsched(0, _SCHED_BATCH, param)  # try it once, and switch back at once
        setsched(0, mine, param)
    except OSError:
        return None
    return setsched, mine, param


def _stopped(exc: StopIteration) -> RuntimeError:
    """A future refuses StopIteration (TypeError in the drain, the request never
    answered and the rest of the batch held back), so it becomes the RuntimeError a
    generator would raise (PEP 479)."""
    err = RuntimeError("sync handler raised StopIteration")
    err.__cause__ = exc
    return err


_workers = Workers()


def run_sync(fn: Callable[..., Any], /, **kwargs: Any) -> asyncio.Future[Any]:
    """Run a sync handler in the shared worker threads."""
    return _workers.run(fn, **kwargs)


def run_sync_on(
    loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], kwargs: dict[str, Any]
) -> asyncio.Future[Any]:
    """`run_sync` when the caller already holds the running loop."""
    return _workers.call(loop, fn, (), kwargs)
