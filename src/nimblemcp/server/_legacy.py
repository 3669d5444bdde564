"""The legacy (2025-11-25 `initialize`) era, mapped onto the same stateless core.

A `LegacySession` holds what a legacy client fixes once for its connection: the
negotiated version, its capabilities and info, the log level (`logging/setLevel`) and
its `resources/subscribe` URIs (LEG-01..12). Each legacy request gets a per-request
`RequestMeta` built from the session, runs through the same dispatcher and handlers,
and its result is shaped for the old schema (no `resultType`, caching hints or
`serverInfo`; -32002 for a missing resource, LEG-15). Handlers stay era-blind: their
MRTR questions become real server-to-client requests (see `Dispatcher.execute(ask=)`).
Transport-agnostic: the stdio transport (and later the HTTP one) owns the wire.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nimblemcp.backends.bus import Event
from nimblemcp.errors import InvalidParams
from nimblemcp.types._meta import (
    LOG_LEVELS,
    PROGRESS_TOKEN,
    PROTOCOL_VERSION,
    SERVER_INFO,
    RequestMeta,
)
from nimblemcp.types._versions import LEGACY_VERSIONS

if TYPE_CHECKING:
    from nimblemcp.server._server import Server

_LOG_RANK = {name: i for i, name in enumerate(LOG_LEVELS)}
_MODERN_RESULT_KEYS = ("resultType", "ttlMs", "cacheScope")
_LIST_CHANGED = {
    "tools": "notifications/tools/list_changed",
    "prompts": "notifications/prompts/list_changed",
    "resources": "notifications/resources/list_changed",
}


def is_enveloped(message: dict[str, Any]) -> bool:
    """A modern request: its `_meta` names a protocol version (COMPAT-S05)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION in meta


class LegacySession:
    """One `initialize`-era connection."""

    def __init__(self, server: Server, params: Any) -> None:
        if not isinstance(params, dict):
            raise InvalidParams("initialize needs params")
        requested = params.get("protocolVersion")
        caps = params.get("capabilities")
        info = params.get("clientInfo")
        if not isinstance(requested, str) or not isinstance(caps, dict):
            raise InvalidParams("initialize needs protocolVersion and capabilities")
        self.server = server
        # Echo a legacy version we speak, else offer our newest legacy one (LEG-01).
        self.version = requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[0]
        self.capabilities: dict[str, Any] = caps  # type: ignore[assignment]
        self.client_info: dict[str, Any] | None = info if isinstance(info, dict) else None  # type: ignore[assignment]
        self.log_rank = 0  # every level until logging/setLevel says otherwise (LEG-11)
        self.uris: set[str] = set()

    def initialize_result(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "protocolVersion": self.version,
            "capabilities": self.server.dispatcher.capabilities,
            "serverInfo": self.server.info,
        }
        if self.server.instructions:
            result["instructions"] = self.server.instructions
        return result

    def request_meta(self, params: dict[str, Any]) -> RequestMeta:
        meta = params.get("_meta")
        raw: dict[str, Any] = meta if isinstance(meta, dict) else {}  # type: ignore[assignment]
        token = raw.get(PROGRESS_TOKEN)
        if not isinstance(token, str | int) or isinstance(token, bool):
            token = None
        return RequestMeta(self.version, self.capabilities, self.client_info, self.log_rank, token, raw)

    def handle_own(self, method: str, params: Any) -> dict[str, Any] | None:
        """Answer the session-level methods (ping, setLevel, subscribe); None otherwise."""
        if method == "ping":
            return {}
        if method == "logging/setLevel":
            level = params.get("level") if isinstance(params, dict) else None
            if level not in _LOG_RANK:
                raise InvalidParams(f"unknown log level: {level!r}")
            self.log_rank = _LOG_RANK[level]  # type: ignore[index]
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

    def shape(self, response: dict[str, Any], method: str) -> dict[str, Any]:
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

    def outgoing(self, request: dict[str, Any]) -> dict[str, Any]:
        """An MRTR input request as a legacy server-to-client request body."""
        params = request.get("params")
        if request.get("method") == "elicitation/create" and isinstance(params, dict) \
                and params.get("mode") == "url" and "elicitationId" not in params:
            import uuid

            request = {**request, "params": {**params, "elicitationId": str(uuid.uuid4())}}  # LEG-14
        return request

    def notification_for(self, event: Event) -> dict[str, Any] | None:
        """What a bus event means for this session: untagged notifications (LEG-12)."""
        if event.kind == "updated":
            uri = event.uri or ""
            if any(uri == s or uri.startswith(s.rstrip("/") + "/") for s in self.uris):
                return {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                        "params": {"uri": uri}}
            return None
        method = _LIST_CHANGED.get(event.kind)
        cap = self.server.dispatcher.capabilities.get(event.kind)
        if method and isinstance(cap, dict) and cap.get("listChanged"):
            return {"jsonrpc": "2.0", "method": method}
        return None
