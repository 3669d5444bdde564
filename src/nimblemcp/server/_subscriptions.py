"""`subscriptions/listen`: the filter, the acknowledgement and the event stream (SUB-01..12).

The listen request is an ordinary long-running request: it emits the ack first, then
one notification per matching bus event on its own stream, each tagged with the
subscription id (the listen request's id, same JSON type). The client ends it by
closing the stream / `notifications/cancelled` (the task is cancelled); the server
ends it gracefully with the closing result, or, for a listener too slow to keep up,
with `notifications/cancelled` giving the reason. Task status notifications
(`notifications.taskIds`) are `_task_events`. Must not import transports.

A rolling restart moves listens, make-before-break (`move_listeners`, on SIGTERM under
`run_http`). A listen ends with the closing result (SUB-09) whose `_meta` carries
`LISTEN_AGAIN` ("listen again elsewhere"), a hint other clients may ignore. A client
that offers a hand-over (`_meta[HANDOVER]: true` on its listen request; nimblemcp's
does) gets a token in the acknowledgement's `_meta[HANDOVER]` and, at a rolling restart,
first the `MOVING` notification while its stream keeps delivering. It then sends a new
listen (through the balancer, to another instance) with `_meta[HANDOVER]: <token>`.
That listen subscribes, then publishes a marker on the bus and skips every event until
its own marker comes back: Redis delivers one order to every instance, so the events
before the marker are the old stream's (which ends with the closing result, `_meta
[HANDOVER]` naming its token, when the marker reaches it) and those after it the new
one's. Each event reaches the client once, in order, with no gap. A listen whose client
does not move within `ListenOptions.handover` seconds ends with `LISTEN_AGAIN` then; a
listen that reaches an instance already moving its listens ends with it at once. So
does every listen when the bus may have lost events (`GAP`: the Redis bus lost its
connection, or got it back): its client re-listens and hears `missed`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nimblemcp.backends.bus import GAP, Event, Match, NotificationBus, SlowListener
from nimblemcp.errors import InvalidParams
from nimblemcp.jsonrpc import encode
from nimblemcp.server._task_events import MAX_TASK_IDS, TaskWatch
from nimblemcp.types._meta import HANDOVER, LISTEN_AGAIN, MOVING, SUBSCRIPTION_ID

if TYPE_CHECKING:
    from nimblemcp.server._context import Context
    from nimblemcp.server._options import ListenOptions
    from nimblemcp.server._tasks import TaskManager

logger = logging.getLogger("nimblemcp.server")

# Bus events of the hand-over: `_MOVE` is published to this instance alone (uri None:
# move; `_OVER`: the window has passed, end now); `_HANDED` (uri: a listen's token)
# goes to every instance: the listen that takes over from that token is subscribed.
_MOVE, _OVER, _HANDED = "listen-move", "over", "listen-handed"

_LIST_FILTERS = (
    ("toolsListChanged", "tools", "notifications/tools/list_changed"),
    ("promptsListChanged", "prompts", "notifications/prompts/list_changed"),
    ("resourcesListChanged", "resources", "notifications/resources/list_changed"),
)


def honoured_filter(
    requested: Any, capabilities: dict[str, Any], max_uris: int = 1_000, max_chars: int = 256 * 1024,
) -> dict[str, Any]:
    """The subset of the filter this server will honour (SUB-01/03/11).

    A filter naming more than `max_uris` URIs, or URIs longer than `max_chars` in
    total, is refused (-32602): bounded memory per listener, and an acknowledgement
    that always fits the stream."""
    if not isinstance(requested, dict):
        raise InvalidParams("subscriptions/listen needs a 'notifications' object")
    honoured: dict[str, Any] = {}
    for key, cap, _method in _LIST_FILTERS:
        value = requested.get(key)  # type: ignore[union-attr]
        if value is not None and not isinstance(value, bool):
            raise InvalidParams(f"notifications.{key} must be a boolean")
        if value and isinstance(capabilities.get(cap), dict) and capabilities[cap].get("listChanged"):
            honoured[key] = True
    uris = requested.get("resourceSubscriptions")  # type: ignore[union-attr]
    if uris is not None:
        if not isinstance(uris, list):
            raise InvalidParams("notifications.resourceSubscriptions must be an array of strings")
        if len(uris) > max_uris:  # type: ignore[arg-type]
            raise InvalidParams(
                f"notifications.resourceSubscriptions names {len(uris)} URIs; "  # type: ignore[arg-type]
                f"this server accepts at most {max_uris} per listen")
        total = 0
        for u in uris:  # type: ignore[union-attr]
            if not isinstance(u, str):
                raise InvalidParams("notifications.resourceSubscriptions must be an array of strings")
            total += len(u)
        if total > max_chars:
            raise InvalidParams(
                f"notifications.resourceSubscriptions is {total} characters long; "
                f"this server accepts at most {max_chars} per listen")
        resources = capabilities.get("resources")
        if uris and isinstance(resources, dict) and resources.get("subscribe"):
            honoured["resourceSubscriptions"] = list(dict.fromkeys(uris))  # type: ignore[arg-type]
    return honoured


class _Covered:
    """SUB-11: the updates a listen hears: those of a subscribed URI or of a resource
    beneath one."""

    __slots__ = ("beneath", "uris")

    def __init__(self, uris: list[str]) -> None:
        self.uris = uris
        self.beneath = tuple(u.rstrip("/") + "/" for u in uris)

    def __contains__(self, uri: str) -> bool:
        return uri in self.uris or uri.startswith(self.beneath)


def _covers(subscribed: list[str], uri: str) -> bool:
    return uri in _Covered(subscribed)


def _notification(method: str, sid: Any, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"_meta": {SUBSCRIPTION_ID: sid}}
    if extra:
        params.update(extra)
    return {"jsonrpc": "2.0", "method": method, "params": params}


async def listen(
    ctx: Context, params: dict[str, Any], *, bus: NotificationBus, options: ListenOptions,
    capabilities: dict[str, Any], tasks: Callable[[], TaskManager], moving: Callable[[], bool],
) -> dict[str, Any]:
    """One `subscriptions/listen` request, over `bus`; `tasks` gives the server's task
    manager (only a listen asking for `taskIds` needs it); `moving()` says whether this
    instance is moving its listens away (a rolling restart)."""
    requested = params.get("notifications")
    honoured = honoured_filter(requested, capabilities, options.max_uris, options.max_filter_chars)
    sid = ctx.request_id
    methods = {cap: method for key, cap, method in _LIST_FILTERS if honoured.get(key)}
    uris: list[str] = honoured.get("resourceSubscriptions", [])
    offer = _handover_offer(params)
    token = secrets.token_urlsafe(12) if offer is not None else None
    takeover = offer if isinstance(offer, str) else None
    # Only matching events reach this stream (the bus indexes them); the task ids asked
    # for are a superset of those honoured, known before subscribing. Every listen hears
    # this instance's moves and its bus's gaps; one that offers a hand-over, the
    # markers of its own.
    markers = tuple((_HANDED, t) for t in (token, takeover) if t is not None)
    match = Match(kinds=(*methods, _MOVE, GAP), uris=uris, tasks=_requested_tasks(requested), keys=markers)
    ending: dict[str, Any] = {SUBSCRIPTION_ID: sid}
    async with bus.subscribe(options.queue, match=match) as events:
        watch = await TaskWatch.open(ctx, requested, tasks)  # after subscribing: no change missed
        if watch is not None:
            honoured["taskIds"] = watch.ids
        is_moving = moving()  # this instance is moving its listens: none may stay here
        if takeover is not None and not is_moving:  # from here on, its predecessor may end
            bus.publish(Event(_HANDED, takeover))
        ctx._send(_acknowledgement(sid, honoured, token))
        try:
            if is_moving:
                ending[LISTEN_AGAIN] = True
            else:
                await _deliver(ctx, events, watch, methods, uris, token, takeover, ending, options.handover)
        except SlowListener as exc:
            logger.warning("ending listen %r: %s", sid, exc)
            ctx._send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": sid, "reason": f"Listener too slow: {exc}"}})
        finally:
            if watch is not None:
                watch.close()  # its watchdog (shared store)
    return {"resultType": "complete", "_meta": ending}


def _acknowledgement(sid: Any, honoured: dict[str, Any], token: str | None) -> dict[str, Any]:
    ack = _notification("notifications/subscriptions/acknowledged", sid, {"notifications": honoured})
    if token is not None:
        ack["params"]["_meta"][HANDOVER] = token
    return ack


async def _deliver(
    ctx: Context, events: Any, tasks: TaskWatch | None, methods: dict[str, str], uris: list[str],
    token: str | None, takeover: str | None, ending: dict[str, Any], handover: float,
) -> None:
    """The stream after the acknowledgement, until the bus closes it or the listen has
    moved (`ending` then says how: `LISTEN_AGAIN`, or `HANDOVER` when its successor is
    live). Where the transport takes encoded messages (`emit_json`), a notification is
    the event's shared JSON (`_shared`) around this listen's id, encoded once here."""
    sid = ctx.request_id
    for task_id in tasks.ids if tasks is not None else ():
        current = await tasks.notification(task_id) if tasks is not None else None
        if current is not None:
            ctx._send(current)
    io = ctx._emit
    emit_json = getattr(io, "emit_json", None)
    sid_json = bytes(memoryview(encode(sid)))  # a copy: orjson's result holds a 4 KiB buffer
    covered = _Covered(uris)
    # A listen that takes over sends nothing its predecessor still delivers: the events
    # before its own marker comes back through the bus (at most `handover` seconds,
    # should the marker be lost).
    moving = False
    loop = asyncio.get_running_loop()
    skip_until = loop.time() + handover if takeover is not None else None
    async for event in events:
        kind = event.kind
        if kind == _MOVE:
            if event.uri == _OVER or token is None:
                ending[LISTEN_AGAIN] = True
                return
            if not moving:
                moving = True
                ctx._send(_notification(MOVING, sid))
            continue
        if kind == GAP:  # the bus may have lost events: the client re-listens, hearing `missed`
            ending[LISTEN_AGAIN] = True
            return
        if kind == _HANDED:
            if event.uri == takeover:
                skip_until = None
            elif moving:  # its successor is live: everything before it has been sent here
                ending[HANDOVER] = token
                return
            continue
        if skip_until is not None:
            if loop.time() < skip_until:
                continue
            skip_until = None
        if kind == "task":
            out = await tasks.notification(event.uri or "") if tasks is not None else None
            if out is not None:
                ctx._send(out)
            continue
        # The bus sends only what this listen's `Match` asked for; checked again here
        # for a bus that does not filter.
        if kind == "updated":
            uri = event.uri
            if uri is None or uri not in covered:
                continue
            method = "notifications/resources/updated"
        else:
            found = methods.get(kind)
            if found is None:
                continue
            method = found
        if emit_json is not None:
            head, tail = _shared(event, method)
            emit_json(head + sid_json + tail, sid)
        else:
            ctx._send(_notification(method, sid, None if kind != "updated" else {"uri": event.uri}))


# The JSON of an event's notification before and after the subscription id: what every
# listener of the event shares, encoded once (a few recent events kept).
_SHARED: dict[tuple[Event, str], tuple[bytes, bytes]] = {}
_SHARED_MAX = 256
_PLACE = "\x00sid"  # stands for the subscription id while the shared part is encoded
_PLACE_JSON = encode(_PLACE)


def _shared(event: Event, method: str) -> tuple[bytes, bytes]:
    key = (event, method)
    parts = _SHARED.get(key)
    if parts is None:
        extra = {"uri": event.uri} if event.kind == "updated" else None
        head, _, tail = encode(_notification(method, _PLACE, extra)).partition(_PLACE_JSON)
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        parts = _SHARED[key] = (head, tail)
    return parts


def move_listeners(server: Any, window: float) -> bool:
    """Tell every open listen of this instance to move (see the module docstring); those
    still open after `window` seconds end then. False when the bus cannot reach this
    instance's listens alone (`LocalBus`): nothing was done."""
    from nimblemcp.backends.bus import LocalBus

    bus = server.bus
    if not isinstance(bus, LocalBus):
        return False
    if not server.moving:  # (a second signal: already moving)
        server.moving = True
        bus.publish_local(Event(_MOVE))
        asyncio.get_running_loop().call_later(window, bus.publish_local, Event(_MOVE, _OVER))
    return True


def _handover_offer(params: dict[str, Any]) -> bool | str | None:
    """What the listen request's `_meta` offers: None (no hand-over), True (hand-overs
    welcome) or the token of the listen this one takes over from."""
    meta = params.get("_meta")
    offer = meta.get(HANDOVER) if isinstance(meta, dict) else None
    if offer is True or (isinstance(offer, str) and 0 < len(offer) <= 64):
        return offer  # type: ignore[no-any-return]
    return None


def _requested_tasks(requested: Any) -> list[str]:
    raw = requested.get("taskIds") if isinstance(requested, dict) else None  # type: ignore[union-attr]
    if not isinstance(raw, list) or len(raw) > MAX_TASK_IDS:  # type: ignore[arg-type]
        return []  # refused by TaskWatch.open
    return [t for t in raw if isinstance(t, str)]  # type: ignore[union-attr]
