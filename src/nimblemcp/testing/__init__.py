"""Test helpers we use ourselves: a wire-level client over the real `Client` and its
in-memory transport.

`connect(server)` gives a `TestClient` whose every message goes through the JSON codec
both ways (`MemoryTransport.exchange`), so tests see exactly the bytes a real peer
would. Its methods are wire-level on purpose: a request is sent once and its raw
result returned (an `input_required` or task result included, no MRTR loop, no cache,
no retry), except that `list_*` return the items of every page as `Client`'s do;
`exchange`/`send_raw` return everything the server sent, and the `_meta` envelope
declares exactly the `capabilities` given, so tests can craft what no callback would.
For the high-level API on the same server and transport, `client.client` is a
`nimblemcp.Client` (modern, cache off), opened and closed by `connect`; both share one
id sequence. May import the client and transports, never the server at run time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from nimblemcp.client import Client
from nimblemcp.errors import error_from_wire
from nimblemcp.transports.memory import MemoryTransport
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


class TestClient:
    """A wire-level client for tests over a `MemoryTransport`; `client` is the real one."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        server: Server,
        *,
        version: str = LATEST_VERSION,
        capabilities: dict[str, Any] | None = None,
        client_info: dict[str, Any] | None = None,
    ) -> None:
        self.server = server
        self.version = version
        self.capabilities = capabilities if capabilities is not None else {}
        self.client_info = client_info or {"name": "nimblemcp-testing", "version": "0"}
        self.transport = MemoryTransport(server)
        #: The high-level Client on the same transport (opened by `connect`).
        self.client = Client(self.transport, mode="modern", versions=[version],
                             client_info=self.client_info, cache=False)

    def meta(self, **extra: Any) -> dict[str, Any]:
        meta: dict[str, Any] = {
            PROTOCOL_VERSION: self.version,
            CLIENT_CAPABILITIES: self.capabilities,
            CLIENT_INFO: self.client_info,
        }
        meta.update(extra)
        return meta

    async def send_raw(self, data: bytes | dict[str, Any]) -> Exchange:
        """Send one message (bytes as-is, dicts encoded) and collect what comes back."""
        notes, response = await self.transport.exchange(data)
        return Exchange(notes, response)

    async def exchange(
        self, method: str, params: dict[str, Any] | None = None, *, meta: dict[str, Any] | None = None
    ) -> Exchange:
        body = dict(params or {})
        body["_meta"] = meta if meta is not None else self.meta()
        return await self.send_raw(
            {"jsonrpc": "2.0", "id": self.client.next_id(), "method": method, "params": body}
        )

    async def request(self, method: str, params: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
        return (await self.exchange(method, params, meta=self.meta(**meta) if meta else None)).result

    # -- conveniences ---------------------------------------------------------------------

    async def discover(self) -> dict[str, Any]:
        return await self.request("server/discover")

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool, all pages walked: the list `Client.list_tools()` gives. The raw
        result of one page: `await client.request("tools/list", {"cursor": ...})`."""
        return await self._all_pages("tools/list", "tools")

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        return await self.request("tools/call", params, **meta)

    async def list_resources(self) -> list[dict[str, Any]]:
        return await self._all_pages("resources/list", "resources")

    async def list_resource_templates(self) -> list[dict[str, Any]]:
        return await self._all_pages("resources/templates/list", "resourceTemplates")

    async def read_resource(self, uri: str) -> dict[str, Any]:
        return await self.request("resources/read", {"uri": uri})

    async def list_prompts(self) -> list[dict[str, Any]]:
        return await self._all_pages("prompts/list", "prompts")

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        return await self.request("prompts/get", params)

    async def complete(self, ref: dict[str, Any], name: str, value: str, context: dict[str, str] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"ref": ref, "argument": {"name": name, "value": value}}
        if context is not None:
            params["context"] = {"arguments": context}
        return await self.request("completion/complete", params)


    async def _all_pages(self, method: str, key: str) -> list[dict[str, Any]]:
        """The items of every page, as the Client lists them (one request per page)."""
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = await self.request(method, {"cursor": cursor} if cursor is not None else None)
            items.extend(page.get(key) or [])
            cursor = page.get("nextCursor")
            if not cursor:
                return items


@contextlib.asynccontextmanager
async def connect(server: Server, **options: Any) -> AsyncIterator[TestClient]:
    """An in-memory client for `server`: `async with connect(server) as client: ...`."""
    client = TestClient(server, **options)
    async with server.lifespan_context(), client.client:
        yield client
    await asyncio.sleep(0)
