"""Discovery and paging on the client's `Pipeline`: `discover` (DISC-02, LEGC-07) and
`all_pages` (PAG-02, CACHE-09), shared by the Client's list methods and the tools
collaborator. Imports `_pipeline` and `_era`; must not import `_client`, transports or
the server.
"""

from __future__ import annotations

from typing import Any

from nimblemcp.errors import InvalidParams, MessageTooLarge, UnsupportedProtocolVersion

from ._era import LegacyEra
from ._pipeline import Pipeline

__all__ = ["all_pages", "discover"]


async def discover(pipe: Pipeline, legacy: LegacyEra, *, cache: bool = True) -> dict[str, Any]:
    """`server/discover`: versions, capabilities, instructions. On a legacy connection,
    the same shape built from the `initialize` result."""
    fresh = pipe.era is None
    if await pipe.ensure_era() == "legacy":
        return legacy.discover_result()
    if fresh and pipe.discovered is not None:
        return pipe.discovered  # the era probe was this very request
    result = await pipe.run("server/discover", cache=cache)
    pipe.discovered = result
    supported = result.get("supportedVersions")
    if isinstance(supported, list) and pipe.version not in supported:
        common = [v for v in pipe.versions if v in supported]
        if not common:
            raise UnsupportedProtocolVersion(
                pipe.version, [v for v in supported if isinstance(v, str)],
                f"no protocol version in common: the server supports {supported}, "
                f"this client {pipe.versions}",
            )
        pipe.version = common[0]
    return result


async def all_pages(pipe: Pipeline, method: str, key: str, cache: bool, **kw: Any) -> list[Any]:
    """Every item of a paged list; a stale cursor restarts the walk once (CACHE-09).
    More than `max_list_pages` pages or `max_list_items` items (`Limits`) raise
    `MessageTooLarge`: a server cannot page a client out of memory (issue 37)."""
    items: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    restarted = False
    limits = pipe.limits
    while True:
        if len(seen) >= limits.max_list_pages:
            raise MessageTooLarge(limits.max_list_pages, f"{method}: the server's list runs past "
                                  f"{limits.max_list_pages} pages (the client's max_list_pages)")
        params = {} if cursor is None else {"cursor": cursor}
        try:
            page = await pipe.run(method, params, cache=cache, **kw)
        except InvalidParams:
            if cursor is None or restarted:
                raise
            # CACHE-09: a cursor went stale; drop every cached page, start over once.
            pipe.cache.evict(method)
            items, cursor, seen, restarted = [], None, set(), True
            continue
        found = page.get(key) or []
        items.extend(found if isinstance(found, list) else [found])
        if len(items) > limits.max_list_items:
            raise MessageTooLarge(limits.max_list_items, f"{method}: the server's list runs past "
                                  f"{limits.max_list_items} items (the client's max_list_items)")
        nxt = page.get("nextCursor")
        if not isinstance(nxt, str) or nxt in seen:  # PAG-02: "" is a real cursor
            return items
        seen.add(nxt)
        cursor = nxt
