"""Era detection and the 2025-11-25 (`initialize`) fallback of `Client` (COMPAT-C01..C07,
LEGC-01..07, MAP-07/09).

`mode="auto"` settles the era before the first request: a `server/discover` probe; a
DiscoverResult naming a mutual modern version, or a recognized modern error (-32020,
-32021, a -32022 naming a mutual modern version), means modern; every other JSON-RPC
error, an HTTP 400/404/405 without a modern error body, a DiscoverResult with no
modern version, or silence within `probe_timeout` on stdio means legacy (denylist
policy, COMPAT-C06). Network failures are no verdict and propagate. The era is kept
for the client's life (COMPAT-C04) and re-probed once if a legacy `initialize` is
answered with -32022. `mode="legacy"` skips the probe; `mode="modern"` never runs it,
nor does "auto" over a transport without a `wire` ("stdio"/"http": in-process peers).

A legacy connection runs `initialize` (offering LEGACY_VERSIONS[0], capabilities from
the registered callbacks), checks the answered version, sends
`notifications/initialized`; later requests carry no modern `_meta` envelope; the
server's requests (`ping`, `elicitation/create`, `sampling/createMessage`,
`roots/list`) are answered by the same callbacks as MRTR rounds (LEGC-03).
Must not import transports or the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from nimblemcp.errors import (
    ClientError,
    HeaderMismatch,
    ListenNotSupported,
    MissingClientCapability,
    ProtocolError,
    RequestTimeout,
    ResourceNotFound,
    TransportError,
    UnsupportedProtocolVersion,
    error_from_wire,
)
from nimblemcp.jsonrpc import error_response
from nimblemcp.types._versions import LEGACY_VERSIONS, MODERN_VERSIONS

from ._mrtr import Callback, InputRequestRefused, answer_round

if TYPE_CHECKING:
    from ._transport import Transport

__all__ = ["Era", "LegacyMixin", "ListenNotSupported", "Mode", "legacy_capabilities"]

logger = logging.getLogger("nimblemcp.client")

Mode = Literal["auto", "modern", "legacy"]
Era = Literal["modern", "legacy"]
_PROBE_STATUSES = frozenset({400, 404, 405})
_MODERN_CODES = frozenset({-32020, -32021, -32022})


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


class LegacyMixin:
    if TYPE_CHECKING:
        transport: Transport
        mode: Mode
        era: Era | None
        version: str
        versions: list[str]
        capabilities: dict[str, Any]
        callbacks: dict[str, Callback | None]
        client_info: dict[str, Any] | None
        server_info: dict[str, Any] | None
        discovered: dict[str, Any] | None
        initialized: dict[str, Any] | None
        log_level: str | None
        probe_timeout: float
        max_retries: int
        retry_backoff: float
        timeout: float | None
        _era_lock: asyncio.Lock
        next_id: Callable[[], int]
        build_meta: Callable[[], dict[str, Any]]

    # -- settling the era --------------------------------------------------------------

    async def ensure_era(self) -> Era:
        """Probe (auto) or handshake (legacy) once; later calls return the cached era."""
        async with self._era_lock:
            if self.era is None:
                if self.mode == "modern" or (
                    self.mode == "auto" and getattr(self.transport, "wire", None) is None
                ):
                    self.era = "modern"  # in-process and custom transports: no legacy peers
                elif self.mode == "legacy":
                    await self._initialize()
                else:
                    await self._probe()
            assert self.era is not None
            return self.era

    async def _probe(self, *, again: bool = True) -> None:
        on_stdio = getattr(self.transport, "wire", "") == "stdio"
        limit = self.probe_timeout if on_stdio else self.timeout
        message = {"jsonrpc": "2.0", "id": self.next_id(), "method": "server/discover",
                   "params": {"_meta": self.build_meta()}}
        try:
            reply = await self._exchange(message, limit, quiet=True)
            for attempt in range(self.max_retries):  # a broken stream is no verdict: re-send
                if not reply.get("broken"):
                    break
                await asyncio.sleep(self.retry_backoff * 2 ** attempt)
                message = {**message, "id": self.next_id()}
                reply = await self._exchange(message, limit, quiet=True)
            if reply.get("broken"):
                raise reply["broken"]
        except RequestTimeout:
            if not on_stdio:
                raise
            logger.info("no answer to server/discover within %s s: legacy server", limit)
            return await self._initialize(reprobe=again)
        except TransportError as exc:
            status = getattr(exc, "status", None)
            error = getattr(exc, "error", None)
            if status not in _PROBE_STATUSES:
                raise
            if isinstance(error, dict) and error.get("code") in _MODERN_CODES:
                reply = {"error": error}
            else:
                logger.info("server/discover got HTTP %s: legacy server", status)
                return await self._initialize(reprobe=again)
        if isinstance(reply.get("error"), dict):
            err = error_from_wire(reply["error"])
            if isinstance(err, UnsupportedProtocolVersion):
                mutual = [v for v in self.versions if v in err.supported]
                if mutual and again:
                    self.version = mutual[0]
                    return await self._probe(again=False)
                if any(v in LEGACY_VERSIONS for v in err.supported):
                    return await self._initialize(reprobe=again)
                raise err
            if isinstance(err, HeaderMismatch | MissingClientCapability):
                self.era = "modern"  # a modern server; the request itself needs fixing
                return None
            logger.info("server/discover answered %s: legacy server", err.code)
            return await self._initialize(reprobe=again)
        result = reply.get("result")
        supported = result.get("supportedVersions") if isinstance(result, dict) else None
        mutual = [v for v in self.versions if isinstance(supported, list) and v in supported]
        if not mutual:
            logger.info("the server advertises no modern version we speak: legacy server")
            return await self._initialize(reprobe=again)
        assert isinstance(result, dict)
        self.version = mutual[0]
        self.discovered = result
        self.era = "modern"
        return None

    async def _exchange(
        self, message: dict[str, Any], limit: float | None, *, quiet: bool = False
    ) -> dict[str, Any]:
        """One raw request: the response message (result or error)."""
        quiet_ids = getattr(self.transport, "quiet_ids", None)
        if quiet and isinstance(quiet_ids, set):
            quiet_ids.add(message["id"])
        stream = self.transport.send(message)
        try:
            async with asyncio.timeout(limit):
                async for item in stream:
                    if "method" not in item and item.get("id") == message["id"]:
                        return item
        except TransportError as exc:
            if quiet and getattr(exc, "retryable", False):
                return {"broken": exc}
            raise
        except TimeoutError:
            raise RequestTimeout(f"{message['method']} got no response within {limit} s") from None
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
        raise TransportError(f"{message['method']}: the stream ended without a response")

    # -- the legacy handshake (LEGC-01/02) ---------------------------------------------

    async def _initialize(self, *, reprobe: bool = True) -> None:
        reset = getattr(self.transport, "reset_session", None)
        if reset is not None:
            reset()
        params: dict[str, Any] = {
            "protocolVersion": LEGACY_VERSIONS[0],
            "capabilities": legacy_capabilities(self.callbacks, self.capabilities),
            "clientInfo": self.client_info or {"name": "nimblemcp-client", "version": "0"},
        }
        message = {"jsonrpc": "2.0", "id": self.next_id(), "method": "initialize",
                   "params": params}
        reply = await self._exchange(message, self.timeout)
        if isinstance(reply.get("error"), dict):
            exc = error_from_wire(reply["error"])
            if isinstance(exc, UnsupportedProtocolVersion) and reprobe and self.mode == "auto" and any(
                v in MODERN_VERSIONS for v in exc.supported
            ):
                return await self._probe(again=False)  # COMPAT-C06: locked modern already
            raise exc
        result = reply.get("result")
        if not isinstance(result, dict):
            raise ClientError("initialize: the response has no result object")
        version = result.get("protocolVersion")
        if version not in LEGACY_VERSIONS:
            raise UnsupportedProtocolVersion(
                LEGACY_VERSIONS[0], [version] if isinstance(version, str) else [],
                f"the server answered initialize with {version!r}, which this client "
                f"does not speak ({list(LEGACY_VERSIONS)})",
            )
        assert isinstance(version, str)
        begin = getattr(self.transport, "begin_session", None)
        if begin is not None:
            started = begin(version)
            if inspect.isawaitable(started):
                await started
        self.version = version
        self.initialized = result
        info = result.get("serverInfo")
        self.server_info = info if isinstance(info, dict) else None
        self.era = "legacy"
        await self.transport.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if self.log_level is not None and "logging" in (result.get("capabilities") or {}):
            await self._legacy_call("logging/setLevel", {"level": self.log_level})
        return None

    async def _legacy_call(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": self.next_id(), "method": method, "params": dict(params)}
        reply = await self._exchange(message, self.timeout)
        if isinstance(reply.get("error"), dict):
            raise error_from_wire(reply["error"])
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    async def _recover(self, exc: TransportError) -> bool:
        """LEGC-02: a 404 for our session id starts a new session; True to re-send."""
        if self.era != "legacy" or not getattr(exc, "session_expired", False):
            return False
        logger.info("the legacy session expired; initializing a new one")
        await self._initialize(reprobe=False)
        return True

    # -- being a JSON-RPC server for the peer (LEGC-03) --------------------------------

    async def _answer_peer(self, message: dict[str, Any]) -> dict[str, Any]:
        rid = message.get("id")
        method = message.get("method")
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        try:
            if method == "ping":
                result: dict[str, Any] = {}
            elif method in ("elicitation/create", "sampling/createMessage", "roots/list"):
                answers = await answer_round({"legacy": {"method": method, "params": params}},
                                             self.callbacks)
                result = answers["legacy"]
            else:
                return _error(rid, -32601, f"Method not found: {method}")
        except InputRequestRefused as exc:
            return _error(rid, -32601 if "no callback" in str(exc) else -32603, str(exc))
        except Exception as exc:  # a failing callback must still answer the server
            logger.exception("answering %s failed", method)
            return _error(rid, -32603, f"the client failed to answer {method}: {exc}")
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    # -- legacy-only calls -------------------------------------------------------------

    async def set_log_level(self, level: str) -> None:
        """Modern: sent as `_meta.logLevel` from now on; legacy: `logging/setLevel`."""
        self.log_level = level
        if await self.ensure_era() == "legacy":
            await self._legacy_call("logging/setLevel", {"level": level})

    async def subscribe_resource(self, uri: str) -> None:
        """Legacy `resources/subscribe`; updates arrive at `on_notification` (LEGC-05)."""
        if await self.ensure_era() != "legacy":
            raise ClientError("subscribe_resource is legacy-only; use listen(resources=[...])")
        await self._legacy_call("resources/subscribe", {"uri": uri})

    async def unsubscribe_resource(self, uri: str) -> None:
        if await self.ensure_era() != "legacy":
            raise ClientError("unsubscribe_resource is legacy-only")
        await self._legacy_call("resources/unsubscribe", {"uri": uri})

    async def notify_roots_changed(self) -> None:
        """Legacy: `notifications/roots/list_changed` (modern servers ask every time)."""
        if self.era == "legacy":
            await self.transport.notify(
                {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})

    def legacy_discover_result(self) -> dict[str, Any]:
        """A DiscoverResult-shaped view of the `initialize` result (LEGC-07)."""
        init = self.initialized or {}
        found: dict[str, Any] = {"supportedVersions": [self.version],
                                 "capabilities": init.get("capabilities") or {}}
        for key in ("serverInfo", "instructions"):
            if key in init:
                found[key] = init[key]
        return found


def not_found(exc: ProtocolError, uri: str) -> ProtocolError:
    """COMPAT-C07: a legacy -32002 is the same typed not-found as a modern one."""
    if exc.code == -32002:
        return ResourceNotFound(uri, exc.message)
    return exc


def _error(rid: Any, code: int, message: str) -> dict[str, Any]:
    return error_response(rid, error_from_wire({"code": code, "message": message}))
