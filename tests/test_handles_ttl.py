"""State-handle lifetimes (issue 13, TOOL-14): `ctx.handles.update()` without a TTL
keeps the handle's remaining lifetime instead of resetting it to the default; with
`ttl_s` it starts a new one. On the in-memory store and on a real Redis; the update may
happen on another instance (another HandleStore over the same Redis)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from _redis import RedisServer

from nimblemcp.backends._store import KeyValueStore
from nimblemcp.backends.memory import MemoryStore
from nimblemcp.backends.redis import RedisStore
from nimblemcp.errors import ToolError
from nimblemcp.server._handles import HandleStore
from nimblemcp.server._options import StateOptions

DEFAULT = 60.0  # the store's default handle TTL: far longer than the test's waits
SHORT = 1.2


@pytest.fixture(params=["memory", "redis"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[KeyValueStore, KeyValueStore]]:
    """Two views of one store: the same object in memory, two clients of one Redis."""
    if request.param == "memory":
        store = MemoryStore()
        yield store, store
        return
    redis = RedisServer()
    redis.start()
    a, b = RedisStore(redis.url), RedisStore(redis.url)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()
        redis.close()


def handles(store: KeyValueStore) -> HandleStore:
    return HandleStore(store, StateOptions(handle_ttl=DEFAULT))


async def test_update_without_ttl_keeps_the_remaining_lifetime(
    stores: tuple[KeyValueStore, KeyValueStore],
) -> None:
    first, second = (handles(s).bind("alice") for s in stores)
    handle = await first.create({"n": 1}, ttl_s=SHORT)
    await asyncio.sleep(0.4)
    await second.update(handle, {"n": 2})  # another instance: still the creation's expiry
    assert await first.get(handle) == {"n": 2}
    await asyncio.sleep(SHORT)  # past the original expiry (a reset would live 60 s)
    with pytest.raises(ToolError, match="expired"):
        await first.get(handle)
    with pytest.raises(ToolError, match="expired"):
        await second.update(handle, {"n": 3})


async def test_update_with_ttl_starts_a_new_lifetime(stores: tuple[KeyValueStore, KeyValueStore]) -> None:
    first, second = (handles(s).bind(None) for s in stores)
    handle = await first.create({"n": 1}, ttl_s=SHORT)
    await second.update(handle, {"n": 2}, ttl_s=SHORT * 3)
    await asyncio.sleep(SHORT + 0.3)
    assert await first.get(handle) == {"n": 2}  # the new lifetime, not the old one
    await first.update(handle, {"n": 3})  # and updates without a TTL keep that one
    assert await second.get(handle) == {"n": 3}


async def test_default_lifetime_is_kept_too(stores: tuple[KeyValueStore, KeyValueStore]) -> None:
    store = HandleStore(stores[0], StateOptions(handle_ttl=SHORT)).bind("bob")
    handle = await store.create([1])
    await asyncio.sleep(0.5)
    await store.update(handle, [1, 2])
    await asyncio.sleep(SHORT - 0.2)
    with pytest.raises(ToolError):
        await store.get(handle)


async def test_a_record_without_an_expiry_falls_back_to_the_default(
    stores: tuple[KeyValueStore, KeyValueStore],
) -> None:
    """A record written by an older release (no expiry in it) is updated as before."""
    store = stores[0]
    old: dict[str, Any] = {"sub": None, "data": "old"}
    await store.set("h:" + "a" * 22, orjson.dumps(old), SHORT)
    bound = HandleStore(store, StateOptions(handle_ttl=DEFAULT)).bind(None)
    await bound.update("a" * 22, "new")
    await asyncio.sleep(SHORT + 0.3)
    assert await bound.get("a" * 22) == "new"
