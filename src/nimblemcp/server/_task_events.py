"""Task status notifications on `subscriptions/listen` (tasks extension, SEP-2663).

A listen request may ask for `notifications/tasks` about given task ids
(`notifications.taskIds`). Only a client that declares the
`io.modelcontextprotocol/tasks` extension may ask (-32021 otherwise). The server
honours the ids of tasks it knows and that belong to the caller's subject (a task id
of another subject is treated like an unknown one: no existence leak, TASK-13); the
acknowledgement lists the honoured ids. Right after the acknowledgement each honoured
task's current state is sent once (closes the race between `tools/call` answering
and the listen starting), then one notification per state change: the task manager
publishes `Event("task", task_id)` on the bus, and the listener reads the record from
the store, so a change made on another instance is seen too. Each notification
carries the full `DetailedTask`, the same as `tasks/get` would answer at that moment.
With a shared store, a watchdog re-reads the watched unfinished tasks every half
`TaskOptions.lease` while the listen is open (a lease cannot lapse sooner): a task whose instance died
publishes no change, so reading it is what marks it failed (the task manager then
publishes that change, and this listen notifies like for any other). `close()` stops
the watchdog when the listen ends.

Imports `errors`, `types` and (for typing) the server's tasks module; never transports.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nimblemcp.errors import InvalidParams, MissingClientCapability
from nimblemcp.types._meta import SUBSCRIPTION_ID

if TYPE_CHECKING:
    from nimblemcp.server._context import Context
    from nimblemcp.server._tasks import TaskManager

__all__ = ["MAX_TASK_IDS", "TaskWatch"]

logger = logging.getLogger("nimblemcp.server")

# An upper bound on ids per listen: each one costs a store read per change.
MAX_TASK_IDS = 1000


class TaskWatch:
    """The `taskIds` part of one listen: which tasks, and how to notify about them."""

    __slots__ = ("_dog", "ctx", "ids", "manager", "sid")

    def __init__(self, ctx: Context, ids: list[str], manager: TaskManager) -> None:
        self.ctx = ctx
        self.ids = ids
        self.manager = manager
        self.sid = ctx.request_id
        self._dog: asyncio.Task[None] | None = None
        if ids and manager.shared:
            self._dog = asyncio.get_running_loop().create_task(self._watch())

    def close(self) -> None:
        """The listen ended: stop the watchdog."""
        if self._dog is not None:
            self._dog.cancel()
            self._dog = None

    async def _watch(self) -> None:
        from nimblemcp.server._tasks import TERMINAL

        manager = self.manager
        pending = list(self.ids)
        while pending:
            await asyncio.sleep(manager.lease / 2)
            still: list[str] = []
            for task_id in pending:
                try:
                    record = await manager.read(task_id, self.ctx.subject)  # marks a dead one failed
                except InvalidParams:
                    continue  # expired
                except Exception as exc:  # the store is away: look again next time
                    logger.warning("task watch: cannot read task %s (%s)", task_id, exc)
                    still.append(task_id)
                    continue
                if record["status"] not in TERMINAL:
                    still.append(task_id)
            pending = still

    @classmethod
    async def open(cls, ctx: Context, requested: Any, tasks: Callable[[], TaskManager]) -> TaskWatch | None:
        """Check `notifications.taskIds` and keep the ids this server will honour;
        None when the client asked for none. `tasks` gives the server's task manager."""
        if not isinstance(requested, dict):
            return None
        raw = requested.get("taskIds")  # type: ignore[union-attr]
        if raw is None:
            return None
        if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):  # type: ignore[union-attr]
            raise InvalidParams("notifications.taskIds must be an array of strings")
        if len(raw) > MAX_TASK_IDS:  # type: ignore[arg-type]
            raise InvalidParams(f"notifications.taskIds allows at most {MAX_TASK_IDS} ids")
        from nimblemcp.server._tasks import REQUIRED, client_supports_tasks

        if not client_supports_tasks(ctx):
            raise MissingClientCapability(REQUIRED)
        manager = tasks()
        honoured: list[str] = []
        for task_id in dict.fromkeys(raw):  # type: ignore[var-annotated]
            try:
                await manager.read(task_id, ctx.subject)
            except InvalidParams:
                continue  # unknown, expired or someone else's: not honoured
            honoured.append(task_id)
        return cls(ctx, honoured, manager)

    async def notification(self, task_id: str) -> dict[str, Any] | None:
        """`notifications/tasks` with the task's current state; None when it is not
        watched or has expired."""
        if task_id not in self.ids:
            return None
        manager = self.manager
        try:
            record = await manager.read(task_id, self.ctx.subject)
        except InvalidParams:
            return None
        params = {**manager.public(record), "_meta": {SUBSCRIPTION_ID: self.sid}}
        return {"jsonrpc": "2.0", "method": "notifications/tasks", "params": params}
