"""State handles: explicit, opaque ids for state that spans requests (TOOL-14, BASE-08).

A creating tool returns `await ctx.handles.create(data)`; later tools take the handle
as an argument and call `await ctx.handles.get(handle)`. Handles carry 128 random
bits, expire after `ttl_s` (say so in the creating tool's description), are bound to
the authenticated subject when there is one, and an unknown or expired handle is a
`ToolError` the model can read. Values live in any KeyValueStore (memory by default).
"""

from __future__ import annotations

from typing import Any

import orjson

from nimblemcp.backends._store import KeyValueStore
from nimblemcp.errors import ToolError


class HandleStore:
    """Create, read, update and drop handle-addressed state."""

    def __init__(self, store: KeyValueStore, *, ttl_s: float = 3600.0, prefix: str = "h:") -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.prefix = prefix

    def bind(self, subject: str | None) -> BoundHandles:
        return BoundHandles(self, subject)


class BoundHandles:
    """The handle store as seen by one request's subject."""

    __slots__ = ("_owner", "_subject")

    def __init__(self, owner: HandleStore, subject: str | None) -> None:
        self._owner = owner
        self._subject = subject

    def _key(self, handle: str) -> str:
        return self._owner.prefix + handle

    async def create(self, data: Any, *, ttl_s: float | None = None) -> str:
        import secrets  # lazily: hashlib/hmac stay off the start-up path

        handle = secrets.token_urlsafe(16)
        record = orjson.dumps({"sub": self._subject, "data": data})
        await self._owner.store.set(self._key(handle), record, ttl_s or self._owner.ttl_s)
        return handle

    async def get(self, handle: str) -> Any:
        """The data; ToolError when the handle is unknown, expired or someone else's."""
        if not isinstance(handle, str) or not 8 <= len(handle) <= 128:
            raise ToolError("Unknown or expired handle.")
        raw = await self._owner.store.get(self._key(handle))
        if raw is None:
            raise ToolError(f"Unknown or expired handle {handle!r}; create a new one.")
        record = orjson.loads(raw)
        if record.get("sub") != self._subject:
            raise ToolError(f"Unknown or expired handle {handle!r}; create a new one.")
        return record["data"]

    async def update(self, handle: str, data: Any, *, ttl_s: float | None = None) -> None:
        await self.get(handle)  # existence and ownership
        record = orjson.dumps({"sub": self._subject, "data": data})
        await self._owner.store.set(self._key(handle), record, ttl_s or self._owner.ttl_s)

    async def drop(self, handle: str) -> None:
        await self.get(handle)
        await self._owner.store.delete(self._key(handle))
