"""Redis backends for several instances behind a round-robin load balancer.

`RedisStore` is the shared `KeyValueStore` (state handles, the one-time `requestState`
guard); `RedisBus` (in `_redis_bus`) is the shared `NotificationBus`. Both import the
`redis` package lazily, when constructed, so `nimblemcp[redis]` stays an optional extra;
choose them by URL with `nimblemcp.backends.from_url` or `NIMBLEMCP_REDIS_URL`.

Store contracts (see `_store`): keys live under `prefix`; TTLs are Redis `PX`
milliseconds (rounded up, so a key never outlives a shorter wish by less than 1 ms);
`set_if_absent` is one `SET NX PX`, atomic across every instance on the same Redis;
`compare_and_set` is one Lua script (GET, compare, SET PX), atomic the same way.
The redis.asyncio client binds its connections to the event loop that first uses
them: use one store from one loop (the server's). Connection errors and timeouts are
retried (3 times, exponential backoff from 50 ms, capped at 1 s): every operation is
safe to repeat (a repeated `SET NX` whose first try landed answers False: the replay
guard fails closed; so does a repeated compare-and-set, whose caller then re-reads). Pooled connections idle for more than 10 s are checked with a PING
before use, so a Redis restart costs no operation. A failure that remains (Redis down,
an error reply) is raised as `nimblemcp.errors.BackendError` naming the operation and
the kind of failure, never the Redis address or the key (keys can be handle ids), with
the redis exception as its `__cause__`: callers never see the redis package's errors.
Must not import server, transports or client modules.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nimblemcp.backends._redis_bus import RedisBus, client_options, describe
from nimblemcp.errors import BackendError

__all__ = ["RedisBus", "RedisStore"]


# KEYS[1]: the key; ARGV: expected, new value, PX milliseconds (0: delete instead).
_CAS = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if tonumber(ARGV[3]) > 0 then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else redis.call('DEL', KEYS[1]) end
return 1
"""


def _ms(ttl_s: float) -> int:
    return max(1, math.ceil(ttl_s * 1000))


class RedisStore:
    """`KeyValueStore` over Redis. Pass a URL (the store owns and closes its client)
    or a `redis.asyncio.Redis` client (the caller keeps ownership)."""

    def __init__(self, url_or_client: str | Any, *, prefix: str = "nimblemcp:") -> None:
        from nimblemcp._extras import needs_extra

        with needs_extra("redis", "The Redis store"):
            import redis.asyncio
            import redis.exceptions

        self._errors: type[Exception] = redis.exceptions.RedisError
        if isinstance(url_or_client, str):
            self._client: Any = redis.asyncio.Redis.from_url(url_or_client, **client_options())
            self._owned = True
        else:
            self._client = url_or_client
            self._owned = False
        self.prefix = prefix
        self._cas: Any = self._client.register_script(_CAS)

    @contextmanager
    def _translated(self, op: str, key: str) -> Iterator[None]:
        """The boundary: a redis error leaves as BackendError (cause chained)."""
        try:
            yield
        except self._errors as exc:
            raise BackendError(f"redis store: {op} failed: {describe(exc)}") from exc

    async def get(self, key: str) -> bytes | None:
        with self._translated("GET", key):
            value = await self._client.get(self.prefix + key)
        return None if value is None else bytes(value)

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        with self._translated("SET", key):
            if ttl_s <= 0:  # expired at once, as in MemoryStore; Redis rejects PX 0
                await self._client.delete(self.prefix + key)
                return
            await self._client.set(self.prefix + key, value, px=_ms(ttl_s))

    async def set_if_absent(self, key: str, value: bytes, ttl_s: float) -> bool:
        with self._translated("SET NX", key):
            if ttl_s <= 0:
                return not await self._client.exists(self.prefix + key)
            return bool(await self._client.set(self.prefix + key, value, px=_ms(ttl_s), nx=True))

    async def compare_and_set(self, key: str, expected: bytes, value: bytes, ttl_s: float) -> bool:
        with self._translated("compare-and-set", key):
            ms = _ms(ttl_s) if ttl_s > 0 else 0
            return bool(await self._cas(keys=[self.prefix + key], args=[expected, value, ms]))

    async def delete(self, key: str) -> bool:
        with self._translated("DEL", key):
            return bool(await self._client.delete(self.prefix + key))

    async def close(self) -> None:
        if self._owned:
            await self._client.aclose()
