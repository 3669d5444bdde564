"""The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663; CHECKLIST 22).

A task-supporting tool called by a client that declares the extension answers a
`CreateTaskResult` (`resultType: "task"`) once the task record is durably stored, and
runs in the background. Its MRTR questions become the task's `inputRequests` (keys
unique for the task's life); `tasks/update` stores answers, `tasks/get` reads the
record, `tasks/cancel` is cooperative. Records live in the server's KeyValueStore, so
any instance can answer `tasks/get`/`update`/`cancel`; the running instance polls the
record for answers and cancellation (and is woken at once when they arrive locally).
Task ids are unguessable and bound to the caller's subject (TASK-13).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from nimblemcp.errors import InternalError, InvalidParams, MissingClientCapability, ProtocolError
from nimblemcp.server._mrtr import Asker, run_answering
from nimblemcp.types._meta import TASKS_EXTENSION as TASKS_EXTENSION  # re-exported
from nimblemcp.types._versions import MODERN_VERSIONS

_MODERN = frozenset(MODERN_VERSIONS)

if TYPE_CHECKING:
    from nimblemcp.server._context import Context
    from nimblemcp.server._server import Server
    from nimblemcp.server._tools import ToolEntry

logger = logging.getLogger("nimblemcp.server")

TERMINAL = frozenset({"completed", "failed", "cancelled"})
_PREFIX = "task:"
REQUIRED: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}


def client_supports_tasks(ctx: Context) -> bool:
    """The client declared the extension on a 2026-era request. Under 2025-11-25 the
    extension does not exist (SEP-2663), whatever a legacy client's capabilities say."""
    if ctx.protocol_version not in _MODERN:
        return False
    extensions = ctx.client_capabilities.get("extensions")
    return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class BecomeTask(BaseException):
    """The handler asked to continue as a task from here on."""


