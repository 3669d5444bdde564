"""State handles: explicit, opaque ids for state that spans requests (TOOL-14, BASE-08).

A creating tool returns `await ctx.handles.create(data)`; later tools take the handle
as an argument and call `await ctx.handles.get(handle)`. Handles carry 128 random
bits, expire after `ttl_s` (say so in the creating tool's description), are bound to
the authenticated subject when there is one, and an unknown or expired handle is a
`ToolError` the model can read. Values live in any KeyValueStore (memory by default).
A record carries its absolute expiry, so `update()` without a TTL keeps the handle's
remaining lifetime (on any instance, any store); with `ttl_s` it starts a new one.

Bounded: one handle's data is at most `max_handle_size` JSON bytes, and each caller
(authenticated subject; every unauthenticated caller shares one) holds at most
`handles_per_caller` live handles totalling `handle_bytes_per_caller` bytes. The
per-caller index (handle -> size, expiry) lives in the same store under its own key;
it is updated under a per-caller lock, so the quota is exact within one process and
approximate across instances sharing a store. Exceeding a limit raises
`HandleLimitExceeded`, a `ToolError`. Imports only backends, errors and options.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson

from nimblemcp.errors import HandleLimitExceeded, ToolError

if TYPE_CHECKING:
    from nimblemcp.backends._store import KeyValueStore
    from nimblemcp.server._options import StateOptions


class HandleStore:
    """Create, read, update and drop handle-addressed state."""

    def __init__(
        self, store: KeyValueStore, options: StateOptions | None = None, *,
        ttl_s: float | None = None, prefix: str = "h:",
    ) -> None:
        from nimblemcp.server._options import StateOptions

        opts = options or StateOptions()
        self.store = store
        self.ttl_s = ttl_s if ttl_s is not None else opts.handle_ttl
        self.prefix = prefix
        self.max_size = opts.max_handle_size
        self.max_count = opts.handles_per_caller
        self.max_bytes = opts.handle_bytes_per_caller
        self._locks: dict[str | None, tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def locked(self, subject: str | None) -> AsyncIterator[None]:
        """Serialize index updates of one caller; the lock lives while it has users."""
        entry = self._locks.get(subject)
        if entry is None:
            entry = self._locks[subject] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[subject]

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

    def _index_key(self) -> str:
        sub = self._subject
        return self._owner.prefix + ("#anon" if sub is None else "#s:" + sub)

    def _record(self, data: Any, expires: float) -> bytes:
        record = orjson.dumps({"sub": self._subject, "data": data, "exp": expires})
        if len(record) > self._owner.max_size:
            raise HandleLimitExceeded(
                f"This state is {len(record)} bytes; a handle holds at most {self._owner.max_size}."
            )
        return record

    async def _account(self, handle: str, size: int, ttl: float, *, new: bool) -> None:
        """Record `handle` at `size` bytes in this caller's index, refusing what breaks
        the caller's quota. Expired entries are forgotten on the way."""
        owner = self._owner
        async with owner.locked(self._subject):
            key = self._index_key()
            raw = await owner.store.get(key)
            now = time.time()
            index: dict[str, list[float]] = {}
            if raw is not None:
                index = {h: e for h, e in orjson.loads(raw).items() if e[1] > now}
            if new and handle not in index and len(index) >= owner.max_count:
                raise HandleLimitExceeded(
                    f"Too many open handles ({len(index)}, the limit is {owner.max_count}); "
                    "drop handles you no longer need, or wait for them to expire."
                )
            used = sum(int(e[0]) for h, e in index.items() if h != handle)
            if used + size > owner.max_bytes:
                raise HandleLimitExceeded(
                    f"Your handles would hold {used + size} bytes; the limit is {owner.max_bytes}. "
                    "Drop handles you no longer need, or store less."
                )
            index[handle] = [size, now + ttl]
            longest = max(e[1] for e in index.values()) - now
            await owner.store.set(key, orjson.dumps(index), max(longest, 1.0))

    async def _forget(self, handle: str) -> None:
        owner = self._owner
        async with owner.locked(self._subject):
            key = self._index_key()
            raw = await owner.store.get(key)
            if raw is None:
                return
            index = orjson.loads(raw)
            if index.pop(handle, None) is None:
                return
            if index:
                longest = max(e[1] for e in index.values()) - time.time()
                await owner.store.set(key, orjson.dumps(index), max(longest, 1.0))
            else:
                await owner.store.delete(key)

    async def create(self, data: Any, *, ttl_s: float | None = None) -> str:
        """A new handle for `data`; `HandleLimitExceeded` when a limit would break."""
        import secrets  # lazily: hashlib/hmac stay off the start-up path

        ttl = ttl_s or self._owner.ttl_s
        record = self._record(data, time.time() + ttl)
        handle = secrets.token_urlsafe(16)
        await self._account(handle, len(record), ttl, new=True)
        await self._owner.store.set(self._key(handle), record, ttl)
        return handle

    async def get(self, handle: str) -> Any:
        """The data; ToolError when the handle is unknown, expired or someone else's."""
        return (await self._read(handle))["data"]

    async def _read(self, handle: str) -> dict[str, Any]:
        if not isinstance(handle, str) or not 8 <= len(handle) <= 128 or handle[0] == "#":
            raise ToolError("Unknown or expired handle.")
        raw = await self._owner.store.get(self._key(handle))
        if raw is None:
            raise ToolError(f"Unknown or expired handle {handle!r}; create a new one.")
        record = orjson.loads(raw)
        if record.get("sub") != self._subject:
            raise ToolError(f"Unknown or expired handle {handle!r}; create a new one.")
        return record  # type: ignore[no-any-return]

    async def update(self, handle: str, data: Any, *, ttl_s: float | None = None) -> None:
        """Replace the data; the same limits as `create` apply to the new size. The
        handle keeps its remaining lifetime, unless `ttl_s` gives it a new one."""
        current = await self._read(handle)  # existence and ownership
        now = time.time()
        if ttl_s:
            ttl = ttl_s
        elif isinstance(current.get("exp"), (int, float)):
            ttl = current["exp"] - now
            if ttl <= 0:
                raise ToolError(f"Unknown or expired handle {handle!r}; create a new one.")
        else:  # a record written before expiries were kept
            ttl = self._owner.ttl_s
        record = self._record(data, now + ttl)
        await self._account(handle, len(record), ttl, new=False)
        await self._owner.store.set(self._key(handle), record, ttl)

    async def drop(self, handle: str) -> None:
        await self.get(handle)
        await self._owner.store.delete(self._key(handle))
        await self._forget(handle)
