"""The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663; CHECKLIST 22).

A task-supporting tool called by a client that declares the extension answers a
`CreateTaskResult` (`resultType: "task"`) once the task record is durably stored, and
runs in the background. Its MRTR questions become the task's `inputRequests` (keys
unique for the task's life); `tasks/update` stores answers, `tasks/get` reads the
record, `tasks/cancel` is cooperative. Records live in the server's KeyValueStore, so
any instance can answer `tasks/get`/`update`/`cancel`; the running instance polls the
record for answers and cancellation (and is woken at once when they arrive locally).
Task ids are unguessable and bound to the caller's subject (TASK-13).

Across instances (a shared store): every change to a record is a compare-and-set, so
two instances never overwrite each other and a terminal status never changes again
(TASK-05). The instance running a task holds a lease (a key with a short TTL) that its
keeper renews every `TaskOptions.heartbeat`; a reader that finds an unfinished task
whose lease has lapsed marks it failed (-32603) and publishes the change, so the task
of a killed instance fails within seconds. `tasks/cancel` on another instance is
delivered on the bus (`Event("task-cancel", id)`) to the keeper of the instance
running the job, which cancels it as a local cancel would; each heartbeat also reads
the record, so a cancel whose bus message was lost still lands. With the in-memory
store there is one process: no lease, no keeper, records exactly as before.

When the server stops (its lifespan's last exit: `settle()`), tasks still running do
not wait for a lease to lapse. A graceful stop (SIGTERM: `drain(grace)`, called when
the HTTP drain begins) first gives them the drain's grace time to finish; any other
stop gives none. Each task still running then is marked `failed` at once (-32603,
`STOPPED`), the change is published (and, on a shared bus, seen to come back, so it
left this process), its lease is released, and its job is cancelled so the handler's
`finally` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from nimblemcp.backends.memory import MemoryStore
from nimblemcp.errors import InternalError, InvalidParams, MissingClientCapability, ProtocolError
from nimblemcp.server._context import BecomeTask
from nimblemcp.server._mrtr import Asker, run_answering
from nimblemcp.types._meta import TASKS_EXTENSION as TASKS_EXTENSION
from nimblemcp.types._versions import MODERN_VERSIONS

_MODERN = frozenset(MODERN_VERSIONS)

if TYPE_CHECKING:
    from nimblemcp.backends._store import KeyValueStore
    from nimblemcp.backends.bus import NotificationBus
    from nimblemcp.server._context import Context
    from nimblemcp.server._options import TaskOptions
    from nimblemcp.server._tools import ToolEntry

logger = logging.getLogger("nimblemcp.server")

TERMINAL = frozenset({"completed", "failed", "cancelled"})
_PREFIX = "task:"
_LEASE = "task-lease:"
CANCEL = "task-cancel"  # bus event kind: stop the job of this task id where it runs
_TRIES = 20  # compare-and-set attempts before a change gives up (-32603)
DEAD = ("The server instance running this task stopped before finishing it "
        "(its lease lapsed)")
STOPPED = "The server instance running this task shut down before the task finished"
_ECHO_WAIT = 2.0  # seconds to see a shutdown's publish come back from a shared bus
_CANCEL_WAIT = 1.0  # seconds for a cancelled job to end when the server stops
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


class Shared(Protocol):
    """Where a task manager finds the store and the bus: its `Server`, read at each
    use (serving with backends from the environment replaces them)."""

    @property
    def store(self) -> KeyValueStore: ...
    @property
    def bus(self) -> NotificationBus: ...


class TaskManager:
    """Creates, runs and answers for tasks of one server."""

    def __init__(self, server: Shared, options: TaskOptions | None = None) -> None:
        from nimblemcp.server._options import TaskOptions

        opts = options or TaskOptions()
        self.server = server
        self.ttl_ms = round(opts.ttl * 1000)
        self.poll_interval_ms = round(opts.poll_interval * 1000)
        self.heartbeat = opts.heartbeat
        self.lease = opts.lease
        self.instance = secrets.token_urlsafe(12)  # this process, as a lease holder
        self.running: dict[str, asyncio.Task[None]] = {}
        self.wakeups: dict[str, asyncio.Event] = {}
        self.subjects: dict[str, str | None] = {}  # running task -> its caller's subject
        self._keeper: asyncio.Task[None] | None = None
        self._hearing: asyncio.Future[None] | None = None  # done once the keeper hears cancels
        self._deadline: float | None = None  # a graceful stop: running tasks end by then
        self._rushed: asyncio.Future[None] | None = None  # `settle` waits: `drain` moved the deadline

    @property
    def shared(self) -> bool:
        """Other processes may share the store: leases and bus cancels mean something."""
        return not isinstance(self.server.store, MemoryStore)

    # -- the record ---------------------------------------------------------------------

    async def _fetch(self, task_id: Any, subject: str | None) -> tuple[bytes, dict[str, Any]]:
        if not isinstance(task_id, str) or not task_id:
            raise InvalidParams("taskId must be a non-empty string")
        raw = await self.server.store.get(_PREFIX + task_id)
        record = orjson.loads(raw) if raw is not None else None
        if record is None or record.get("sub") != subject:
            raise InvalidParams(f"Unknown or expired task: {task_id}")  # TASK-09
        return raw, record  # type: ignore[return-value]

    async def _load(self, task_id: Any, subject: str | None) -> dict[str, Any]:
        """The record as stored (no lease check: for the instance running it)."""
        return (await self._fetch(task_id, subject))[1]

    async def read(self, task_id: Any, subject: str | None) -> dict[str, Any]:
        """The record as a client may see it: an unfinished task whose instance died
        is marked failed first."""
        return (await self._change(task_id, subject, _unchanged, watch_lease=True))[0]

    async def _save(self, record: dict[str, Any]) -> None:
        record["lastUpdatedAt"] = _now()
        await self.server.store.set(_PREFIX + record["taskId"], orjson.dumps(record), self.ttl_ms / 1000)

    async def _change(
        self, task_id: Any, subject: str | None, change: Callable[[dict[str, Any]], bool], *,
        watch_lease: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """Apply `change` (True: it changed the record) with compare-and-set, re-reading
        and re-applying while another writer gets in between. Returns the record and
        whether this call wrote it. `watch_lease`: mark the task failed first if its
        instance died (and tell listeners)."""
        store = self.server.store
        for _ in range(_TRIES):
            raw, record = await self._fetch(task_id, subject)
            dead = watch_lease and not await self._alive(record)
            if dead:
                _mark_dead(record)
            elif not change(record):
                return record, False
            record["lastUpdatedAt"] = _now()
            if await store.compare_and_set(_PREFIX + task_id, raw, orjson.dumps(record), self.ttl_ms / 1000):
                if not dead:
                    return record, True
                logger.warning("task %s: its instance stopped (lease lapsed); marked failed", task_id)
                self.server.bus.publish(_task_event(task_id))
                watch_lease = False  # now terminal: apply `change` to what is stored
        raise InternalError("The task record changed too often to update; try again")

    async def _alive(self, record: dict[str, Any]) -> bool:
        """False when the task is unfinished and the instance running it stopped
        renewing its lease."""
        owner = record.get("owner")
        if owner is None or record["status"] in TERMINAL:
            return True
        if owner == self.instance and record["taskId"] in self.running:
            return True
        return await self.server.store.get(_LEASE + record["taskId"]) is not None

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
        if self.shared:
            record["owner"] = self.instance
            # The lease before the record: no reader may see the task without one.
            await self.server.store.set(_LEASE + task_id, self.instance.encode(), self.lease)
        await self._save(record)  # durable before we answer (TASK-04)
        self.wakeups[task_id] = asyncio.Event()
        self.subjects[task_id] = ctx.subject
        runner = asyncio.get_running_loop().create_task(self._run(task_id, ctx.subject, run))
        self.running[task_id] = runner
        runner.add_done_callback(lambda _t: self._forget(task_id))
        if self.shared:
            keeper, hearing = self._keeper, self._hearing
            if keeper is None or hearing is None or keeper.done() or keeper.get_loop() is not runner.get_loop():
                hearing = self._hearing = runner.get_loop().create_future()
                self._keeper = runner.get_loop().create_task(self._keep(hearing))
            # Answer only once this instance hears cancellations: the client learns the
            # task id from this answer, and a `tasks/cancel` sent to another instance
            # right away is published on the bus, which keeps nothing for a subscriber
            # that comes later (TASK-08). At once, but for the first task of a keeper.
            await asyncio.shield(hearing)
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

        def finish(record: dict[str, Any]) -> bool:
            if record["status"] in TERMINAL:
                return False  # cancelled or failed elsewhere meanwhile: that stands
            record.update(final)
            record.pop("inputRequests", None)
            return True

        try:
            _, wrote = await self._change(task_id, subject, finish)
        except InvalidParams:
            return  # expired meanwhile
        finally:
            if self.shared:
                with contextlib.suppress(Exception):  # it lapses anyway
                    await self.server.store.delete(_LEASE + task_id)
        if wrote:
            self.server.bus.publish(_task_event(task_id))

    def _forget(self, task_id: str) -> None:
        self.running.pop(task_id, None)
        self.wakeups.pop(task_id, None)
        self.subjects.pop(task_id, None)

    async def _ask(self, task_id: str, subject: str | None, requests: dict[str, Any]) -> dict[str, Any]:
        """Park the task in input_required until every question is answered."""
        wire: dict[str, Any] = {}

        def park(record: dict[str, Any]) -> bool:
            if record["status"] in TERMINAL or record.get("cancel"):
                raise asyncio.CancelledError
            round_no = record["asked"] = record["asked"] + 1
            wire.clear()
            wire.update({f"r{round_no}.{key}": request for key, request in requests.items()})  # TASK-07
            record.update(status="input_required", inputRequests=dict(wire))
            return True

        def resume(record: dict[str, Any]) -> bool:
            if record["status"] in TERMINAL or record.get("cancel"):
                raise asyncio.CancelledError
            record["status"] = "working"
            record.pop("inputRequests", None)
            return True

        await self._change(task_id, subject, park)
        self.server.bus.publish(_task_event(task_id))
        wake = self.wakeups.get(task_id)
        while True:
            record = await self._load(task_id, subject)
            if record.get("cancel") or record["status"] in TERMINAL:
                raise asyncio.CancelledError
            answers = record.get("answers", {})
            if all(k in answers for k in wire):
                await self._change(task_id, subject, resume)
                self.server.bus.publish(_task_event(task_id))
                return {k.split(".", 1)[1]: answers[k] for k in wire}
            if wake is not None:
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self.poll_interval_ms / 1000)
            else:
                await asyncio.sleep(self.poll_interval_ms / 1000)

    # -- across instances: the lease and cancellations --------------------------------------------

    async def _keep(self, hearing_ready: asyncio.Future[None]) -> None:
        """While this instance runs tasks: renew their leases every heartbeat, and stop
        a job whose task was cancelled (or failed) elsewhere. `hearing_ready` is done
        once the bus delivers cancellations here (or it could not: the heartbeat remains)."""
        hearing = asyncio.get_running_loop().create_task(self._hear_cancels(hearing_ready))
        try:
            while self.running:
                await asyncio.sleep(self.heartbeat)
                await self._beat()
        finally:
            hearing.cancel()

    async def _beat(self) -> None:
        store = self.server.store
        for task_id in list(self.running):
            try:
                await store.set(_LEASE + task_id, self.instance.encode(), self.lease)
                raw = await store.get(_PREFIX + task_id)
            except Exception as exc:  # the store is away: try again next beat
                logger.warning("task %s: could not renew its lease (%s)", task_id, exc)
                continue
            status = orjson.loads(raw).get("status") if raw is not None else None
            if status in TERMINAL:
                self._stop(task_id)

    async def _hear_cancels(self, ready: asyncio.Future[None]) -> None:
        from nimblemcp.backends.bus import Match
        from nimblemcp.errors import SlowListener

        try:
            while True:
                try:
                    # Entered: subscribed (a shared bus confirmed its channel, or gave up
                    # waiting: `ready_timeout`), so a cancel published from now on is heard.
                    async with self.server.bus.subscribe(4096, match=Match(kinds=(CANCEL,))) as events:
                        _settle(ready)
                        async for event in events:
                            if event.kind == CANCEL and event.uri is not None:
                                self._stop(event.uri)
                except SlowListener:
                    pass  # missed some: the heartbeat reads every record anyway
                except Exception as exc:
                    logger.warning("tasks: listening for cancellations failed (%s)", exc)
                _settle(ready)  # no bus to wait for: tasks are answered, the heartbeat remains
                await asyncio.sleep(self.heartbeat)  # the bus closed (shutting down) or overflowed
        finally:
            _settle(ready)  # never leave `create` waiting

    def _stop(self, task_id: str) -> None:
        """Cancel the local job of `task_id` (once), as a local tasks/cancel would."""
        runner = self.running.get(task_id)
        if runner is not None and not runner.cancelling():
            runner.cancel()

    # -- when the server stops -----------------------------------------------------------

    def drain(self, grace: float) -> None:
        """A graceful stop began: tasks running now may finish within `grace` seconds
        (`settle` waits for them until then). A later call may only bring the deadline
        nearer (`drain(0)`: stop waiting now), also while `settle` already waits."""
        deadline = time.monotonic() + max(0.0, grace)
        if self._deadline is None or deadline < self._deadline:
            self._deadline = deadline
            if self._rushed is not None and not self._rushed.done():
                self._rushed.set_result(None)  # `settle` re-reads the deadline

    async def settle(self) -> None:
        """The server stops: wait for running tasks until the drain's deadline (no
        drain: no wait), then fail those still running (see the module docstring)."""
        runners = {task_id: (runner, self.subjects.get(task_id)) for task_id, runner in self.running.items()}
        if not runners:
            return
        await self._wait_until_deadline([r for r, _ in runners.values()])
        late = {task_id: pair for task_id, pair in runners.items() if not pair[0].done()}
        if not late:
            return
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()  # no lease renewal past this point
        failed: list[str] = []
        for task_id, (_, subject) in late.items():
            try:
                _, wrote = await self._change(task_id, subject, _stopped)
            except Exception as exc:  # expired, or the store is away: the lease lapses anyway
                logger.warning("task %s: could not mark it failed at shutdown (%s)", task_id, exc)
                continue
            if wrote:
                failed.append(task_id)
                logger.warning("task %s: still running at shutdown; marked failed", task_id)
        if failed:
            await self._publish_stopped(failed)
        if self.shared:
            for task_id in late:
                with contextlib.suppress(Exception):  # it lapses anyway
                    await self.server.store.delete(_LEASE + task_id)
        jobs = [runner for runner, _ in late.values()]
        for runner in jobs:
            runner.cancel()  # the handler's `finally` runs; its record stays failed
        await asyncio.wait(jobs, timeout=_CANCEL_WAIT)

    async def _wait_until_deadline(self, jobs: list[asyncio.Task[None]]) -> None:
        """Wait for `jobs` until the drain's deadline (none: no wait), re-reading it
        whenever `drain` brings it nearer."""
        while self._deadline is not None:
            running = [job for job in jobs if not job.done()]
            left = self._deadline - time.monotonic()
            if not running or left <= 0:
                return
            rushed = self._rushed = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait([*running, rushed], timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._rushed = None
                rushed.cancel()

    async def _publish_stopped(self, task_ids: list[str]) -> None:
        """Publish the changes; on a shared bus, wait (briefly) to hear them back, so
        they left this process before it exits."""
        from nimblemcp.backends.bus import Match

        bus = self.server.bus
        if not self.shared:
            for task_id in task_ids:
                bus.publish(_task_event(task_id))
            return
        waiting = set(task_ids)
        try:
            async with asyncio.timeout(_ECHO_WAIT), bus.subscribe(max(256, 2 * len(task_ids)),
                                                                   match=Match(tasks=task_ids)) as events:
                for task_id in task_ids:
                    bus.publish(_task_event(task_id))
                async for event in events:
                    waiting.discard(event.uri or "")
                    if not waiting:
                        return
        except Exception as exc:  # the bus is away or slow: pollers still see the record
            logger.warning("tasks: could not confirm the shutdown notices went out (%s)", exc)

    # -- the tasks/* methods --------------------------------------------------------------------

    def _gate(self, ctx: Context) -> None:
        if not client_supports_tasks(ctx):
            raise MissingClientCapability(REQUIRED)  # TASK-09

    async def get(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        self._gate(ctx)
        record = await self.read(params.get("taskId"), ctx.subject)
        return {"resultType": "complete", **self.public(record)}

    async def update(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        self._gate(ctx)
        responses = params.get("inputResponses")
        if not isinstance(responses, dict):
            raise InvalidParams("tasks/update needs an inputResponses object")

        def answer(record: dict[str, Any]) -> bool:
            pending: dict[str, Any] = record.get("inputRequests") or {}
            taken = {k: v for k, v in responses.items() if k in pending and isinstance(v, dict)}  # type: ignore[union-attr]
            if not taken or record["status"] in TERMINAL:
                return False
            record["answers"].update(taken)
            record["inputRequests"] = {k: v for k, v in pending.items() if k not in taken}
            return True

        record, wrote = await self._change(params.get("taskId"), ctx.subject, answer, watch_lease=True)
        if wrote:
            wake = self.wakeups.get(record["taskId"])
            if wake is not None:
                wake.set()
        return {"resultType": "complete"}

    async def cancel(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
        self._gate(ctx)

        def flag(record: dict[str, Any]) -> bool:
            if record["status"] in TERMINAL:
                return False
            # Record the outcome first: a runner on another instance polls for it, and
            # a local one may not even have started yet.
            record["cancel"] = True
            record["status"] = "cancelled"
            record.pop("inputRequests", None)
            return True

        record, wrote = await self._change(params.get("taskId"), ctx.subject, flag, watch_lease=True)
        if wrote:
            task_id = record["taskId"]
            self.server.bus.publish(_task_event(task_id))
            runner = self.running.get(task_id)
            if runner is not None:
                runner.cancel()
            elif self.shared:
                self.server.bus.publish(_cancel_event(task_id))  # to the instance running it
        return {"resultType": "complete"}


def _settle(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


def _unchanged(_record: dict[str, Any]) -> bool:
    return False


def _stopped(record: dict[str, Any]) -> bool:
    if record["status"] in TERMINAL:
        return False  # finished, cancelled or failed meanwhile: that stands
    record.update(status="failed", statusMessage=STOPPED, error=InternalError(STOPPED).to_wire())
    record.pop("inputRequests", None)
    return True


def _mark_dead(record: dict[str, Any]) -> None:
    record.update(status="failed", statusMessage=DEAD, error=InternalError(DEAD).to_wire())
    record.pop("inputRequests", None)


def _task_event(task_id: str) -> Any:
    from nimblemcp.backends.bus import Event

    return Event("task", task_id)


def _cancel_event(task_id: str) -> Any:
    from nimblemcp.backends.bus import Event

    return Event(CANCEL, task_id)


async def call_tool(tasks: TaskManager, ctx: Context, tool: ToolEntry, arguments: dict[str, Any]) -> dict[str, Any]:
    """`tools/call` of a task-supporting tool: a task for declaring clients (TASK-02/03)."""
    if not client_supports_tasks(ctx):
        if tool.task == "required":
            raise MissingClientCapability(REQUIRED)  # TASK-03
        result: dict[str, Any] = await tool.invoke(ctx, arguments)
        return result
    if tool.defer_task:
        ctx.task_mode = "deferred"
        try:
            result = await tool.invoke(ctx, arguments)
            return result
        except BecomeTask:
            pass

    async def run(ask: Asker) -> dict[str, Any]:
        ctx.task_mode = "running"
        ctx._emit = None  # no response stream any more
        return await run_answering(lambda: tool.invoke(ctx, arguments), ctx, ask)

    return await tasks.create(ctx, run)
