"""The Client: one object per server, an async context manager over a Transport.

A thin facade: it builds the option groups (`_options`), the `Pipeline` every request
goes through (`_pipeline`: ids, `_meta`, timeout, retry, renegotiation, MRTR, cache),
the era strategies (`_era`: probe, 2025-11-25 session) and the collaborators for
listen (`_listen`), tasks (`_tasks`) and tools (`_tools`), and forwards its public
methods to them. SDK-local failures are `ClientError`s, peer errors `ProtocolError`s
(ERR-05). Imports every client module; none of them imports this one. Must not import
`nimblemcp.server`; transports are imported lazily by `transport_for`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Unpack

from nimblemcp.errors import ClientError, ProtocolError
from nimblemcp.types._versions import MODERN_VERSIONS, version_index

from ._cache import ResultCache
from ._calls import all_pages, discover
from ._era import MODERN, LegacyEra, not_found, settler
from ._mrtr import Callback, capabilities_for
from ._options import (
    CachePolicy,
    Callbacks,
    Limits,
    NotificationCallback,
    RetryPolicy,
    TaskPolicy,
)
from ._pipeline import EraName, Mode, Pipeline, ProgressCallback, RequestOptions
from ._tasks import Tasks, TaskStatusCallback, with_tasks
from ._tools import Tools
from ._transport import PeerRequests, StrayNotifications, Transport, transport_for

if TYPE_CHECKING:
    import os
    import ssl

    from ._listen import Listener

__all__ = ["Client", "ProgressCallback"]

DEFAULT_CLIENT_INFO = {"name": "nimblemcp-client", "version": "0.1.0"}


class Client:
    """An MCP client for one server: `async with Client("http://.../mcp") as c: ...`.

    `target` is an `http(s)://` URL, a command line as a list (stdio), an in-process
    server, or any `Transport`. Callbacks answer the server's input requests and
    decide the capabilities declared on every request. `mode` is "auto" (probe with
    `server/discover`, fall back to `initialize`), "modern" or "legacy". `tasks=True`
    declares the tasks extension: a tool may then run as a task, which `call_tool`
    polls (every `pollIntervalMs`, kept within `task_policy=TaskPolicy(...)`'s bounds);
    `auth` (HTTP only) is an `httpx.Auth` such as `nimblemcp.client.auth.OAuth`.
    `verify` (HTTPS only) is True (the default CA store; `SSL_CERT_FILE` honoured), a CA
    bundle path, an `ssl.SSLContext` or False (no verification); `cert` a client
    certificate: a PEM path, `(certfile, keyfile)` or `(certfile, keyfile, password)`.

    Each option has one spelling: the everyday ones are keywords (`timeout` per request,
    None for none; the callbacks; `tasks`; `cache=False` turns the result cache off),
    the rest come in groups: `retry_policy=RetryPolicy(...)` (re-sends, MRTR rounds, the
    stdio probe), `task_policy=TaskPolicy(...)` (polling bounds),
    `cache_policy=CachePolicy(...)` (shared store, private partition) and
    `limits=Limits(...)` (what the transports built from a URL or command line accept:
    message size, redirects, connections at once)."""

    def __init__(
        self,
        target: Any,
        *,
        client_info: Mapping[str, Any] | None = DEFAULT_CLIENT_INFO,
        versions: Sequence[str] = MODERN_VERSIONS,
        on_elicit: Callback | None = None,
        on_sample: Callback | None = None,
        on_roots: Callback | None = None,
        on_log: NotificationCallback | None = None,
        on_notification: NotificationCallback | None = None,
        elicitation_modes: tuple[str, ...] = ("form",),
        sampling_capabilities: Mapping[str, Any] | None = None,
        extensions: Mapping[str, Any] | None = None,
        log_level: str | None = None,
        timeout: float | None = 60.0,
        cache: bool = True,
        validate_output: bool = True,
        mode: Mode = "auto",
        tasks: bool = False,
        auth: Any = None,
        verify: bool | str | os.PathLike[str] | ssl.SSLContext = True,
        cert: str | os.PathLike[str] | tuple[str, str] | tuple[str, str, str] | None = None,
        retry_policy: RetryPolicy | None = None,
        task_policy: TaskPolicy | None = None,
        cache_policy: CachePolicy | None = None,
        limits: Limits | None = None,
    ) -> None:
        if mode not in ("auto", "modern", "legacy"):
            raise ValueError(f"mode must be 'auto', 'modern' or 'legacy', not {mode!r}")
        self.callbacks = Callbacks(on_elicit, on_sample, on_roots, on_log, on_notification,
                                   elicitation_modes, sampling_capabilities)
        self.retry_policy = retry_policy or _DEFAULT_RETRY
        self.task_policy = task_policy or _DEFAULT_TASKS
        self.cache_policy = cache_policy or _DEFAULT_CACHE
        self.limits = limits if limits is not None else _DEFAULT_LIMITS
        found = self.callbacks
        transport = transport_for(target, auth, max_message_bytes=self.limits.max_message_bytes,
                                  max_redirects=self.limits.max_redirects,
                                  max_connections=self.limits.max_connections, verify=verify, cert=cert)
        self._pipe = pipe = Pipeline(
            transport,
            modern=MODERN,
            settle=lambda p: self._settle(p),
            mode=mode,
            versions=[v for v in versions if version_index(v) >= 0] or list(MODERN_VERSIONS),
            client_info=dict(client_info) if client_info is not None else None,
            capabilities=capabilities_for(
                found.answering(), elicitation_modes=found.elicitation_modes,
                sampling=found.sampling_capabilities,
                extensions=with_tasks(extensions, tasks),
            ),
            callbacks=found,
            retry=self.retry_policy,
            cache=ResultCache(transport.peer, self.cache_policy.auth_context, self.cache_policy.store),
            cache_enabled=cache,
            log_level=log_level,
            timeout=timeout,
        )
        pipe.on_stray = self._on_stray
        pipe.limits = self.limits
        self._legacy = LegacyEra(pipe)
        self._settle = settler(self._legacy)
        self._tasks = Tasks(pipe, self.task_policy)
        self._tools = Tools(pipe, self._tasks, validate_output=validate_output)

    # -- what the connection knows -----------------------------------------------------

    @property
    def transport(self) -> Transport:
        return self._pipe.transport

    @property
    def mode(self) -> Mode:
        return self._pipe.mode

    @property
    def era(self) -> EraName | None:
        """"modern" or "legacy" once settled (kept for the client's life), else None."""
        return self._pipe.era

    @property
    def version(self) -> str:
        """The protocol version in use (negotiated, or answered to `initialize`)."""
        return self._pipe.version

    @property
    def versions(self) -> list[str]:
        return self._pipe.versions

    @property
    def capabilities(self) -> dict[str, Any]:
        """The client capabilities declared on every request."""
        return self._pipe.capabilities

    @property
    def client_info(self) -> dict[str, Any] | None:
        return self._pipe.client_info

    @property
    def log_level(self) -> str | None:
        return self._pipe.log_level

    @property
    def timeout(self) -> float | None:
        return self._pipe.timeout

    @property
    def server_info(self) -> dict[str, Any] | None:
        return self._pipe.server_info

    @property
    def discovered(self) -> dict[str, Any] | None:
        """The latest DiscoverResult (modern)."""
        return self._pipe.discovered

    @property
    def initialized(self) -> dict[str, Any] | None:
        """The `initialize` result (legacy)."""
        return self._legacy.initialized

    @property
    def cache(self) -> ResultCache:
        return self._pipe.cache

    @property
    def tools(self) -> dict[str, dict[str, Any]]:
        """The tools of the latest `list_tools`, by name."""
        return self._tools.tools

    @property
    def tasks_declared(self) -> bool:
        """True when this client's requests declare the tasks extension (TASK-01) on a
        modern connection; under 2025-11-25 the extension enables nothing (TASK-12)."""
        return self._pipe.accepts_tasks

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Client:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        transport = self._pipe.transport
        if isinstance(transport, StrayNotifications) and transport.on_notification is None:
            transport.on_notification = self._on_stray
        if isinstance(transport, PeerRequests) and transport.on_request is None:
            transport.on_request = self._legacy.answer
        await transport.open()
        self._pipe.is_open = True

    async def close(self) -> None:
        self._pipe.is_open = False
        await self._pipe.transport.close()

    def _on_stray(self, note: dict[str, Any]) -> None:
        self._pipe.evict_for(note)
        self._legacy.deliver(note)  # legacy listens (LEGC-05)
        hear = self.callbacks.on_notification
        if note.get("method") == "notifications/message" and self.callbacks.on_log is not None:
            # A log outside any request (a 2025-11-25 session), or one that stdio cannot
            # tie to a request while several are pending: on_log, without a requestId.
            params = note.get("params")
            note, hear = (dict(params) if isinstance(params, dict) else {}), self.callbacks.on_log
        if hear is not None:
            result = hear(note)
            if asyncio.iscoroutine(result):
                asyncio.ensure_future(result)  # noqa: RUF006

    # -- the request path --------------------------------------------------------------

    def next_id(self) -> int:
        return self._pipe.next_id()

    def build_meta(
        self, *, progress_token: str | int | None = None, traceparent: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        return self._pipe.build_meta(progress_token=progress_token, traceparent=traceparent,
                                     extra=extra)

    async def ensure_era(self) -> EraName:
        """Probe (auto) or handshake (legacy) once; later calls return the kept era."""
        return await self._pipe.ensure_era()

    async def request(
        self, method: str, params: Mapping[str, Any] | None = None, **options: Unpack[RequestOptions],
    ) -> dict[str, Any]:
        """Send one request and return its final result; `options` are `timeout`,
        `on_progress`, `cache`, `manual`, `traceparent`, `meta`, `param_headers` and
        `retry` (see `nimblemcp.client._pipeline.RequestOptions`).

        With `manual=True` an `input_required` result is returned to the caller, who
        may retry with `params` carrying `inputResponses`/`requestState`. When the
        response stream breaks before the final response, the request is re-sent with
        a new id (at most `max_retries` times, with backoff) if it is idempotent:
        `retry=None` means "the methods in IDEMPOTENT_METHODS", True/False force it.
        """
        return await self._pipe.run(method, params, **options)

    # -- discovery and the simple calls ------------------------------------------------

    async def discover(self, *, cache: bool = True) -> dict[str, Any]:
        """`server/discover` (DISC-02): versions, capabilities, instructions. On a legacy
        connection, the same shape built from the `initialize` result (LEGC-07)."""
        return await discover(self._pipe, self._legacy, cache=cache)

    async def list_resources(self, *, cache: bool = True) -> list[dict[str, Any]]:
        return await all_pages(self._pipe, "resources/list", "resources", cache)

    async def list_resource_templates(self, *, cache: bool = True) -> list[dict[str, Any]]:
        return await all_pages(self._pipe, "resources/templates/list", "resourceTemplates", cache)

    async def list_prompts(self, *, cache: bool = True) -> list[dict[str, Any]]:
        return await all_pages(self._pipe, "prompts/list", "prompts", cache)

    async def read_resource(self, uri: str, *, cache: bool = True, **kw: Any) -> dict[str, Any]:
        try:
            return await self.request("resources/read", {"uri": uri}, cache=cache, **kw)
        except ProtocolError as exc:
            mapped = not_found(exc, uri)
            if mapped is exc:
                raise
            raise mapped from exc

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None, **kw: Any
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        return await self.request("prompts/get", params, **kw)

    async def complete(
        self, ref: Mapping[str, Any], argument: str, value: str,
        context: Mapping[str, str] | None = None, **kw: Any,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"ref": dict(ref), "argument": {"name": argument, "value": value}}
        if context is not None:
            params["context"] = {"arguments": dict(context)}
        return await self.request("completion/complete", params, **kw)

    # -- tools -------------------------------------------------------------------------

    async def list_tools(self, *, cache: bool = True) -> list[dict[str, Any]]:
        """All tools across pages; tools with invalid `x-mcp-header`s are dropped (TOOL-12)."""
        return await self._tools.list_tools(cache=cache)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        wait: bool = True,
        on_task_status: Callable[[dict[str, Any]], Any] | None = None,
        task_timeout: float | None = None,
        **kw: Any,
    ) -> dict[str, Any]:
        """Call a tool; input requests are answered by the callbacks (MRTR).

        When the server runs the call as a task (only for `tasks=True` clients), the
        task is followed to its end (`wait_task`: `on_task_status` hears each status
        change, `task_timeout` bounds the whole wait) and its result returned; with
        `wait=False` the `CreateTaskResult` itself is returned instead.

        Execution errors come back as a result with `isError: true` (TOOL-08); a
        `structuredContent` that breaks the tool's `outputSchema` raises
        OutputValidationError unless the result is an error result.
        """
        return await self._tools.call(name, arguments, wait, on_task_status, task_timeout, kw)

    # -- tasks -------------------------------------------------------------------------

    async def get_task(self, task: str | Mapping[str, Any], **kw: Any) -> dict[str, Any]:
        """`tasks/get`: the task's current state (TASK-06)."""
        return await self._tasks.get_task(task, **kw)

    async def update_task(
        self, task: str | Mapping[str, Any], responses: Mapping[str, Any], **kw: Any
    ) -> None:
        """`tasks/update`: answer some or all outstanding `inputRequests` (TASK-07)."""
        await self._tasks.update_task(task, responses, **kw)

    async def cancel_task(self, task: str | Mapping[str, Any], **kw: Any) -> None:
        """`tasks/cancel`: ask the server to stop the task; cooperative (TASK-08)."""
        await self._tasks.cancel_task(task, **kw)

    async def wait_task(
        self,
        task: str | Mapping[str, Any],
        *,
        on_status: TaskStatusCallback | None = None,
        timeout: float | None = None,
        cancel_on_exit: bool = True,
    ) -> dict[str, Any]:
        """Poll a task to its end and return its result (what the original request
        would have returned). `task` is a task id or a `CreateTaskResult`/task.

        `input_required` rounds are answered with the client's callbacks. A `failed`
        task raises its error as a `ProtocolError`, a `cancelled` one `TaskCancelled`.
        If the wait ends early (cancellation, `timeout` -> RequestTimeout, a callback
        that refuses) and `cancel_on_exit`, the task is cancelled on the server.
        """
        return await self._tasks.wait_task(task, on_status, timeout, cancel_on_exit)

    def _interval(self, task: Mapping[str, Any]) -> float:
        return self._tasks.interval(task)

    # -- listen ------------------------------------------------------------------------

    def listen(
        self,
        *,
        tools: bool = False,
        prompts: bool = False,
        resources_list: bool = False,
        resources: Sequence[str] = (),
        tasks: Sequence[str] = (),
        reconnect: bool = True,
        max_reconnects: int = 8,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
    ) -> Listener:
        """`async with client.listen(tools=True, resources=[uri]) as events:` (SUB-01..10).

        Yields `ListenEvent`s; see `nimblemcp.client._listen` for reconnect semantics.
        `tasks`: ids of tasks to get `task_status` events about (tasks extension).
        """
        from ._listen import (  # on first use: a call needs none of it (issue 18)
            Listener,
            listen_filter,
        )

        wanted = listen_filter(tools=tools, prompts=prompts, resources_list=resources_list,
                               resources=resources, tasks=tasks)
        return Listener(self._pipe, self._legacy, wanted, reconnect=reconnect,
                        max_reconnects=max_reconnects, backoff=backoff, max_backoff=max_backoff)

    # -- what exists only on a 2025-11-25 connection -----------------------------------

    async def set_log_level(self, level: str) -> None:
        """Modern: sent as `_meta.logLevel` from now on; legacy: `logging/setLevel`."""
        self._pipe.log_level = level
        if await self._pipe.ensure_era() == "legacy":
            await self._legacy.call("logging/setLevel", {"level": level})

    async def subscribe_resource(self, uri: str) -> None:
        """Legacy `resources/subscribe`; updates arrive at `on_notification` (LEGC-05)."""
        if await self._pipe.ensure_era() != "legacy":
            raise ClientError("subscribe_resource is legacy-only; use listen(resources=[...])")
        await self._legacy.call("resources/subscribe", {"uri": uri})

    async def unsubscribe_resource(self, uri: str) -> None:
        if await self._pipe.ensure_era() != "legacy":
            raise ClientError("unsubscribe_resource is legacy-only")
        await self._legacy.call("resources/unsubscribe", {"uri": uri})

    async def notify_roots_changed(self) -> None:
        """Legacy: `notifications/roots/list_changed` (modern servers ask every time)."""
        if self._pipe.era == "legacy":
            await self._pipe.transport.notify(
                {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})

    def legacy_discover_result(self) -> dict[str, Any]:
        """A DiscoverResult-shaped view of the `initialize` result (LEGC-07)."""
        return self._legacy.discover_result()


_DEFAULT_RETRY = RetryPolicy()
_DEFAULT_TASKS = TaskPolicy()
_DEFAULT_CACHE = CachePolicy()
_DEFAULT_LIMITS = Limits()
