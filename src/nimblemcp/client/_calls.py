"""Discovery and the simple calls of `Client`: `discover`, paged lists (PAG-02,
CACHE-09), `read_resource`, `get_prompt`, `complete`.

A mixin kept apart so each module stays small; it only needs `request`, `cache`,
`version(s)` from the Client. Must not import transports or the server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from nimblemcp.errors import InvalidParams, ProtocolError, UnsupportedProtocolVersion

from ._legacy import not_found

if TYPE_CHECKING:
    from ._cache import ResultCache

__all__ = ["CallsMixin"]


class CallsMixin:
    if TYPE_CHECKING:
        cache: ResultCache
        version: str
        versions: list[str]
        discovered: dict[str, Any] | None
        era: str | None
        request: Callable[..., Awaitable[dict[str, Any]]]
        ensure_era: Callable[[], Awaitable[str]]
        legacy_discover_result: Callable[[], dict[str, Any]]

    async def discover(self, *, cache: bool = True) -> dict[str, Any]:
        """`server/discover` (DISC-02): versions, capabilities, instructions. On a legacy
        connection, the same shape built from the `initialize` result (LEGC-07)."""
        fresh = self.era is None
        if await self.ensure_era() == "legacy":
            return self.legacy_discover_result()
        if fresh and self.discovered is not None:
            return self.discovered  # the era probe was this very request
        result = await self.request("server/discover", cache=cache)
        self.discovered = result
        supported = result.get("supportedVersions")
        if isinstance(supported, list) and self.version not in supported:
            common = [v for v in self.versions if v in supported]
            if not common:
                raise UnsupportedProtocolVersion(
                    self.version, [v for v in supported if isinstance(v, str)],
                    f"no protocol version in common: the server supports {supported}, "
                    f"this client {self.versions}",
                )
            self.version = common[0]
        return result

    async def _all_pages(self, method: str, key: str, cache: bool, **kw: Any) -> list[Any]:
        items: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        restarted = False
        while True:
            params = {} if cursor is None else {"cursor": cursor}
            try:
                page = await self.request(method, params, cache=cache, **kw)
            except InvalidParams:
                if cursor is None or restarted:
                    raise
                # CACHE-09: a cursor went stale; drop every cached page, start over once.
                self.cache.evict(method)
                items, cursor, seen, restarted = [], None, set(), True
                continue
            items.extend(page.get(key) or [])
            nxt = page.get("nextCursor")
            if not isinstance(nxt, str) or nxt in seen:  # PAG-02: "" is a real cursor
                return items
            seen.add(nxt)
            cursor = nxt

    async def list_resources(self, *, cache: bool = True) -> list[dict[str, Any]]:
        return await self._all_pages("resources/list", "resources", cache)

    async def list_resource_templates(self, *, cache: bool = True) -> list[dict[str, Any]]:
        return await self._all_pages("resources/templates/list", "resourceTemplates", cache)

    async def list_prompts(self, *, cache: bool = True) -> list[dict[str, Any]]:
        return await self._all_pages("prompts/list", "prompts", cache)

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
