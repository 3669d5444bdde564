"""Test helpers we use ourselves: an in-memory client that speaks the real protocol.

`connect(server)` gives a client whose every message goes through the JSON codec
both ways, so tests see exactly the bytes a real peer would.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from nimblemcp.errors import error_from_wire
from nimblemcp.jsonrpc import decode, encode
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
    """A minimal client for tests: builds `_meta`, sends through the codec, decodes."""

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
        self._ids = itertools.count(1)

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
        raw = data if isinstance(data, bytes) else encode(data)
        notes: list[dict[str, Any]] = []

        def emit(message: dict[str, Any]) -> None:
            notes.append(decode(encode(message)))

        try:
            message = decode(raw)
        except Exception as exc:  # the server's parse error, as a transport reports it
            from nimblemcp.errors import ParseError
            from nimblemcp.jsonrpc import error_response

            assert isinstance(exc, ParseError)
            return Exchange(notes, decode(encode(error_response(None, exc))))
        response = await self.server.handle(message, emit)
        return Exchange(notes, None if response is None else decode(encode(response)))

    async def exchange(
        self, method: str, params: dict[str, Any] | None = None, *, meta: dict[str, Any] | None = None
    ) -> Exchange:
        body = dict(params or {})
        body["_meta"] = meta if meta is not None else self.meta()
        return await self.send_raw(
            {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": body}
        )

    async def request(self, method: str, params: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
        return (await self.exchange(method, params, meta=self.meta(**meta) if meta else None)).result

    # -- conveniences ---------------------------------------------------------------------

    async def discover(self) -> dict[str, Any]:
        return await self.request("server/discover")

    async def list_tools(self, cursor: str | None = None) -> dict[str, Any]:
        return await self.request("tools/list", {"cursor": cursor} if cursor is not None else None)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        return await self.request("tools/call", params, **meta)

    async def list_resources(self, cursor: str | None = None) -> dict[str, Any]:
        return await self.request("resources/list", {"cursor": cursor} if cursor is not None else None)

    async def list_resource_templates(self) -> dict[str, Any]:
        return await self.request("resources/templates/list")

    async def read_resource(self, uri: str) -> dict[str, Any]:
        return await self.request("resources/read", {"uri": uri})

    async def list_prompts(self, cursor: str | None = None) -> dict[str, Any]:
        return await self.request("prompts/list", {"cursor": cursor} if cursor is not None else None)

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


@contextlib.asynccontextmanager
async def connect(server: Server, **options: Any) -> AsyncIterator[TestClient]:
    """An in-memory client for `server`: `async with connect(server) as client: ...`."""
    client = TestClient(server, **options)
    yield client
    await asyncio.sleep(0)
