"""The Client: one object per server, an async context manager over a Transport.

Every request carries its own `_meta` (META-01/03, VER-01); ids are unique for the
client's life (BASE-02); -32022 triggers one version renegotiation (VER-03);
`input_required` results run the MRTR loop with the user's callbacks (MRTR-06..09,
17); cacheable results honor `ttlMs`/`cacheScope` (CACHE-03..09). SDK-local failures
are `ClientError`s, peer errors are `ProtocolError`s (ERR-05). The era (modern or
2025-11-25) is settled before the first request (`_legacy`, MAP-09); legacy requests
carry no modern `_meta` envelope.
Must not import `nimblemcp.server`; transports are imported lazily by `connect`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sys
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from types import EllipsisType, TracebackType
from typing import Any

from nimblemcp.errors import (
    ClientError,
    RequestTimeout,
    TransportError,
    UnsupportedProtocolVersion,
    error_from_wire,
)
from nimblemcp.types._meta import (
    CLIENT_CAPABILITIES,
    CLIENT_INFO,
    LOG_LEVEL,
    PROTOCOL_VERSION,
    SERVER_INFO,
)
from nimblemcp.types._versions import MODERN_VERSIONS, version_index
from nimblemcp.types.methods import METHODS

from ._cache import CacheStore, ResultCache
from ._calls import CallsMixin
from ._legacy import Era, LegacyMixin, Mode
from ._listen import ListenMixin
from ._mrtr import Callback, answer_round, capabilities_for
from ._tasks import TasksMixin, with_tasks
from ._tools import ToolsMixin
from ._tracing import trace_context
from ._transport import ParamValue, transport_for

__all__ = ["Client", "ProgressCallback"]

logger = logging.getLogger("nimblemcp.client")

ProgressCallback = Callable[[float, float | None, str | None], Any]
NotificationCallback = Callable[[dict[str, Any]], Any]
DEFAULT_CLIENT_INFO = {"name": "nimblemcp-client", "version": "0.1.0"}
#: Re-issued on a broken stream without asking (RT resilience); others need `retry=True`.
IDEMPOTENT_METHODS = frozenset({
    "server/discover", "tools/list", "prompts/list", "resources/list",
    "resources/templates/list", "resources/read", "completion/complete",
})
_RESULT_TYPES = frozenset({"complete", "input_required"})
_EVICT_ON = {
    "notifications/tools/list_changed": ("tools/list",),
    "notifications/prompts/list_changed": ("prompts/list",),
    "notifications/resources/list_changed": ("resources/list", "resources/templates/list"),
}


class Client(LegacyMixin, ListenMixin, CallsMixin, TasksMixin, ToolsMixin):
    """An MCP client for one server: `async with Client("http://.../mcp") as c: ...`.

    `target` is an `http(s)://` URL, a command line as a list (stdio), an in-process
    server, or any `Transport`. Callbacks answer the server's input requests and
    decide the capabilities declared on every request. `mode` is "auto" (probe with
    `server/discover`, fall back to `initialize`), "modern" or "legacy". `tasks=True`
    declares the tasks extension: a tool may then run as a task, which `call_tool`
    polls (every `pollIntervalMs`, kept within `task_poll_floor`..`task_poll_cap` s);
    `auth` (HTTP only) is an `httpx.Auth` such as `nimblemcp.client.auth.OAuth`."""

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
        max_rounds: int = 10,
        cache: bool = True,
        cache_store: CacheStore | None = None,
        auth_context: Hashable = None,
        validate_output: bool = True,
        max_retries: int = 3,
        retry_backoff: float = 0.1,
        mode: Mode = "auto",
        probe_timeout: float = 5.0,
        tasks: bool = False,
        task_poll_floor: float = 0.05,
        task_poll_cap: float = 5.0,
        auth: Any = None,
    ) -> None:
        self.transport = transport_for(target, auth)
        self.client_info = dict(client_info) if client_info is not None else None
        self.versions = [v for v in versions if version_index(v) >= 0] or list(MODERN_VERSIONS)
        self.version = self.versions[0]
        self.callbacks: dict[str, Callback | None] = {
            "elicit": on_elicit, "sample": on_sample, "roots": on_roots,
        }
        self.capabilities = capabilities_for(
            self.callbacks, elicitation_modes=elicitation_modes,
            sampling=sampling_capabilities, extensions=with_tasks(extensions, tasks),
        )
        if not 0 < task_poll_floor <= task_poll_cap:
            raise ValueError("need 0 < task_poll_floor <= task_poll_cap")
        self.task_poll_floor = task_poll_floor
        self.task_poll_cap = task_poll_cap
        self._cancel_senders: set[asyncio.Task[Any]] = set()
        self.on_log = on_log
        self.on_notification = on_notification
        self.log_level = log_level
        self.timeout = timeout
        self.max_rounds = max_rounds
        self.cache_enabled = cache
        self.cache = ResultCache(self.transport.peer, auth_context, cache_store)
        self.validate_output = validate_output
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self.server_info: dict[str, Any] | None = None
        self.discovered: dict[str, Any] | None = None
        self._ids = itertools.count(1)
        self._open = False
        if mode not in ("auto", "modern", "legacy"):
            raise ValueError(f"mode must be 'auto', 'modern' or 'legacy', not {mode!r}")
        self.mode: Mode = mode
        self.era: Era | None = None  # settled before the first request, kept (COMPAT-C04)
        self.probe_timeout = probe_timeout
        self.initialized: dict[str, Any] | None = None  # the legacy initialize result
        self._era_lock = asyncio.Lock()
        ToolsMixin.__init__(self)

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
        if hasattr(self.transport, "on_notification") and getattr(
            self.transport, "on_notification", None
        ) is None:
            self.transport.on_notification = self._on_stray
        if getattr(self.transport, "on_request", False) is None:
            self.transport.on_request = self._answer_peer  # type: ignore[attr-defined]
        await self.transport.open()
        self._open = True

    async def close(self) -> None:
        self._open = False
        await self.transport.close()

    # -- the request path --------------------------------------------------------------

    def next_id(self) -> int:
        return next(self._ids)

    def build_meta(
        self, *, progress_token: str | int | None = None, traceparent: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if self.era != "legacy":  # legacy: the handshake said it all (LEGC-01)
            meta[PROTOCOL_VERSION] = self.version
            meta[CLIENT_CAPABILITIES] = self.capabilities
            if self.client_info is not None:
                meta[CLIENT_INFO] = self.client_info
            if self.log_level is not None:
                meta[LOG_LEVEL] = self.log_level
        if progress_token is not None:
            meta["progressToken"] = progress_token
        if traceparent is not None:
            meta["traceparent"] = traceparent
        elif "opentelemetry" in sys.modules:  # the app traces: join its current span
            meta.update(trace_context())
        if extra:
            meta.update(extra)
        return meta

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | EllipsisType | None = ...,
        on_progress: ProgressCallback | None = None,
        cache: bool = True,
        manual: bool = False,
        traceparent: str | None = None,
        meta: Mapping[str, Any] | None = None,
        param_headers: Mapping[str, ParamValue] | None = None,
        retry: bool | None = None,
    ) -> dict[str, Any]:
        """Send one request and return its final result.

        With `manual=True` an `input_required` result is returned to the caller, who
        may retry with `params` carrying `inputResponses`/`requestState`. When the
        response stream breaks before the final response, the request is re-sent with
        a new id (at most `max_retries` times, with backoff) if it is idempotent:
        `retry=None` means "the methods in IDEMPOTENT_METHODS", True/False force it.
        """
        if self.era is None and self._open:
            await self.ensure_era()
        idempotent = method in IDEMPOTENT_METHODS if retry is None else retry
        retries = 0
        base = {k: v for k, v in (params or {}).items() if k != "_meta"}
        spec = METHODS.get(method)
        cacheable = spec is not None and spec.cacheable and cache and self.cache_enabled
        if cacheable:
            hit = self.cache.get(method, base, self.version)
            if hit is not None:
                return hit
        limit = self.timeout if isinstance(timeout, EllipsisType) else timeout
        renegotiated = False
        rounds = 0
        backoff = 0.05
        current = dict(base)
        while True:
            try:
                result = await self._send_once(
                    method, current, limit, on_progress, traceparent, meta, param_headers
                )
            except UnsupportedProtocolVersion as exc:
                if renegotiated or not self._renegotiate(exc):
                    raise
                renegotiated = True
                continue
            except TransportError as exc:
                if await self._recover(exc):
                    continue
                if not (idempotent and getattr(exc, "retryable", False)) or retries >= self.max_retries:
                    raise
                retries += 1
                delay = self.retry_backoff * 2 ** (retries - 1)
                logger.info("%s: %s; re-sending (attempt %d) in %.2f s", method, exc, retries + 1, delay)
                await asyncio.sleep(delay)
                continue
            kind = result.get("resultType", "complete")  # RT-02
            if kind == "task" and method == "tools/call" and self.tasks_declared:
                return result  # a CreateTaskResult (TASK-02): never cached
            if kind not in _RESULT_TYPES:
                raise ClientError(f"{method}: unrecognized resultType {kind!r} (RT-03)")
            if kind == "complete":
                if cacheable:
                    self.cache.put(method, current, self.version, result)
                return result
            if manual:
                return result
            rounds += 1
            if rounds >= self.max_rounds:
                raise ClientError(f"{method}: gave up after {rounds} input_required rounds")
            requests = result.get("inputRequests")
            current = dict(base)  # MRTR-09: only the original params, plus this round
            if isinstance(requests, dict) and requests:
                current["inputResponses"] = await answer_round(requests, self.callbacks)
                backoff = 0.05
            else:
                await asyncio.sleep(backoff)  # state-only round (MRTR-17)
                backoff = min(backoff * 2, 0.25)
            state = result.get("requestState")
            if state is not None:
                current["requestState"] = state  # echoed exactly (MRTR-07)

    def _renegotiate(self, exc: UnsupportedProtocolVersion) -> bool:
        """VER-03: switch to the newest version both sides support."""
        for version in self.versions:
            if version in exc.supported:
                # Even when it is the version we sent (a server may reject a header it
                # could not read), one retry with the agreed version is cheap.
                logger.info("server rejected %s; retrying with %s", self.version, version)
                self.version = version
                return True
        raise UnsupportedProtocolVersion(
            exc.requested, exc.supported,
            f"no protocol version in common: the server supports {exc.supported}, "
            f"this client {self.versions}",
        ) from exc

    async def _send_once(
        self,
        method: str,
        params: Mapping[str, Any],
        limit: float | None,
        on_progress: ProgressCallback | None,
        traceparent: str | None,
        meta: Mapping[str, Any] | None,
        param_headers: Mapping[str, ParamValue] | None,
    ) -> dict[str, Any]:
        if not self._open:
            raise ClientError("the client is not open (use `async with Client(...)`)")
        rid = self.next_id()  # MRTR-08: every attempt is a new request
        token = f"{rid}-progress" if on_progress is not None else None
        body = dict(params)
        envelope = self.build_meta(progress_token=token, traceparent=traceparent, extra=meta)
        if envelope:
            body["_meta"] = envelope
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": body}
        stream = self.transport.send(message, param_headers=param_headers)
        try:
            async with asyncio.timeout(limit):
                async for item in stream:
                    if "method" in item:
                        await self._on_request_notification(item, token, on_progress)
                        continue
                    if item.get("id") != rid:
                        continue
                    if "error" in item and isinstance(item["error"], dict):
                        raise error_from_wire(item["error"])
                    result = item.get("result")
                    if not isinstance(result, dict):
                        raise ClientError(f"{method}: the response has no result object")
                    self._note_server_info(result)
                    return result
        except TimeoutError:
            raise RequestTimeout(f"{method} got no response within {limit} s") from None
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
        raise TransportError(f"{method}: the stream ended without a response")

    def _note_server_info(self, result: Mapping[str, Any]) -> None:
        meta = result.get("_meta")
        if isinstance(meta, dict):
            info = meta.get(SERVER_INFO)
            if isinstance(info, dict):
                self.server_info = info

    async def _on_request_notification(
        self, note: dict[str, Any], token: str | None, on_progress: ProgressCallback | None
    ) -> None:
        method = note["method"]
        params = note.get("params") or {}
        if method == "notifications/progress":
            if on_progress is not None and params.get("progressToken") == token:
                await _maybe_await(on_progress(params.get("progress", 0), params.get("total"),
                                               params.get("message")))
            return
        if method == "notifications/message" and self.on_log is not None:
            await _maybe_await(self.on_log(params))
            return
        self._on_stray(note)

    def _evict_for(self, note: Mapping[str, Any]) -> None:
        """CACHE-08: a list change or resource update drops the matching cache entries."""
        method = note.get("method")
        params = note.get("params") or {}
        if method in _EVICT_ON:
            self.cache.evict(*_EVICT_ON[method])
            if method == "notifications/tools/list_changed":
                self._tools_listed = False
        elif method == "notifications/resources/updated" and isinstance(params.get("uri"), str):
            self.cache.evict(uri=params["uri"])

    def _on_stray(self, note: dict[str, Any]) -> None:
        self._evict_for(note)
        self._fan_out_legacy(note)  # legacy listens (LEGC-05)
        if self.on_notification is not None:
            result = self.on_notification(note)
            if asyncio.iscoroutine(result):
                asyncio.ensure_future(result)  # noqa: RUF006


async def _maybe_await(value: Any | Awaitable[Any]) -> Any:
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value
