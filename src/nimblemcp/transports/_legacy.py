"""The legacy (2025-11-25 `initialize`) adapter, shared by the stdio and HTTP legs.

A `LegacySession` is one `initialize`-era peer: what its handshake fixed (the
negotiated version, its capabilities and info), its log level (`logging/setLevel`),
its `resources/subscribe` URIs (LEG-01..12), the back channel (server-to-client
requests and the futures awaiting their answers, LEG-09), its requests in flight
(cancel by id, LEG-07) and the forwarding of change events as untagged notifications
(LEG-12). A question the peer leaves unanswered for `LegacyOptions.request_timeout`
seconds is withdrawn (`notifications/cancelled` to the peer) and fails its request
with `InputTimeout`. Each legacy request gets a `RequestMeta` built from the session, runs
through the same stateless core, and its result is shaped for the old schema (no
`resultType`, caching hints or `serverInfo`; -32002 for a missing resource, LEG-15).
Handlers stay era-blind: their MRTR questions go out through the back channel.

The wire is the transport's: it hands in decoded messages and a per-request sink
(`Emit`) that writes one message towards the peer (stdout, or the POST's SSE stream).
Imports only the port and the low layers.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from typing import Any

from nimblemcp._port import ChangeEvent, Changes, CloseStream, Core, Emit, Prepared
from nimblemcp.errors import (
    InputTimeout,
    InternalError,
    InvalidParams,
    MethodNotFound,
    ProtocolError,
)
from nimblemcp.jsonrpc import error_response
from nimblemcp.transports._envelope import is_enveloped
from nimblemcp.types._meta import (
    PROGRESS_TOKEN,
    SERVER_INFO,
    RequestMeta,
    log_rank,
)
from nimblemcp.types._versions import LEGACY_VERSIONS

__all__ = ["LegacySession", "is_enveloped"]

logger = logging.getLogger("nimblemcp.legacy")

# Methods of the stateless revision that a legacy session does not offer (the tasks
# extension does not exist under 2025-11-25, SEP-2663).
MODERN_ONLY = frozenset({"server/discover", "subscriptions/listen", "tasks/get", "tasks/update", "tasks/cancel"})
_MODERN_RESULT_KEYS = ("resultType", "ttlMs", "cacheScope")
_LIST_CHANGED = {
    "tools": "notifications/tools/list_changed",
    "prompts": "notifications/prompts/list_changed",
    "resources": "notifications/resources/list_changed",
}


class _SessionIO:
    """The `RequestIO` of one legacy request: its sink, its subject, the back channel;
    `headers` and `auth` from the transport's own request (`facts`), when it has them."""

    __slots__ = ("close_stream", "emit", "facts", "session", "subject")
    loop = None

    def __init__(self, session: LegacySession, sink: Emit, subject: str | None, facts: Any = None,
                 close_stream: CloseStream | None = None) -> None:
        self.session = session
        self.emit = sink
        self.subject = subject
        self.facts = facts
        self.close_stream = close_stream

    @property
    def headers(self) -> Any:
        return getattr(self.facts, "headers", None)

    @property
    def auth(self) -> Any:
        return getattr(self.facts, "auth", None)

    async def ask(self, requests: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return await self.session.ask(requests, self.emit)


class LegacySession:
    """One `initialize`-era peer (a stdio connection, or one HTTP session).

    Concurrency: used on the event loop thread only. Cleanup: `close()` cancels the
    questions waiting for answers and the requests in flight; the transport ends its
    own streams."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.version: str = LEGACY_VERSIONS[0]
        self.capabilities: dict[str, Any] = {}
        self.client_info: dict[str, Any] | None = None
        self.log_rank = 0  # every level until logging/setLevel says otherwise (LEG-11)
        self.uris: set[str] = set()
        self.pending: dict[str, asyncio.Future[Any]] = {}  # our questions by request id
        self.ids = itertools.count(1)
        self.requests: dict[Any, asyncio.Task[Any]] = {}  # the peer's requests in flight
        self.cancelled: set[Any] = set()  # ids stopped by notifications/cancelled
        self.closed = False

    # -- the handshake -------------------------------------------------------------------

    def initialize(self, params: Any) -> dict[str, Any]:
        """Take an `initialize` request's params; return the result (LEG-01).

        Raises `InvalidParams` (and changes nothing) when they are malformed."""
        if not isinstance(params, dict):
            raise InvalidParams("initialize needs params")
        requested = params.get("protocolVersion")
        caps = params.get("capabilities")
        info = params.get("clientInfo")
        if not isinstance(requested, str) or not isinstance(caps, dict):
            raise InvalidParams("initialize needs protocolVersion and capabilities")
        # Echo a legacy version we speak, else offer our newest legacy one (LEG-01).
        self.version = requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[0]
        self.capabilities = caps  # type: ignore[assignment]
        self.client_info = info if isinstance(info, dict) else None  # type: ignore[assignment]
        self.log_rank = 0
        self.uris = set()
        return {"protocolVersion": self.version, **self.core.describe()}

    # -- requests ------------------------------------------------------------------------

    def prepare(self, message: dict[str, Any]) -> Prepared | dict[str, Any]:
        """A request of this session: the response when it is answered at once
        (ping, setLevel, subscribe, or an error), else the request to `run`."""
        rid = message["id"]
        method: str = message["method"]
        params = message.get("params")
        try:
            own = self._own(method, params)
            if own is not None:
                return {"jsonrpc": "2.0", "id": rid, "result": own}
            if params is None:
                params = {}
                message = {**message, "params": params}
            elif not isinstance(params, dict):
                raise InvalidParams("params must be an object")
            if method in MODERN_ONLY:
                raise MethodNotFound(f"Method not found: {method}")
            return self.core.prepare(message, self._request_meta(params))  # type: ignore[arg-type]
        except ProtocolError as exc:
            return self.refusal(rid, method, exc)

    def refusal(self, rid: Any, method: str, exc: ProtocolError) -> dict[str, Any]:
        """An error response to a request of this session, in the legacy shape."""
        return self.shape(error_response(rid, exc), method)

    async def run(
        self, req: Prepared, sink: Emit, subject: str | None = None, facts: Any = None,
        close_stream: CloseStream | None = None,
    ) -> dict[str, Any]:
        """Run a prepared request with `sink` for its notifications and questions;
        cancellable by id while it runs (`cancel`). `facts`: the transport's request
        (optional `headers` and `auth`, e.g. the HTTP exchange); `close_stream`: set when
        the sink's stream is resumable."""
        task = asyncio.current_task()
        if task is not None:
            self.requests[req.id] = task
        try:
            response = await self.core.execute(req, _SessionIO(self, sink, subject, facts, close_stream))
        finally:
            if self.requests.get(req.id) is task:
                del self.requests[req.id]
        return self.shape(response, req.method)

    def cancel(self, params: Any) -> None:
        """`notifications/cancelled` stops the named request (LEG-07)."""
        rid = params.get("requestId") if isinstance(params, dict) else None
        task = self.requests.get(rid) if isinstance(rid, str | int) else None
        if task is not None:
            self.cancelled.add(rid)
            task.cancel()

    def _request_meta(self, params: dict[str, Any]) -> RequestMeta:
        meta = params.get("_meta")
        raw: dict[str, Any] = meta if isinstance(meta, dict) else {}  # type: ignore[assignment]
        token = raw.get(PROGRESS_TOKEN)
        if not isinstance(token, str | int) or isinstance(token, bool):
            token = None
        return RequestMeta(self.version, self.capabilities, self.client_info, self.log_rank, token, raw)

    def _own(self, method: str, params: Any) -> dict[str, Any] | None:
        """Answer the session-level methods (ping, setLevel, subscribe); None otherwise."""
        if method == "ping":
            return {}
        if method == "logging/setLevel":
            level = params.get("level") if isinstance(params, dict) else None
            try:
                self.log_rank = log_rank(level)  # type: ignore[arg-type]
            except (ValueError, TypeError):  # not a level's name (LOG-05)
                raise InvalidParams(f"unknown log level: {level!r}") from None
            return {}
        if method in ("resources/subscribe", "resources/unsubscribe"):
            uri = params.get("uri") if isinstance(params, dict) else None
            if not isinstance(uri, str):
                raise InvalidParams(f"{method} needs a string 'uri'")
            if method == "resources/subscribe":
                self.uris.add(uri)
            else:
                self.uris.discard(uri)
            return {}
        return None

    @staticmethod
    def shape(response: dict[str, Any], method: str) -> dict[str, Any]:
        """Fit a response to the legacy schema (COMPAT-S07, LEG-15)."""
        result = response.get("result")
        if isinstance(result, dict):
            result = {k: v for k, v in result.items() if k not in _MODERN_RESULT_KEYS}  # type: ignore[union-attr]
            meta = result.get("_meta")
            if isinstance(meta, dict) and SERVER_INFO in meta:
                rest = {k: v for k, v in meta.items() if k != SERVER_INFO}  # type: ignore[union-attr]
                if rest:
                    result["_meta"] = rest
                else:
                    del result["_meta"]
            return {**response, "result": result}
        error = response.get("error")
        if (method == "resources/read" and isinstance(error, dict) and error.get("code") == -32602
                and isinstance(error.get("data"), dict) and "uri" in error["data"]):  # type: ignore[operator]
            return {**response, "error": {**error, "code": -32002}}
        return response

    # -- the back channel (LEG-09) --------------------------------------------------------

    async def ask(self, requests: dict[str, dict[str, Any]], sink: Emit) -> dict[str, Any]:
        """Send one round of questions as requests through `sink`; the answers by key."""
        loop = asyncio.get_running_loop()
        waits: dict[str, asyncio.Future[Any]] = {}
        sent: dict[str, str] = {}  # request id -> method
        limit = self.core.legacy_options.request_timeout
        try:
            for key, request in requests.items():
                qid = f"nimblemcp-{next(self.ids)}"
                waits[key] = self.pending[qid] = loop.create_future()
                sent[qid] = str(request.get("method"))
                sink({"jsonrpc": "2.0", "id": qid, **_outgoing(request)})
            async with asyncio.timeout(limit):
                answers = await asyncio.gather(*waits.values())
        except TimeoutError:
            # Timing out cancelled the gather and with it the futures still waiting.
            late = [qid for qid in sent if self.pending[qid].cancelled() or not self.pending[qid].done()]
            for qid in late:  # withdraw what is still open (the 2025-11-25 cancellation)
                sink({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": qid, "reason": "No answer in time"}})
            methods = sorted({sent[q] for q in late})
            raise InputTimeout(
                f"The client did not answer {', '.join(methods)} within {limit:g} s") from None
        finally:
            for qid in sent:
                self.pending.pop(qid, None)
        return dict(zip(waits, answers, strict=True))

    def answer(self, message: dict[str, Any]) -> None:
        """The peer's JSON-RPC response to one of our requests (unknown ids ignored)."""
        rid = message.get("id")
        future = self.pending.get(rid) if isinstance(rid, str) else None
        if future is None or future.done():
            return
        result = message.get("result")
        if isinstance(result, dict):
            future.set_result(result)
        else:
            error = message.get("error")
            text = error.get("message") if isinstance(error, dict) else None
            future.set_exception(InternalError(f"The client could not answer: {text or 'error'}"))

    # -- change events (LEG-12) -----------------------------------------------------------

    def notification_for(self, event: ChangeEvent) -> dict[str, Any] | None:
        """What a change event means for this session: an untagged notification."""
        if event.kind == "updated":
            uri = event.uri or ""
            if any(uri == s or uri.startswith(s.rstrip("/") + "/") for s in self.uris):
                return {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                        "params": {"uri": uri}}
            return None
        method = _LIST_CHANGED.get(event.kind)
        cap = self.core.describe()["capabilities"].get(event.kind)
        if method and isinstance(cap, dict) and cap.get("listChanged"):
            return {"jsonrpc": "2.0", "method": method}
        return None

    async def forward(self, changes: Changes, deliver: Emit) -> None:
        """Deliver change events through `deliver` until the subscription ends (the
        server closes listeners, or this session fell too far behind)."""
        try:
            async with changes as events:
                async for event in events:
                    note = self.notification_for(event)
                    if note is not None:
                        deliver(note)
        except Exception:  # a dropped slow listener or a closed bus ends the forwarding
            logger.debug("legacy change forwarding ended", exc_info=True)

    def close(self, *, stop_requests: bool = True) -> None:
        """Cancel waiting questions and, unless told otherwise, running requests (a
        transport that gives its requests a grace period at shutdown keeps them)."""
        self.closed = True
        for future in self.pending.values():
            future.cancel()
        self.pending.clear()
        if stop_requests:
            for task in list(self.requests.values()):
                task.cancel()


def _outgoing(request: dict[str, Any]) -> dict[str, Any]:
    """An MRTR input request as a legacy server-to-client request body."""
    params = request.get("params")
    if request.get("method") == "elicitation/create" and isinstance(params, dict) \
            and params.get("mode") == "url" and "elicitationId" not in params:
        request = {**request, "params": {**params, "elicitationId": str(uuid.uuid4())}}  # LEG-14
    return request
