"""`Client.listen()`: a `subscriptions/listen` stream as typed events, with reconnect.

    async with client.listen(tools=True, resources=["docs://brief.md"]) as events:
        async for event in events:
            if event.kind == "missed":      # the stream dropped and came back
                ...refetch what you depend on...

Entering waits for the server's acknowledgement (`events.acknowledged` is the filter
it agreed to honour, `events.declined` what it left out: SUB-04). Every notification
carries the listen id as its subscription id; on stdio the transport routes by it, so
several listens share one connection (SUB-06). List changes and resource updates
evict the client cache (CACHE-08). A stream that ends without the closing result is a
drop (SUB-10): the listen is re-sent with backoff (at least an HTTP 429/503's
`Retry-After`, up to `RetryPolicy.max_retry_after`) and a `missed` event says events may
have been lost (the cached lists listened to are dropped). The closing result yields
`closed` and ends iteration, unless its `_meta` asks to listen again elsewhere (a server
stopping for a rolling restart): that is re-listened like a drop. Make-before-break: the
listen offers a hand-over (`_meta` `com.github.nimblemcp/handover`); when its server
says it is moving, a successor listen is opened (through the balancer, elsewhere) while
the old stream still delivers, and takes over once the old one ends: what the successor
received meanwhile is held back until then, so events arrive once and in order, and no
`missed` is yielded when the old stream confirms the hand-over (`handovers` counts
those; see `server/_subscriptions.py` for the server's part). Leaving the block cancels the listen (the transport
closes the stream or sends `notifications/cancelled`, SUB-08). The listen is exempt from request timeouts
(TRAP-40). On a 2025-11-25 connection (LEGC-05) the same API is served by the legacy
mechanisms: `resources/subscribe` per URI (when the server advertises
`resources.subscribe`; reference-counted across listeners, unsubscribed on exit) and
the session's untagged notifications (the GET stream on HTTP, the shared channel on
stdio); the acknowledgement is built from the server's advertised capabilities, and
there is nothing to re-listen (`subscription_id` is None).
The Listener sends through the client's `Pipeline` (ids, `_meta`, the era, cache eviction)
and, on a legacy connection, on its `LegacyEra` (subscriptions, session notifications).
Imports `_pipeline` and `_era`; must not import `_client`, transports or the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from nimblemcp.errors import ClientError, McpError, ServerBusy, TransportError
from nimblemcp.types._meta import HANDOVER, LISTEN_AGAIN, MOVING, SUBSCRIPTION_ID

from ._era import LegacyEra
from ._pipeline import Pipeline

__all__ = ["ListenEvent", "Listener", "listen_filter"]

logger = logging.getLogger("nimblemcp.client")

EventKind = Literal[
    "acknowledged", "tools_changed", "prompts_changed", "resources_changed",
    "resource_updated", "task_status", "missed", "closed",
]
_KINDS: dict[str, EventKind] = {
    "notifications/subscriptions/acknowledged": "acknowledged",
    "notifications/tools/list_changed": "tools_changed",
    "notifications/prompts/list_changed": "prompts_changed",
    "notifications/resources/list_changed": "resources_changed",
    "notifications/resources/updated": "resource_updated",
    "notifications/tasks": "task_status",  # tasks extension (SEP-2663)
}


@dataclass(frozen=True, slots=True)
class ListenEvent:
    """One thing that happened on a listen: `kind`, the `uri` for `resource_updated`,
    the wire message (`raw`; for `missed` the new acknowledgement), the id of the
    listen request that delivered it and, for `task_status`, the `task_id` (the full
    task state is `raw["params"]`, as `tasks/get` would answer)."""

    kind: EventKind
    uri: str | None = None
    raw: dict[str, Any] | None = field(default=None, repr=False)
    subscription_id: Any = None
    task_id: str | None = None


class _Dropped(Exception):
    """The stream ended without the closing result (SUB-10)."""


class _Round:
    """One `subscriptions/listen` request of a Listener: its id, the hand-over token its
    server gave (None: none), `moving` once the server said it is moving, and, while it
    waits to take over from the listen it succeeds (`takeover`), the events it holds
    back (`held`, with its acknowledgement `ack`). `missed`: events may have been lost
    before it (its acknowledgement yields a `missed` event)."""

    __slots__ = ("ack", "acked", "held", "missed", "moving", "rid", "takeover", "task", "token")

    def __init__(self, *, missed: bool, takeover: str | None = None) -> None:
        self.rid: Any = None
        self.token: str | None = None
        self.missed = missed
        self.takeover = takeover
        self.held: list[ListenEvent] | None = [] if takeover is not None else None
        self.ack: dict[str, Any] | None = None
        self.acked = False
        self.moving: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[dict[str, Any]] | None = None

    def put(self, queue: asyncio.Queue[ListenEvent | BaseException], event: ListenEvent) -> None:
        if self.held is not None:
            self.held.append(event)
        else:
            queue.put_nowait(event)


def _meta_of(result: dict[str, Any]) -> dict[str, Any]:
    meta = result.get("_meta")
    return meta if isinstance(meta, dict) else {}


class Listener:
    """The async context manager and async iterator `Client.listen()` returns."""

    def __init__(
        self,
        pipeline: Pipeline,
        legacy: LegacyEra,
        notifications: dict[str, Any],
        *,
        reconnect: bool = True,
        max_reconnects: int = 8,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        ack_timeout: float | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.legacy = legacy
        self.requested = notifications
        self.reconnect = reconnect
        self.max_reconnects = max_reconnects
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.ack_timeout = ack_timeout if ack_timeout is not None else pipeline.timeout
        #: The filter the server agreed to honour (from the latest acknowledgement).
        self.acknowledged: dict[str, Any] | None = None
        #: The id of the current listen request (changes on every re-listen).
        self.subscription_id: Any = None
        #: Re-listens after a drop or a move that may have lost events (each yielded `missed`).
        self.reconnects = 0
        #: Moves to another instance that lost nothing (a rolling restart, make-before-break).
        self.handovers = 0
        self._rounds: set[_Round] = set()
        self._queue: asyncio.Queue[ListenEvent | BaseException] = asyncio.Queue()
        self._acked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._finished = False
        self._legacy = False
        self._subscribed: list[str] = []

    @property
    def declined(self) -> dict[str, Any]:
        """What was asked for but not acknowledged: degrade (e.g. poll) for these (SUB-04)."""
        ack = self.acknowledged or {}
        missing: dict[str, Any] = {
            k: v for k, v in self.requested.items()
            if k not in _LISTS and v and not ack.get(k)
        }
        for key in _LISTS:
            left = [u for u in self.requested.get(key, []) if u not in (ack.get(key) or [])]
            if left:
                missing[key] = left
        return missing

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Listener:
        if await self.pipeline.ensure_era() == "legacy":
            await self._enter_legacy()
            return self
        self._task = asyncio.create_task(self._run(), name="nimblemcp-listen")
        waiter = asyncio.create_task(self._acked.wait())
        try:
            async with asyncio.timeout(self.ack_timeout):
                await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            await self._stop()
            raise ClientError("subscriptions/listen was not acknowledged in time") from None
        finally:
            waiter.cancel()
        if not self._acked.is_set():  # the first attempt failed outright
            await self._stop()
            while not self._queue.empty():
                item = self._queue.get_nowait()
                if isinstance(item, BaseException):
                    raise item
            raise ClientError("subscriptions/listen ended before its acknowledgement")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stop()

    async def _stop(self) -> None:
        if self._legacy:
            await self._leave_legacy()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()  # the transport cancels the listen on the wire (SUB-08)
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def __aiter__(self) -> AsyncIterator[ListenEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ListenEvent]:
        while not self._finished:
            item = await self._queue.get()
            if isinstance(item, BaseException):
                self._finished = True
                raise item
            if item.kind == "closed":
                self._finished = True
            yield item

    async def next(self, kinds: Sequence[str] | None = None) -> ListenEvent:
        """The next event (of one of `kinds`, when given); raises StopAsyncIteration at the end."""
        async for event in self:
            if kinds is None or event.kind in kinds:
                return event
        raise StopAsyncIteration

    # -- the background loop -----------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        delay = self.backoff
        current = self._start(_Round(missed=False))
        try:
            while True:
                outcome, successor = await self._follow(current)
                if successor is not None:  # it moved: the successor takes over
                    handed = isinstance(outcome, dict) and current.token is not None and _meta_of(
                        outcome).get(HANDOVER) == current.token
                    successor.missed = successor.missed or not handed
                    self._release(successor)
                    current, failures, delay = successor, 0, self.backoff
                    continue
                if isinstance(outcome, dict):  # the closing result (SUB-09)
                    if not _meta_of(outcome).get(LISTEN_AGAIN):
                        closing = {"jsonrpc": "2.0", "id": current.rid, "result": outcome}
                        self._queue.put_nowait(ListenEvent("closed", None, closing, current.rid))
                        return
                    # The server went away and asked us to listen again (elsewhere).
                    exc: BaseException = _Dropped("the server moved the listen")
                else:
                    exc = outcome
                if not isinstance(exc, _Dropped | TransportError):
                    self._queue.put_nowait(exc)
                    return
                if current.acked:
                    failures, delay = 0, self.backoff
                else:
                    failures += 1
                asked = exc.retry_after if isinstance(exc, ServerBusy) else None
                if (not self.reconnect or not self._acked.is_set() or failures > self.max_reconnects
                        or (asked is not None and asked > self.pipeline.retry.max_retry_after)):
                    self._queue.put_nowait(exc if isinstance(exc, McpError)
                                           else TransportError(str(exc)))
                    return
                wait = max(delay, asked or 0.0)  # a 429/503's Retry-After, when it named one
                logger.info("listen stream dropped (%s); re-listening in %.2f s", exc, wait)
                await asyncio.sleep(wait)
                delay = min(delay * 2, self.max_backoff)
                current = self._start(_Round(missed=True))
        finally:
            for rnd in self._rounds:
                if rnd.task is not None:
                    rnd.task.cancel()  # the transport cancels the listen on the wire (SUB-08)
            for rnd in list(self._rounds):
                if rnd.task is not None:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await rnd.task

    def _start(self, rnd: _Round) -> _Round:
        self._rounds.add(rnd)
        rnd.task = asyncio.create_task(self._listen_once(rnd), name="nimblemcp-listen-round")
        rnd.task.add_done_callback(lambda _task: self._rounds.discard(rnd))
        return rnd

    async def _follow(self, current: _Round) -> tuple[dict[str, Any] | BaseException, _Round | None]:
        """Wait for `current` to end: its closing result or what it raised. When its
        server says it is moving, open its successor meanwhile (make-before-break), and
        again after a pause should that fail (no other instance yet); return it too."""
        assert current.task is not None
        successor: _Round | None = None
        delay = self.backoff
        gap = False  # a successor that failed may have held events back
        while not current.task.done():
            if successor is None and current.moving.done():
                successor = self._start(_Round(missed=gap, takeover=current.token))
            pending: set[asyncio.Future[Any]] = {current.task}
            pending.add(successor.task if successor is not None and successor.task is not None
                        else current.moving)
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if current.task.done():
                break
            if successor is not None and successor.task is not None and successor.task.done():
                reason = None if successor.task.cancelled() else successor.task.exception()
                logger.info("listen: could not move yet (%s); again in %.2f s", reason, delay)
                gap = gap or successor.acked
                successor = None
                await asyncio.wait({current.task}, timeout=delay)
                delay = min(delay * 2, self.max_backoff)
        if current.task.cancelled():
            raise asyncio.CancelledError
        failure = current.task.exception()
        return (failure if failure is not None else current.task.result()), successor

    def _release(self, rnd: _Round) -> None:
        """A successor takes over: what it held back goes out now, after a `missed`
        when a gap was possible (the old stream did not confirm the hand-over)."""
        held, rnd.held = rnd.held or [], None
        self.subscription_id = rnd.rid
        if rnd.ack is not None:  # else `_on_notification` takes it when it comes
            self._acknowledge(rnd, rnd.ack)
        for event in held:
            self._queue.put_nowait(event)

    async def _listen_once(self, rnd: _Round) -> dict[str, Any]:
        """One `subscriptions/listen` through the pipeline: no timeout (TRAP-40), no
        re-send (re-listening is ours), every notification to `_on_notification`; the
        closing result. It offers a hand-over (`HANDOVER`): the token of the listen it
        takes over from, or True."""
        pipe = self.pipeline
        rid = pipe.next_id()
        rnd.rid = rid
        if rnd.held is None:
            self.subscription_id = rid

        def on_note(note: dict[str, Any], sent: int) -> None:
            self._on_notification(note, rnd)

        offer: str | bool = rnd.takeover if rnd.takeover is not None else True
        return await pipe.run(
            "subscriptions/listen", {"notifications": self.requested}, timeout=None,
            cache=False, manual=True, retry=False, renegotiate=False, require_open=False,
            request_id=rid, on_note=on_note, meta={HANDOVER: offer},
        )

    def _on_notification(self, note: dict[str, Any], rnd: _Round) -> None:
        method = note.get("method")
        raw_params = note.get("params")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        raw_meta = params.get("_meta")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        rid = rnd.rid
        sid = meta.get(SUBSCRIPTION_ID, rid)
        if sid != rid or type(sid) is not type(rid):  # SUB-05/06: not ours
            return
        if method == "notifications/cancelled":
            raise _Dropped(f"the server cancelled the listen: {params.get('reason')}")
        if method == MOVING:
            if rnd.token is not None and not rnd.moving.done():
                rnd.moving.set_result(None)
            return
        kind = _KINDS.get(method or "")
        if kind is None:
            logger.debug("ignoring %s on a listen stream", method)
            return
        self.pipeline.evict_for(note)  # CACHE-08
        uri = params.get("uri") if isinstance(params.get("uri"), str) else None
        if kind == "acknowledged":
            token = meta.get(HANDOVER)
            rnd.token = token if isinstance(token, str) else None
            rnd.acked = True
            if rnd.held is None:
                self._acknowledge(rnd, note)
            else:
                rnd.ack = note  # taken when it takes over
            return
        if kind == "task_status":
            task_id = params.get("taskId")
            if isinstance(task_id, str):
                rnd.put(self._queue, ListenEvent(kind, None, note, rid, task_id))
            return
        rnd.put(self._queue, ListenEvent(kind, uri, note, rid))

    def _acknowledge(self, rnd: _Round, note: dict[str, Any]) -> None:
        """The acknowledgement of the listen now current: the filter honoured, and the
        `missed` event when events may have been lost since the last one."""
        honoured = note["params"].get("notifications")
        self.acknowledged = honoured if isinstance(honoured, dict) else {}
        first = not self._acked.is_set()
        self._acked.set()
        if rnd.missed:
            # The stream dropped: a list change may have been lost (a server that
            # restarted with new tools says nothing), so what is cached of the lists
            # listened to is stale (CACHE-08).
            for key, lists in _LEGACY_CAPS.items():
                if self.acknowledged.get(key) is True:
                    self.pipeline.evict_for({"method": f"notifications/{lists}/list_changed"})
            self.reconnects += 1
            self._queue.put_nowait(ListenEvent("missed", None, note, rnd.rid))
        elif first:
            self._queue.put_nowait(ListenEvent("acknowledged", None, note, rnd.rid))
        else:
            self.handovers += 1  # moved to another instance without a gap

    # -- a 2025-11-25 connection (LEGC-05) ----------------------------------------------

    async def _enter_legacy(self) -> None:
        legacy = self.legacy
        caps = (legacy.initialized or {}).get("capabilities") or {}
        ack: dict[str, Any] = {}
        for key, cap in _LEGACY_CAPS.items():
            if self.requested.get(key) and isinstance(caps.get(cap), dict) and caps[cap].get("listChanged"):
                ack[key] = True
        uris: list[str] = self.requested.get("resourceSubscriptions") or []
        resources = caps.get("resources")
        if uris and isinstance(resources, dict) and resources.get("subscribe"):
            counts = legacy.subscriptions
            self._legacy = True  # from here on, _leave_legacy undoes what was done
            for uri in uris:
                if counts.get(uri, 0) == 0:
                    try:
                        await legacy.call("resources/subscribe", {"uri": uri})
                    except BaseException:
                        await self._leave_legacy()
                        raise
                counts[uri] = counts.get(uri, 0) + 1
                self._subscribed.append(uri)
            ack["resourceSubscriptions"] = list(uris)
        self._legacy = True
        self.acknowledged = ack
        legacy.listeners.add(self)
        self._acked.set()
        note = {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                "params": {"notifications": ack}}
        self._queue.put_nowait(ListenEvent("acknowledged", None, note, None))

    def deliver_legacy(self, note: dict[str, Any]) -> None:
        """A session notification (already evicted from the cache by the client)."""
        kind = _KINDS.get(note.get("method") or "")
        ack = self.acknowledged or {}
        if kind is None or kind in ("acknowledged", "task_status"):
            return
        raw = note.get("params")
        params: dict[str, Any] = raw if isinstance(raw, dict) else {}
        uri = params.get("uri") if isinstance(params.get("uri"), str) else None
        if kind == "resource_updated":
            if uri not in self._subscribed:
                return
        elif not ack.get(_LEGACY_KEYS[kind]):
            return
        self._queue.put_nowait(ListenEvent(kind, uri, note, None))

    async def _leave_legacy(self) -> None:
        legacy = self.legacy
        self._legacy = False
        legacy.listeners.discard(self)
        counts = legacy.subscriptions
        subscribed, self._subscribed = self._subscribed, []
        for uri in subscribed:
            counts[uri] -= 1
            if counts[uri] <= 0:
                del counts[uri]
                if self.pipeline.is_open:
                    try:
                        await legacy.call("resources/unsubscribe", {"uri": uri})
                    except Exception as exc:  # best effort: the session may be gone
                        logger.info("could not unsubscribe %s: %s", uri, exc)


_LEGACY_CAPS = {"toolsListChanged": "tools", "promptsListChanged": "prompts",
                "resourcesListChanged": "resources"}
_LEGACY_KEYS = {"tools_changed": "toolsListChanged", "prompts_changed": "promptsListChanged",
                "resources_changed": "resourcesListChanged"}


_LISTS = ("resourceSubscriptions", "taskIds")  # filter keys that hold lists


def listen_filter(*, tools: bool, prompts: bool, resources_list: bool,
                  resources: Sequence[str], tasks: Sequence[str] = ()) -> dict[str, Any]:
    """The `notifications` filter of a `subscriptions/listen` request (SUB-01); `tasks`:
    task ids to get `notifications/tasks` about (tasks extension)."""
    wanted: dict[str, Any] = {}
    if tools:
        wanted["toolsListChanged"] = True
    if prompts:
        wanted["promptsListChanged"] = True
    if resources_list:
        wanted["resourcesListChanged"] = True
    if resources:
        wanted["resourceSubscriptions"] = list(resources)
    if tasks:
        wanted["taskIds"] = list(tasks)
    return wanted
