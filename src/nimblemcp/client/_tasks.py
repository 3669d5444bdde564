"""Tasks on the client (`io.modelcontextprotocol/tasks`, CHECKLIST 22).

A client built with `tasks=True` declares the extension on every modern request
(TASK-01). `tools/call` may then answer a `CreateTaskResult`; `call_tool` waits for it
transparently through `wait_task`: it polls `tasks/get` at the server's
`pollIntervalMs` (clamped between a floor and a cap, TASK-06), answers each
`input_required` round with the same callbacks as MRTR, every key once (TASK-07),
returns the inlined result of a `completed` task, raises the inlined JSON-RPC error of a
`failed` one and `TaskCancelled` for a `cancelled` one. When the caller stops waiting
(cancellation, `timeout`, a refused input request) the task is cancelled with
`tasks/cancel`, never `notifications/cancelled` (TASK-08). `get_task`, `update_task`,
`cancel_task` and `wait_task` are the lower-level handle API.

`Tasks` is the collaborator the Client holds; it works on the client's `Pipeline`.
Imports `_pipeline` and below; must not import `_client`, transports or the server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from nimblemcp._loop import maybe_await
from nimblemcp.errors import (
    ClientError,
    RequestTimeout,
    TaskCancelled,
    TasksNotDeclared,
    error_from_wire,
)
from nimblemcp.types._meta import TASKS_EXTENSION

from ._mrtr import answer_round
from ._options import TaskPolicy
from ._pipeline import Pipeline

__all__ = [
    "TASKS_EXTENSION",
    "TaskCancelled",
    "TaskStatusCallback",
    "Tasks",
    "TasksNotDeclared",
    "with_tasks",
]

logger = logging.getLogger("nimblemcp.client")

TERMINAL = frozenset({"completed", "failed", "cancelled"})
#: Called with the task (as `tasks/get` returned it) whenever its status changes.
TaskStatusCallback = Callable[[dict[str, Any]], Any]
_DEFAULT_INTERVAL = 1.0  # seconds, when the server gives no pollIntervalMs


def with_tasks(extensions: Mapping[str, Any] | None, enabled: bool) -> dict[str, Any] | None:
    """The `extensions` capability with the tasks extension added when `enabled`."""
    if not enabled:
        return dict(extensions) if extensions is not None else None
    out = dict(extensions or {})
    out.setdefault(TASKS_EXTENSION, {})
    return out


def _task_id(task: str | Mapping[str, Any]) -> str:
    value = task if isinstance(task, str) else task.get("taskId")
    if not isinstance(value, str) or not value:
        raise ClientError(f"not a task id or task: {task!r}")
    return value


class Tasks:
    """Following and steering tasks for one Client."""

    def __init__(self, pipeline: Pipeline, policy: TaskPolicy) -> None:
        self.pipeline = pipeline
        self.policy = policy
        self._cancel_senders: set[asyncio.Task[Any]] = set()

    async def _task_request(self, method: str, params: dict[str, Any], **kw: Any) -> dict[str, Any]:
        pipe = self.pipeline
        await pipe.ensure_era()
        if not pipe.accepts_tasks:
            raise TasksNotDeclared(
                f"{method} needs the tasks extension: build the Client with tasks=True"
                + (" (and a 2026-07-28 server)" if pipe.era == "legacy" else "")
            )
        kw.setdefault("retry", True)  # all three are safe to repeat (TASK-07/08)
        return await pipe.run(method, params, cache=False, **kw)

    async def get_task(self, task: str | Mapping[str, Any], **kw: Any) -> dict[str, Any]:
        return await self._task_request("tasks/get", {"taskId": _task_id(task)}, **kw)

    async def update_task(
        self, task: str | Mapping[str, Any], responses: Mapping[str, Any], **kw: Any
    ) -> None:
        await self._task_request(
            "tasks/update", {"taskId": _task_id(task), "inputResponses": dict(responses)}, **kw
        )

    async def cancel_task(self, task: str | Mapping[str, Any], **kw: Any) -> None:
        await self._task_request("tasks/cancel", {"taskId": _task_id(task)}, **kw)

    def interval(self, task: Mapping[str, Any]) -> float:
        ms = task.get("pollIntervalMs")
        seconds = ms / 1000 if isinstance(ms, int | float) and not isinstance(ms, bool) else _DEFAULT_INTERVAL
        return min(max(seconds, self.policy.poll_floor), self.policy.poll_cap)

    async def wait_task(
        self, task: str | Mapping[str, Any], on_status: TaskStatusCallback | None,
        timeout: float | None, cancel_on_exit: bool,
    ) -> dict[str, Any]:
        """`Client.wait_task`: follow the task, cancel it on the server when the wait
        ends early."""
        task_id = _task_id(task)
        known = dict(task) if isinstance(task, Mapping) else None
        try:
            async with asyncio.timeout(timeout):
                return await self._follow(task_id, known, on_status)
        except TimeoutError as exc:
            if cancel_on_exit:
                await self._cancel_quietly(task_id)
            raise RequestTimeout(f"task {task_id} did not finish within {timeout} s") from exc
        except (asyncio.CancelledError, ClientError) as exc:
            if cancel_on_exit and not isinstance(exc, TaskCancelled | TasksNotDeclared):
                await self._cancel_quietly(task_id)
            raise

    async def _follow(
        self, task_id: str, current: dict[str, Any] | None, on_status: TaskStatusCallback | None
    ) -> dict[str, Any]:
        answered: set[str] = set()  # TASK-07: keys are never reused, never answer twice
        last_status: str | None = None
        interval = self.policy.poll_floor
        while True:
            if current is None:
                current = await self.get_task(task_id)
            status = current.get("status")
            interval = self.interval(current)
            if status != last_status:
                last_status = status if isinstance(status, str) else None
                logger.debug("task %s: %s", task_id, status)
                if on_status is not None:
                    await maybe_await(on_status(current))
            if status == "completed":
                result = current.get("result")
                if not isinstance(result, dict):
                    raise ClientError(f"task {task_id} completed without a result object")
                return result
            if status == "failed":
                error = current.get("error")
                if not isinstance(error, dict):
                    raise ClientError(f"task {task_id} failed without an error object")
                raise error_from_wire(error)
            if status == "cancelled":
                raise TaskCancelled(task_id, current.get("statusMessage"))
            if status == "input_required":
                requests = current.get("inputRequests")
                fresh = {k: v for k, v in requests.items() if k not in answered} if isinstance(
                    requests, dict) else {}
                if fresh:
                    answered.update(fresh)
                    responses = await answer_round(fresh, self.pipeline.answering)  # all keys at once
                    await self.update_task(task_id, responses)
                    current = None
                    continue  # look again at once: the task has moved on
            elif status != "working":
                raise ClientError(f"task {task_id} has an unknown status {status!r}")
            await asyncio.sleep(interval)
            current = None

    async def _cancel_quietly(self, task_id: str) -> None:
        """Send `tasks/cancel` even while our own caller is being cancelled: the send
        runs in its own task, shielded; a second cancellation leaves it running."""
        sender = asyncio.ensure_future(self.cancel_task(task_id, timeout=10.0))
        self._cancel_senders.add(sender)
        sender.add_done_callback(self._cancel_senders.discard)
        try:
            await asyncio.shield(sender)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # best effort: the task may already be gone
            logger.info("could not cancel task %s: %s", task_id, exc)
