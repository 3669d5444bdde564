"""What a host hears from all its servers: `ServerState`, `HostEvent`, `EventStream`.

Every event is tagged with the server it came from. Kinds:
- `status`: the server's `ServerState` changed (connecting, connected, failed, ...);
- `tools_changed`, `prompts_changed`, `resources_changed`: the catalog was refreshed
  after the server said its list changed (so `group.catalog` is already current);
- `resource_updated`: a subscribed resource changed (`uri`);
- `log`: a `notifications/message` (the params are in `raw`);
- `progress`: a tool call's progress (`raw` holds `tool`, `progress`, `total`, `message`);
- `warning`: something the server sent was refused or left out (malformed list items,
  a list past its caps, a re-list that failed or ran out of time); `raw["message"]`.

`group.events()` opens one `EventStream`; each stream has its own queue and only
receives what happens while it is open (nothing is buffered for absent readers).
Pure data plus an asyncio queue; imports nothing from nimblemcp.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

__all__ = ["EventKind", "EventStream", "HostEvent", "ServerState", "Status"]

Status = Literal["connecting", "connected", "failed", "disabled", "closed"]
EventKind = Literal[
    "status", "tools_changed", "prompts_changed", "resources_changed", "resource_updated",
    "log", "progress", "warning",
]


@dataclass(frozen=True, slots=True)
class ServerState:
    """One server's health as the group sees it (a new object on every change).

    `error` is the last failure; `attempts` counts failed attempts since the last
    stable connection (one that was lost within `Supervision.stable_after` counts as
    failed); `retry_in` is the delay before the next attempt when one is planned: a
    `failed` server with no `retry_in` is given up (its `error` says why)."""

    name: str
    status: Status
    error: str | None = None
    attempts: int = 0
    retry_in: float | None = None
    era: str | None = None
    server_info: Mapping[str, Any] | None = field(default=None, repr=False)
    transport: str = "stdio"


@dataclass(frozen=True, slots=True)
class HostEvent:
    """One event of one server (see the module docstring for the kinds)."""

    server: str
    kind: EventKind
    uri: str | None = None
    state: ServerState | None = None
    raw: Mapping[str, Any] | None = field(default=None, repr=False)


class EventStream:
    """`async with group.events() as events: async for event in events: ...`"""

    def __init__(self, attach: Callable[[EventStream], None],
                 detach: Callable[[EventStream], None]) -> None:
        self._attach = attach
        self._detach = detach
        self._queue: asyncio.Queue[HostEvent | None] = asyncio.Queue()
        self._open = False

    def put(self, event: HostEvent) -> None:
        self._queue.put_nowait(event)

    def end(self) -> None:
        """The group closed: iteration stops after the events already queued."""
        self._queue.put_nowait(None)

    async def __aenter__(self) -> EventStream:
        self._attach(self)
        self._open = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._open = False
        self._detach(self)

    def __aiter__(self) -> AsyncIterator[HostEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[HostEvent]:
        while True:
            event = await self._queue.get()
            if event is None:
                return
            yield event

    async def next(
        self, kinds: Collection[str] | None = None, *, server: str | None = None,
        where: Callable[[HostEvent], bool] | None = None,
    ) -> HostEvent:
        """The next event matching `kinds`, `server` and `where` (all optional)."""
        async for event in self:
            if kinds is not None and event.kind not in kinds:
                continue
            if server is not None and event.server != server:
                continue
            if where is not None and not where(event):
                continue
            return event
        raise StopAsyncIteration