class TaskManager:
    """Creates, runs and answers for tasks of one server."""

    def __init__(self, server: Server, *, ttl_ms: int = 3_600_000, poll_interval_ms: int = 500) -> None:
        self.server = server
        self.ttl_ms = ttl_ms
        self.poll_interval_ms = poll_interval_ms
        self.running: dict[str, asyncio.Task[None]] = {}
        self.wakeups: dict[str, asyncio.Event] = {}

    # -- the record ---------------------------------------------------------------------

    async def _load(self, task_id: Any, subject: str | None) -> dict[str, Any]:
        if not isinstance(task_id, str) or not task_id:
            raise InvalidParams("taskId must be a non-empty string")
        raw = await self.server.store.get(_PREFIX + task_id)
        record = orjson.loads(raw) if raw is not None else None
        if record is None or record.get("sub") != subject:
            raise InvalidParams(f"Unknown or expired task: {task_id}")  # TASK-09
        return record  # type: ignore[no-any-return]

    async def _save(self, record: dict[str, Any]) -> None:
        record["lastUpdatedAt"] = _now()
        await self.server.store.set(_PREFIX + record["taskId"], orjson.dumps(record), self.ttl_ms / 1000)

    @staticmethod
    def public(record: dict[str, Any]) -> dict[str, Any]:
        """The wire `Task` fields of a record (no requestState, no private keys)."""
        keys = ("taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttlMs",
                "pollIntervalMs", "result", "error", "inputRequests")
        out = {k: record[k] for k in keys if k in record}
        if not out.get("inputRequests"):
            out.pop("inputRequests", None)
        return out

    # -- creating and running -----------------------------------------------------------------

    async def create(
        self, ctx: Context, run: Callable[[Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """Store a new task, start `run(ask)` in the background, answer CreateTaskResult."""
        task_id = secrets.token_urlsafe(18)
        now = _now()
        record: dict[str, Any] = {
            "taskId": task_id, "status": "working", "createdAt": now, "lastUpdatedAt": now,
            "ttlMs": self.ttl_ms, "pollIntervalMs": self.poll_interval_ms, "sub": ctx.subject,
            "answers": {}, "asked": 0,
        }
        await self._save(record)  # durable before we answer (TASK-04)
        self.wakeups[task_id] = asyncio.Event()
        runner = asyncio.get_running_loop().create_task(self._run(task_id, ctx.subject, run))
        self.running[task_id] = runner
        runner.add_done_callback(lambda _t: self._forget(task_id))
        return {"resultType": "task", **self.public(record)}

    async def _run(self, task_id: str, subject: str | None, run: Callable[..., Awaitable[dict[str, Any]]]) -> None:
        try:
            result = await run(lambda requests: self._ask(task_id, subject, requests))
            final: dict[str, Any] = {"status": "completed", "result": result}
        except ProtocolError as exc:
            final = {"status": "failed", "error": exc.to_wire()}
        except asyncio.CancelledError:
            final = {"status": "cancelled"}
        except Exception:
            logger.exception("task %s failed", task_id)
            final = {"status": "failed", "error": InternalError().to_wire()}
        finally:
            self._forget(task_id)
        try:
            record = await self._load(task_id, subject)
        except InvalidParams:
            return  # expired meanwhile
        if record["status"] in TERMINAL:
            return
        record.update(final)
        record.pop("inputRequests", None)
        await self._save(record)
        self.server.bus.publish(_task_event(task_id))

    def _forget(self, task_id: str) -> None:
        self.running.pop(task_id, None)
        self.wakeups.pop(task_id, None)

    async def _ask(self, task_id: str, subject: str | None, requests: dict[str, Any]) -> dict[str, Any]:
        """Park the task in input_required until every question is answered."""
        record = await self._load(task_id, subject)
        round_no = record["asked"] = record["asked"] + 1
        wire = {f"r{round_no}.{key}": request for key, request in requests.items()}  # TASK-07
        record.update(status="input_required", inputRequests=wire)
        await self._save(record)
        self.server.bus.publish(_task_event(task_id))
        wake = self.wakeups.get(task_id)
        while True:
            record = await self._load(task_id, subject)
            if record.get("cancel"):
                raise asyncio.CancelledError
            answers = record.get("answers", {})
            if all(k in answers for k in wire):
                record["status"] = "working"
                record.pop("inputRequests", None)
                await self._save(record)
                self.server.bus.publish(_task_event(task_id))
                return {k.split(".", 1)[1]: answers[k] for k in wire}
            if wake is not None:
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self.poll_interval_ms / 1000)
            else:
                await asyncio.sleep(self.poll_interval_ms / 1000)

    # -- the tasks/* methods --------------------------------------------------------------------

    def _gate(self, ctx: Context) -> None:
        if not client_supports_tasks(ctx):
            raise MissingClientCapability(REQUIRED)  # TASK-09

    async def get(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        self._gate(ctx)
        record = await self._load(params.get("taskId"), ctx.subject)
        return {"resultType": "complete", **self.public(record)}

    async def update(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        self._gate(ctx)
        responses = params.get("inputResponses")
        if not isinstance(responses, dict):
            raise InvalidParams("tasks/update needs an inputResponses object")
        record = await self._load(params.get("taskId"), ctx.subject)
        pending: dict[str, Any] = record.get("inputRequests") or {}
        taken = {k: v for k, v in responses.items() if k in pending and isinstance(v, dict)}  # type: ignore[union-attr]
        if taken and record["status"] not in TERMINAL:
            record["answers"].update(taken)
            record["inputRequests"] = {k: v for k, v in pending.items() if k not in taken}
            await self._save(record)
            wake = self.wakeups.get(record["taskId"])
            if wake is not None:
                wake.set()
        return {"resultType": "complete"}

    async def cancel(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        self._gate(ctx)
        record = await self._load(params.get("taskId"), ctx.subject)
        if record["status"] not in TERMINAL:
            # Record the outcome first: a runner on another instance polls for it, and
            # a local one may not even have started yet.
            record["cancel"] = True
            record["status"] = "cancelled"
            record.pop("inputRequests", None)
            await self._save(record)
            self.server.bus.publish(_task_event(record["taskId"]))
            runner = self.running.get(record["taskId"])
            if runner is not None:
                runner.cancel()
        return {"resultType": "complete"}


def _task_event(task_id: str) -> Any:
    from nimblemcp.backends.bus import Event

    return Event("task", task_id)


async def call_tool(server: Server, ctx: Context, tool: ToolEntry, arguments: dict[str, Any]) -> dict[str, Any]:
    """`tools/call` of a task-supporting tool: a task for declaring clients (TASK-02/03)."""
    if not client_supports_tasks(ctx):
        if tool.task == "required":
            raise MissingClientCapability(REQUIRED)  # TASK-03
        return await tool.call(ctx, arguments)
    if tool.defer_task:
        ctx.task_mode = "deferred"
        try:
            return await tool.call(ctx, arguments)
        except BecomeTask:
            pass

    async def run(ask: Asker) -> dict[str, Any]:
        ctx.task_mode = "running"
        ctx._emit = None  # no response stream any more
        return await run_answering(lambda: tool.call(ctx, arguments), ctx, ask)

    return await server.tasks.create(ctx, run)
