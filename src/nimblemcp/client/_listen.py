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
`closed` and ends iteration. Leaving the block cancels the listen (the transport
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
from nimblemcp.types._meta import SUBSCRIPTION_ID

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
        self.ack_timeout = ack_timeout if ack_timeout is not None else pipeline.retry.timeout
        #: The filter the server agreed to honour (from the latest acknowledgement).
        self.acknowledged: dict[str, Any] | None = None
        #: The id of the current listen request (changes on every re-listen).
        self.subscription_id: Any = None
        self.reconnects = 0
        self._got_ack_this_round = False
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
        while True:
            try:
                await self._listen_once(missed=self._acked.is_set())
                return  # graceful close
            except asyncio.CancelledError:
                raise
            except (_Dropped, TransportError) as exc:
                if self._got_ack_this_round:
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
            except Exception as exc:
                self._queue.put_nowait(exc)
                return

    async def _listen_once(self, *, missed: bool) -> None:
        """One `subscriptions/listen` through the pipeline: no timeout (TRAP-40), no
        re-send (re-listening is ours), every notification to `_on_notification`."""
        pipe = self.pipeline
        self._got_ack_this_round = False
        rid = pipe.next_id()
        self.subscription_id = rid

        def on_note(note: dict[str, Any], sent: int) -> None:
            self._on_notification(note, sent, missed)

        result = await pipe.run(
            "subscriptions/listen", {"notifications": self.requested}, timeout=None,
            cache=False, manual=True, retry=False, renegotiate=False, require_open=False,
            request_id=rid, on_note=on_note,
        )
        closing = {"jsonrpc": "2.0", "id": rid, "result": result}
        self._queue.put_nowait(ListenEvent("closed", None, closing, rid))

    def _on_notification(self, note: dict[str, Any], rid: Any, missed: bool) -> None:
        method = note.get("method")
        raw_params = note.get("params")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        raw_meta = params.get("_meta")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        sid = meta.get(SUBSCRIPTION_ID, rid)
        if sid != rid or type(sid) is not type(rid):  # SUB-05/06: not ours
            return
        if method == "notifications/cancelled":
            raise _Dropped(f"the server cancelled the listen: {params.get('reason')}")
        kind = _KINDS.get(method or "")
        if kind is None:
            logger.debug("ignoring %s on a listen stream", method)
            return
        self.pipeline.evict_for(note)  # CACHE-08
        uri = params.get("uri") if isinstance(params.get("uri"), str) else None
        if kind == "task_status":
            task_id = params.get("taskId")
            if isinstance(task_id, str):
                self._queue.put_nowait(ListenEvent(kind, None, note, rid, task_id))
            return
        if kind == "acknowledged":
            honoured = params.get("notifications")
            self.acknowledged = honoured if isinstance(honoured, dict) else {}
            self._got_ack_this_round = True
            self._acked.set()
            if missed:
                # The stream dropped: a list change may have been lost (a server that
                # restarted with new tools says nothing), so what is cached of the
                # lists listened to is stale (CACHE-08).
                for key, lists in _LEGACY_CAPS.items():
                    if self.acknowledged.get(key) is True:
                        self.pipeline.evict_for({"method": f"notifications/{lists}/list_changed"})
                self.reconnects += 1
                self._queue.put_nowait(ListenEvent("missed", None, note, rid))
                return
        self._queue.put_nowait(ListenEvent(kind, uri, note, rid))


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
