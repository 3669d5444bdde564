"""The one request path of the Client: every request goes through `Pipeline.run` (the
era probe, the legacy handshake and `subscriptions/listen` included); it is the only
place that calls `Transport.send`.

Per request: a fresh id for every attempt (BASE-02, MRTR-08); `_meta` built once per
attempt from the era strategy's envelope (META-01/03, VER-01; a 2025-11-25 session adds
none, LEGC-01) plus progress token, trace context and the caller's extras; the cache
looked up and filled (CACHE-03..09); the timeout around the whole stream; a broken
stream of an idempotent request re-sent with backoff, an HTTP 429/503 (`ServerBusy`)
after the server's `Retry-After` when it is within `max_retry_after`; -32022 answered by one version
renegotiation (VER-03); a legacy session that expired re-initialized (LEGC-02);
`input_required` answered round after round with the callbacks (MRTR-06..09, 17).
A `notifications/message` of the request's stream goes to `on_log` tagged with the
request's id (`"requestId"`); logs outside any request reach it through `on_stray`.
Peer errors are raised as `ProtocolError`s, SDK-local failures as `ClientError`s.

The era is settled before the first request by a `settle` function the Client hands
in (`_era.settle`); what differs between eras is an `EraStrategy`. Must not import the
other client modules above it (`_era`, `_listen`, `_tasks`, `_tools`, `_client`),
transports or the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from types import EllipsisType
from typing import Any, Literal, Protocol, TypedDict, Unpack

from nimblemcp._loop import maybe_await
from nimblemcp.errors import (
    ClientError,
    RequestTimeout,
    ServerBusy,
    TransportError,
    UnsupportedProtocolVersion,
    error_from_wire,
)
from nimblemcp.types._meta import SERVER_INFO
from nimblemcp.types.methods import METHODS

from ._cache import ResultCache
from ._mrtr import Callback, answer_round
from ._options import TASKS_EXTENSION, Callbacks, Limits, RetryPolicy
from ._tracing import trace_context, traced
from ._transport import ParamValue, QuietAbandon, Transport

__all__ = ["IDEMPOTENT_METHODS", "EraName", "EraStrategy", "Mode", "Pipeline", "ProgressCallback"]

logger = logging.getLogger("nimblemcp.client")

Mode = Literal["auto", "modern", "legacy"]
EraName = Literal["modern", "legacy"]
ProgressCallback = Callable[[float, float | None, str | None], Any]
"""`on_progress(progress, total, message)` for one request's progress notifications."""


class RequestOptions(TypedDict, total=False):
    """What a caller may say about one request (`Client.request`, `Pipeline.run`).

    `timeout`: seconds for the whole request (None: no limit; left out: the retry
    policy's). `on_progress(progress, total, message)`: its progress notifications.
    `cache`: answer a cacheable method from the result cache (CACHE-*). `manual`:
    return an `input_required` result instead of answering its rounds. `traceparent`:
    the W3C trace context to send (else the current span's, when tracing). `meta`: more
    `_meta` keys. `param_headers`: the `Mcp-Param-*` values of a tool's `x-mcp-header`
    parameters. `retry`: re-send on a broken stream (None: the methods in
    IDEMPOTENT_METHODS)."""

    timeout: float | EllipsisType | None
    on_progress: ProgressCallback | None
    cache: bool
    manual: bool
    traceparent: str | None
    meta: Mapping[str, Any] | None
    param_headers: Mapping[str, ParamValue] | None
    retry: bool | None


_REQUEST_OPTIONS = frozenset(RequestOptions.__annotations__)
#: Takes one notification of a request's stream and the request's id.
NoteHandler = Callable[[dict[str, Any], int], None]
#: Re-issued on a broken stream without asking (RT resilience); others need `retry=True`.
IDEMPOTENT_METHODS = frozenset({
    "server/discover", "tools/list", "prompts/list", "resources/list",
    "resources/templates/list", "resources/read", "completion/complete",
})
_DEFAULT_LIMITS = Limits()
_RESULT_TYPES = frozenset({"complete", "input_required"})
_EVICT_ON = {
    "notifications/tools/list_changed": ("tools/list",),
    "notifications/prompts/list_changed": ("prompts/list",),
    "notifications/resources/list_changed": ("resources/list", "resources/templates/list"),
}


class EraStrategy(Protocol):
    """What differs between a 2026-07-28 peer and a 2025-11-25 session."""

    @property
    def name(self) -> EraName:
        """"modern" or "legacy"."""
        ...

    def envelope(self, pipeline: Pipeline) -> dict[str, Any]:
        """The era's part of a request's `_meta` (a fresh dict the caller may extend)."""
        ...

    async def recover(self, exc: TransportError) -> bool:
        """Repair the connection after `exc`; True to re-send the request."""
        ...


