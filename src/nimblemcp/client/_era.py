"""Which era the peer speaks, and the two strategies: `ModernEra` (2026-07-28,
stateless, every request self-describing) and `LegacyEra` (a 2025-11-25 `initialize`
session). `settle` is what `Pipeline.ensure_era` runs once.

The probe (mode "auto", MAP-09) sends `server/discover`: a DiscoverResult naming a
mutual modern version, or a recognized modern error (-32020, -32021, a -32022 naming a
mutual modern version), means modern; every other JSON-RPC error, an HTTP 400/404/405
without a modern error body, a DiscoverResult with no modern version, or silence within
`probe_timeout` on stdio means legacy (denylist policy, COMPAT-C06). Network failures
are no verdict and propagate. The era is kept for the client's life (COMPAT-C04) and
re-probed once if a legacy `initialize` is answered with -32022. `mode="legacy"` skips
the probe; `mode="modern"` never runs it, nor does "auto" over a transport that is no
`RemotePeer` (in-process and custom peers).

A legacy connection runs `initialize` (offering LEGACY_VERSIONS[0], capabilities from
the registered callbacks), checks the answered version, sends
`notifications/initialized`; later requests carry no modern `_meta` envelope; the
server's requests (`ping`, `elicitation/create`, `sampling/createMessage`,
`roots/list`) are answered by the same callbacks as MRTR rounds (LEGC-03); a session
that expired is initialized again (LEGC-02); the session's notifications feed the
listens opened on it (LEGC-05, see `_listen`). Imports `_pipeline` and below; must not
import transports or the server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, Protocol

from nimblemcp.errors import (
    HeaderMismatch,
    HttpStatusError,
    ListenNotSupported,
    MethodNotFound,
    MissingClientCapability,
    ProtocolError,
    RequestTimeout,
    ResourceNotFound,
    TransportError,
    UnsupportedProtocolVersion,
    error_from_wire,
)
from nimblemcp.types._meta import CLIENT_CAPABILITIES, CLIENT_INFO, LOG_LEVEL, PROTOCOL_VERSION
from nimblemcp.types._versions import LEGACY_VERSIONS, MODERN_VERSIONS

from ._mrtr import Callback, InputRequestRefused, answer_round
from ._pipeline import EraName, Pipeline
from ._transport import LegacySessions, RemotePeer

__all__ = [
    "MODERN", "EraName", "LegacyEra", "ListenNotSupported", "ModernEra", "legacy_capabilities",
    "no_common", "not_found", "probe", "settler",
]

logger = logging.getLogger("nimblemcp.client")

_PROBE_STATUSES = frozenset({400, 404, 405})
_MODERN_CODES = frozenset({-32020, -32021, -32022})


class SessionListener(Protocol):
    """A listen served by the session's notifications (`_listen.Listener`)."""

    def deliver_legacy(self, note: dict[str, Any]) -> None: ...


class ModernEra:
    """2026-07-28: every request carries the whole envelope; nothing to repair."""

    name: Literal["modern"] = "modern"

    def envelope(self, pipeline: Pipeline) -> dict[str, Any]:
        """The `_meta` keys every 2026-07-28 request carries (META-01/03, VER-01)."""
        meta: dict[str, Any] = {PROTOCOL_VERSION: pipeline.version,
                                CLIENT_CAPABILITIES: pipeline.capabilities}
        if pipeline.client_info is not None:
            meta[CLIENT_INFO] = pipeline.client_info
        if pipeline.log_level is not None:
            meta[LOG_LEVEL] = pipeline.log_level
        return meta

    async def recover(self, exc: TransportError) -> bool:
        return False


