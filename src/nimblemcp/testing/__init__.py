"""Test helpers we use ourselves: `connect(server)`, a `Client` in memory.

`connect(server)` gives a `TestClient`: a `nimblemcp.Client` over a `MemoryTransport`
(the 2026-07-28 era, no result cache), whose every message goes through the JSON codec
both ways, so tests see exactly the bytes a real peer would. Everything of `Client`
works as over any transport (the MRTR loop answered by callbacks, output validation,
tasks followed); `manual=True` returns an `input_required` result instead, and
`call_tool(..., wait=False)` a task's `CreateTaskResult`. On top, what a test of the
wire needs: `capabilities=` declares exactly these client capabilities, callbacks or
not; `meta()` is the `_meta` every request carries; `exchange(method, params,
meta=...)` sends one request exactly so and `send_raw(data)` any bytes or message, and
both return everything the server sent (`Exchange`). May import the client and
transports, never the server at run time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from nimblemcp.client import Client
from nimblemcp.errors import error_from_wire
from nimblemcp.transports.client.memory import MemoryTransport
from nimblemcp.types._meta import CLIENT_CAPABILITIES, CLIENT_INFO, PROTOCOL_VERSION
from nimblemcp.types._versions import LATEST_VERSION

if TYPE_CHECKING:
    from nimblemcp.server._server import Server

__all__ = ["Exchange", "TestClient", "connect"]


class Exchange:
    """Everything a request produced: notifications in order, then the response."""

    __slots__ = ("notifications", "response")

    def __init__(self, notifications: list[dict[str, Any]], response: dict[str, Any] | None) -> None:
        self.notifications = notifications
        self.response = response

    @property
    def result(self) -> dict[str, Any]:
        """The result; a JSON-RPC error is raised as its ProtocolError."""
        assert self.response is not None, "no response (was it a notification?)"
        if "error" in self.response:
            raise error_from_wire(self.response["error"])
        result: dict[str, Any] = self.response["result"]
        return result

    @property
    def error(self) -> dict[str, Any]:
        assert self.response is not None and "error" in self.response, self.response
        error: dict[str, Any] = self.response["error"]
        return error


class TestClient(Client):
    """A `Client` in memory for tests, plus the wire (see the module docstring)."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        server: Server,
        *,
        version: str = LATEST_VERSION,
        capabilities: dict[str, Any] | None = None,
        client_info: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        self.server = server
        info = client_info or {"name": "nimblemcp-testing", "version": "0"}
        super().__init__(MemoryTransport(server), mode="modern", versions=[version],
                         client_info=info, **{"cache": False, **options})
        if capabilities is not None:  # declared as given, whatever the callbacks
            self._pipe.capabilities = dict(capabilities)

    def meta(self, **extra: Any) -> dict[str, Any]:
        """The `_meta` of this client's requests, with `extra` keys."""
        meta: dict[str, Any] = {
            PROTOCOL_VERSION: self.version,
            CLIENT_CAPABILITIES: self.capabilities,
            CLIENT_INFO: self.client_info,
        }
        meta.update(extra)
        return meta

    async def send_raw(self, data: bytes | dict[str, Any]) -> Exchange:
        """Send one message (bytes as-is, dicts encoded) and collect what comes back."""
        transport: MemoryTransport = self.transport  # type: ignore[assignment]
        notes, response = await transport.exchange(data)
        return Exchange(notes, response)

    async def exchange(
        self, method: str, params: dict[str, Any] | None = None, *, meta: dict[str, Any] | None = None
    ) -> Exchange:
        """One request as given (`meta`: its whole `_meta`, else `meta()`), sent once."""
        body = dict(params or {})
        body["_meta"] = meta if meta is not None else self.meta()
        return await self.send_raw({"jsonrpc": "2.0", "id": self.next_id(), "method": method, "params": body})


@contextlib.asynccontextmanager
async def connect(server: Server, **options: Any) -> AsyncIterator[TestClient]:
    """An in-memory client for `server`: `async with connect(server) as client: ...`;
    the server's lifespan runs meanwhile. `options`: those of `TestClient` and `Client`."""
    client = TestClient(server, **options)
    async with server.lifespan_context(), client:
        yield client
    await asyncio.sleep(0)
