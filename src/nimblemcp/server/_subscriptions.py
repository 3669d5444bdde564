"""`subscriptions/listen`: the filter, the acknowledgement and the event stream (SUB-01..12).

The listen request is an ordinary long-running request: it emits the ack first, then
one notification per matching bus event on its own stream, each tagged with the
subscription id (the listen request's id, same JSON type). The client ends it by
closing the stream / `notifications/cancelled` (the task is cancelled); the server
ends it gracefully with the closing result, or, for a listener too slow to keep up,
with `notifications/cancelled` giving the reason. Task status notifications
(`notifications.taskIds`) are `_task_events`. Must not import transports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nimblemcp.backends.bus import Event, Match, NotificationBus, SlowListener
from nimblemcp.errors import InvalidParams
from nimblemcp.server._task_events import MAX_TASK_IDS, TaskWatch
from nimblemcp.types._meta import SUBSCRIPTION_ID

if TYPE_CHECKING:
    from nimblemcp.server._context import Context
    from nimblemcp.server._options import ListenOptions
    from nimblemcp.server._tasks import TaskManager

logger = logging.getLogger("nimblemcp.server")

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


def _covers(subscribed: list[str], uri: str) -> bool:
    """An update to `uri` matches a subscribed URI or a resource beneath it (SUB-11)."""
    return any(uri == s or uri.startswith(s.rstrip("/") + "/") for s in subscribed)


def _notification(method: str, sid: Any, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"_meta": {SUBSCRIPTION_ID: sid}}
    if extra:
        params.update(extra)
    return {"jsonrpc": "2.0", "method": method, "params": params}


async def listen(
    ctx: Context, params: dict[str, Any], *, bus: NotificationBus, options: ListenOptions,
    capabilities: dict[str, Any], tasks: Callable[[], TaskManager],
) -> dict[str, Any]:
    """One `subscriptions/listen` request, over `bus`; `tasks` gives the server's task
    manager (only a listen asking for `taskIds` needs it)."""
    requested = params.get("notifications")
    honoured = honoured_filter(requested, capabilities, options.max_uris, options.max_filter_chars)
    sid = ctx.request_id
    methods = {cap: method for key, cap, method in _LIST_FILTERS if honoured.get(key)}
    uris: list[str] = honoured.get("resourceSubscriptions", [])
    # Only matching events reach this stream (the bus indexes them); the task ids asked
    # for are a superset of those honoured, known before subscribing.
    match = Match(kinds=tuple(methods), uris=uris, tasks=_requested_tasks(requested))
    async with bus.subscribe(options.queue, match=match) as events:
        watch = await TaskWatch.open(ctx, requested, tasks)  # after subscribing: no change missed
        if watch is not None:
            honoured["taskIds"] = watch.ids
        ctx._send(_notification("notifications/subscriptions/acknowledged", sid, {"notifications": honoured}))
        try:
            if watch is not None:
                for task_id in watch.ids:
                    current = await watch.notification(task_id)
                    if current is not None:
                        ctx._send(current)
            async for event in events:
                if event.kind == "task":
                    out = await watch.notification(event.uri or "") if watch is not None else None
                else:
                    out = _translate(event, methods, uris, sid)
                if out is not None:
                    ctx._send(out)
        except SlowListener as exc:
            logger.warning("ending listen %r: %s", sid, exc)
            ctx._send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": sid, "reason": f"Listener too slow: {exc}"}})
        finally:
            if watch is not None:
                watch.close()  # its watchdog (shared store)
    return {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: sid}}


def _requested_tasks(requested: Any) -> list[str]:
    raw = requested.get("taskIds") if isinstance(requested, dict) else None  # type: ignore[union-attr]
    if not isinstance(raw, list) or len(raw) > MAX_TASK_IDS:  # type: ignore[arg-type]
        return []  # refused by TaskWatch.open
    return [t for t in raw if isinstance(t, str)]  # type: ignore[union-attr]


def _translate(event: Event, methods: dict[str, str], uris: list[str], sid: Any) -> dict[str, Any] | None:
    if event.kind == "updated":
        if event.uri is not None and _covers(uris, event.uri):
            return _notification("notifications/resources/updated", sid, {"uri": event.uri})
        return None
    method = methods.get(event.kind)
    return _notification(method, sid) if method else None