class LegacyEra:
    """2025-11-25: the session the `initialize` handshake opened, and what hangs on it:
    the handshake itself, the calls that exist only here, the answers to the server's
    requests, and the listens served by the session's notifications."""

    name: Literal["legacy"] = "legacy"

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        #: The `initialize` result of the current session.
        self.initialized: dict[str, Any] | None = None
        #: Open legacy listeners: each takes the session's notifications (`deliver`).
        self.listeners: set[SessionListener] = set()
        #: How many open listeners want each subscribed URI (reference counts).
        self.subscriptions: dict[str, int] = {}

    def envelope(self, pipeline: Pipeline) -> dict[str, Any]:
        return {}  # the handshake said it all (LEGC-01)

    async def recover(self, exc: TransportError) -> bool:
        """LEGC-02: a 404 for our session id starts a new session; True to re-send."""
        if not exc.session_expired:
            return False
        logger.info("the legacy session expired; initializing a new one")
        await self.initialize(reprobe=False)
        return True

    # -- the handshake (LEGC-01/02) ------------------------------------------------------

    async def initialize(self, *, reprobe: bool = True) -> None:
        pipe = self.pipeline
        transport = pipe.transport
        if isinstance(transport, LegacySessions):
            transport.reset_session()
        params: dict[str, Any] = {
            "protocolVersion": LEGACY_VERSIONS[0],
            "capabilities": legacy_capabilities(pipe.answering, pipe.capabilities),
            "clientInfo": pipe.client_info or {"name": "nimblemcp-client", "version": "0"},
        }
        previous = pipe.strategy
        pipe.strategy = self  # framed as a legacy request: no modern `_meta`
        try:
            result = await pipe.run("initialize", params, cache=False, renegotiate=False,
                                    retry=False, require_open=False)
        except UnsupportedProtocolVersion as exc:
            pipe.strategy = previous
            if reprobe and pipe.mode == "auto" and any(v in MODERN_VERSIONS for v in exc.supported):
                return await probe(pipe, self, again=False)  # COMPAT-C06: locked modern already
            raise
        except BaseException:
            pipe.strategy = previous
            raise
        version = result.get("protocolVersion")
        if version not in LEGACY_VERSIONS:
            pipe.strategy = previous
            raise UnsupportedProtocolVersion(
                LEGACY_VERSIONS[0], [version] if isinstance(version, str) else [],
                f"the server answered initialize with {version!r}, which this client "
                f"does not speak ({list(LEGACY_VERSIONS)})",
            )
        assert isinstance(version, str)
        if isinstance(transport, LegacySessions):
            await transport.begin_session(version)
        pipe.version = version
        self.initialized = result
        info = result.get("serverInfo")
        pipe.server_info = info if isinstance(info, dict) else None
        pipe.adopt(self)
        await transport.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if pipe.log_level is not None and "logging" in (result.get("capabilities") or {}):
            await self.call("logging/setLevel", {"level": pipe.log_level})
        return None

    async def call(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """A request that exists only in a 2025-11-25 session."""
        return await self.pipeline.run(method, params, cache=False, renegotiate=False,
                                       retry=False, require_open=False)

    def discover_result(self) -> dict[str, Any]:
        """A DiscoverResult-shaped view of the `initialize` result (LEGC-07)."""
        init = self.initialized or {}
        found: dict[str, Any] = {"supportedVersions": [self.pipeline.version],
                                 "capabilities": init.get("capabilities") or {}}
        for key in ("serverInfo", "instructions"):
            if key in init:
                found[key] = init[key]
        return found

    def deliver(self, note: dict[str, Any]) -> None:
        """A session notification (already evicted from the cache) to every listen."""
        for listener in list(self.listeners):
            listener.deliver_legacy(note)

    # -- being a JSON-RPC server for the peer (LEGC-03) ----------------------------------

    async def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        rid = message.get("id")
        method = message.get("method")
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        try:
            if method == "ping":
                result: dict[str, Any] = {}
            elif method in ("elicitation/create", "sampling/createMessage", "roots/list"):
                answers = await answer_round({"legacy": {"method": method, "params": params}},
                                             self.pipeline.answering)
                result = answers["legacy"]
            else:
                return _error(rid, -32601, f"Method not found: {method}")
        except InputRequestRefused as exc:
            return _error(rid, -32601 if "no callback" in str(exc) else -32603, str(exc))
        except Exception as exc:  # a failing callback must still answer the server
            logger.exception("answering %s failed", method)
            return _error(rid, -32603, f"the client failed to answer {method}: {exc}")
        return {"jsonrpc": "2.0", "id": rid, "result": result}


MODERN = ModernEra()


def settler(legacy: LegacyEra) -> Callable[[Pipeline], Awaitable[None]]:
    """The `settle` function a Pipeline runs once: by mode, and by what the transport is."""

    async def settle(pipe: Pipeline) -> None:
        if pipe.mode == "modern" or (pipe.mode == "auto" and not isinstance(pipe.transport, RemotePeer)):
            pipe.adopt(MODERN)  # in-process and custom transports: no legacy peers
        elif pipe.mode == "legacy":
            await legacy.initialize()
        else:
            await probe(pipe, legacy)

    return settle


async def probe(pipe: Pipeline, legacy: LegacyEra, *, again: bool = True) -> None:
    """`server/discover` decides the era (see the module docstring)."""
    transport = pipe.transport
    on_stdio = isinstance(transport, RemotePeer) and transport.wire == "stdio"
    limit = pipe.retry.probe_timeout if on_stdio else pipe.timeout
    pipe.strategy = MODERN
    error: ProtocolError | None = None
    try:
        result = await pipe.run("server/discover", None, timeout=limit, cache=False, manual=True,
                                retry=True, renegotiate=False, quiet=True, require_open=False)
    except RequestTimeout:
        if not on_stdio:
            raise
        logger.info("no answer to server/discover within %s s: legacy server", limit)
        return await legacy.initialize(reprobe=again)
    except ProtocolError as exc:
        error = exc
    except TransportError as exc:
        http = exc if isinstance(exc, HttpStatusError) else None
        status = http.status if http else None
        body = http.error if http else None
        if status not in _PROBE_STATUSES:
            raise
        if not (isinstance(body, dict) and body.get("code") in _MODERN_CODES):
            logger.info("server/discover got HTTP %s: legacy server", status)
            return await legacy.initialize(reprobe=again)
        error = error_from_wire(body)
    if error is not None:
        if isinstance(error, UnsupportedProtocolVersion):
            mutual = [v for v in pipe.versions if v in error.supported]
            if mutual and again:
                pipe.version = mutual[0]
                return await probe(pipe, legacy, again=False)
            if any(v in LEGACY_VERSIONS for v in error.supported):
                return await legacy.initialize(reprobe=again)
            raise no_common(pipe, error.supported, error.requested) from error
        if isinstance(error, HeaderMismatch | MissingClientCapability):
            pipe.adopt(MODERN)  # a modern server; the request itself needs fixing
            return None
        logger.info("server/discover answered %s: legacy server", error.code)
        return await legacy.initialize(reprobe=again)
    supported = result.get("supportedVersions")
    mutual = [v for v in pipe.versions if isinstance(supported, list) and v in supported]
    if not mutual:
        logger.info("the server advertises no modern version we speak: legacy server")
        try:
            return await legacy.initialize(reprobe=again)
        except MethodNotFound as exc:  # no `initialize` either: nothing in common
            versions = [v for v in supported if isinstance(v, str)] if isinstance(supported, list) else []
            raise no_common(pipe, versions, pipe.version) from exc
    pipe.version = mutual[0]
    pipe.discovered = result
    pipe.adopt(MODERN)
    return None


def no_common(pipe: Pipeline, supported: list[str], requested: Any) -> UnsupportedProtocolVersion:
    """The error for a server that shares no protocol version with this client."""
    ours = [*pipe.versions, *LEGACY_VERSIONS]
    return UnsupportedProtocolVersion(
        requested, supported,
        f"no protocol version in common: the server supports {supported or 'none it named'}, "
        f"this client {ours}",
    )


def legacy_capabilities(callbacks: Mapping[str, Callback | None],
                        modern: Mapping[str, Any]) -> dict[str, Any]:
    """2025-11-25 `ClientCapabilities` from the registered callbacks (LEGC-01)."""
    caps: dict[str, Any] = {}
    if callbacks.get("elicit") is not None:
        caps["elicitation"] = dict(modern.get("elicitation") or {"form": {}})
    if callbacks.get("sample") is not None:
        caps["sampling"] = dict(modern.get("sampling") or {})
    if callbacks.get("roots") is not None:
        caps["roots"] = {"listChanged": True}
    return caps


def not_found(exc: ProtocolError, uri: str) -> ProtocolError:
    """COMPAT-C07: a legacy -32002 is the same typed not-found as a modern one."""
    if exc.code == -32002:
        return ResourceNotFound(uri, exc.message)
    return exc


def _error(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}