class Pipeline:
    """One connection's request machinery and the facts it learned (version, era,
    server info). The Client and its collaborators (listen, tasks, tools) share it."""

    def __init__(
        self,
        transport: Transport,
        *,
        modern: EraStrategy,
        settle: Callable[[Pipeline], Awaitable[None]],
        mode: Mode,
        versions: list[str],
        client_info: dict[str, Any] | None,
        capabilities: dict[str, Any],
        callbacks: Callbacks,
        retry: RetryPolicy,
        cache: ResultCache,
        cache_enabled: bool,
        log_level: str | None,
        timeout: float | None = 60.0,
    ) -> None:
        self.transport = transport
        self.mode: Mode = mode
        self.versions = versions
        self.version = versions[0]
        self.client_info = client_info
        self.capabilities = capabilities
        self.callbacks = callbacks
        self.answering: dict[str, Callback | None] = callbacks.answering()
        self.retry = retry
        self.cache = cache
        self.cache_enabled = cache_enabled
        self.log_level = log_level
        self.timeout = timeout  # seconds per request unless the request says otherwise
        self.strategy: EraStrategy = modern
        #: The settled era, kept for the client's life (COMPAT-C04); None before.
        self.era: EraName | None = None
        self.server_info: dict[str, Any] | None = None
        self.discovered: dict[str, Any] | None = None
        self.is_open = False
        #: Hears every notification that belongs to no request (set by the Client).
        self.on_stray: Callable[[dict[str, Any]], None] = self.evict_for
        #: Called when a tools/list_changed arrives (the tools collaborator relists).
        self.on_tools_changed: Callable[[], None] = _nothing
        #: What the peer may send (`all_pages` reads the list caps; set by the Client).
        self.limits = _DEFAULT_LIMITS
        self._settle = settle
        self._era_lock = asyncio.Lock()
        self._ids = itertools.count(1)

    # -- the era -------------------------------------------------------------------------

    async def ensure_era(self) -> EraName:
        """Probe (auto) or handshake (legacy) once; later calls return the kept era."""
        async with self._era_lock:
            if self.era is None:
                await self._settle(self)
            assert self.era is not None
            return self.era

    def adopt(self, strategy: EraStrategy) -> None:
        """Settle the era on `strategy`."""
        self.strategy = strategy
        self.era = strategy.name

    @property
    def accepts_tasks(self) -> bool:
        """The tasks extension is declared (TASK-01) and the connection is modern: under
        2025-11-25 it enables nothing (TASK-12)."""
        extensions = self.capabilities.get("extensions")
        declared = isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)
        return declared and self.era != "legacy"

    # -- framing -------------------------------------------------------------------------

    def next_id(self) -> int:
        return next(self._ids)

    def build_meta(
        self, *, progress_token: str | int | None = None, traceparent: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        meta = self.strategy.envelope(self)
        if progress_token is not None:
            meta["progressToken"] = progress_token
        if traceparent is not None:
            meta["traceparent"] = traceparent
        elif "opentelemetry" in sys.modules:  # the app traces: join its current span
            meta.update(trace_context())
        if extra:
            meta.update(extra)
        return meta

    # -- the request path ----------------------------------------------------------------

    async def run(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        renegotiate: bool = True,
        quiet: bool = False,
        require_open: bool = True,
        request_id: int | None = None,
        on_note: NoteHandler | None = None,
        **options: Unpack[RequestOptions],
    ) -> dict[str, Any]:
        """Send one request and return its final result (see the module docstring);
        `options` as `RequestOptions` says.

        The era settling uses `renegotiate=False` (it reads -32022 itself), `quiet=True`
        (the probe: abandoning it sends nothing) and `require_open=False` (which also
        skips settling the era first). A listen names its id (`request_id`, first
        attempt) and takes every notification of its stream itself (`on_note(note, id)`;
        it may raise to end the stream).
        """
        unknown = options.keys() - _REQUEST_OPTIONS
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) for a request: {', '.join(sorted(unknown))}")
        timeout = options.get("timeout", ...)
        on_progress = options.get("on_progress")
        cache = options.get("cache", True)
        manual = options.get("manual", False)
        traceparent = options.get("traceparent")
        meta = options.get("meta")
        param_headers = options.get("param_headers")
        retry = options.get("retry")
        if self.era is None and self.is_open and require_open:
            await self.ensure_era()
        policy = self.retry
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
        renegotiated = not renegotiate
        rounds = 0
        backoff = 0.05
        current = dict(base)
        while True:
            try:
                if traceparent is None and "opentelemetry" in sys.modules:  # the app traces
                    result = await self._traced_attempt(method, current, limit, on_progress, meta,
                                                        param_headers, quiet, require_open,
                                                        request_id, on_note)
                else:
                    result = await self._attempt(method, current, limit, on_progress, traceparent,
                                                 meta, param_headers, quiet, require_open,
                                                 request_id, on_note)
                request_id = None
            except UnsupportedProtocolVersion as exc:
                if renegotiated or not self._renegotiate(exc):
                    raise
                renegotiated = True
                continue
            except TransportError as exc:
                if self.era is not None and await self.strategy.recover(exc):
                    continue
                if not (idempotent and exc.retryable) or retries >= policy.max_retries:
                    raise
                asked = exc.retry_after if isinstance(exc, ServerBusy) else None
                if asked is not None and asked > policy.max_retry_after:
                    raise  # longer than we wait: the caller reads `retry_after`
                retries += 1
                delay = asked if asked is not None else policy.retry_backoff * 2 ** (retries - 1)
                logger.info("%s: %s; re-sending (attempt %d) in %.2f s", method, exc, retries + 1, delay)
                await asyncio.sleep(delay)
                continue
            kind = result.get("resultType", "complete")  # RT-02
            if kind == "task" and method == "tools/call" and self.accepts_tasks:
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
            if rounds >= policy.max_rounds:
                raise ClientError(f"{method}: gave up after {rounds} input_required rounds")
            requests = result.get("inputRequests")
            current = dict(base)  # MRTR-09: only the original params, plus this round
            if isinstance(requests, dict) and requests:
                current["inputResponses"] = await answer_round(requests, self.answering)
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

    async def _traced_attempt(
        self, method: str, params: Mapping[str, Any], limit: float | None,
        on_progress: ProgressCallback | None, meta: Mapping[str, Any] | None,
        param_headers: Mapping[str, ParamValue] | None, quiet: bool, require_open: bool,
        request_id: int | None, on_note: NoteHandler | None,
    ) -> dict[str, Any]:
        """`_attempt` inside a CLIENT span when the app traces with OpenTelemetry (the
        span's context is what `build_meta` puts in `_meta`)."""
        rid = self.next_id() if request_id is None else request_id
        return await traced(method, params, rid, self.version, lambda: self._attempt(
            method, params, limit, on_progress, None, meta, param_headers, quiet,
            require_open, rid, on_note))

    async def _attempt(
        self,
        method: str,
        params: Mapping[str, Any],
        limit: float | None,
        on_progress: ProgressCallback | None,
        traceparent: str | None,
        meta: Mapping[str, Any] | None,
        param_headers: Mapping[str, ParamValue] | None,
        quiet: bool,
        require_open: bool,
        request_id: int | None,
        on_note: NoteHandler | None,
    ) -> dict[str, Any]:
        """One wire request with a fresh id: its result, or its error raised."""
        if require_open and not self.is_open:
            raise ClientError("the client is not open (use `async with Client(...)`)")
        # MRTR-08: every attempt is a new request
        rid = self.next_id() if request_id is None else request_id
        token = f"{rid}-progress" if on_progress is not None else None
        body = dict(params)
        envelope = self.build_meta(progress_token=token, traceparent=traceparent, extra=meta)
        if envelope:
            body["_meta"] = envelope
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": body}
        if quiet and isinstance(self.transport, QuietAbandon):
            self.transport.quiet_ids.add(rid)
        stream = self.transport.send(message, param_headers=param_headers)
        try:
            async with asyncio.timeout(limit):
                async for item in stream:
                    if "method" in item:
                        if on_note is not None:
                            on_note(item, rid)
                        else:
                            await self._on_request_notification(item, rid, token, on_progress)
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

    # -- notifications -------------------------------------------------------------------

    async def _on_request_notification(
        self, note: dict[str, Any], rid: int, token: str | None,
        on_progress: ProgressCallback | None,
    ) -> None:
        method = note["method"]
        params = note.get("params") or {}
        if method == "notifications/progress":
            if on_progress is not None and params.get("progressToken") == token:
                await maybe_await(on_progress(params.get("progress", 0), params.get("total"),
                                               params.get("message")))
            return
        on_log = self.callbacks.on_log
        if method == "notifications/message" and on_log is not None:
            await maybe_await(on_log({**params, "requestId": rid}))
            return
        self.on_stray(note)

    def evict_for(self, note: Mapping[str, Any]) -> None:
        """CACHE-08: a list change or resource update drops the matching cache entries."""
        method = note.get("method")
        params = note.get("params") or {}
        if method in _EVICT_ON:
            self.cache.evict(*_EVICT_ON[method])
            if method == "notifications/tools/list_changed":
                self.on_tools_changed()
        elif method == "notifications/resources/updated" and isinstance(params.get("uri"), str):
            self.cache.evict(uri=params["uri"])


def _nothing() -> None:
    return None
