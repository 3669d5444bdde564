"""The key-value-with-TTL Protocol behind state handles and the replay guard.

Concurrency contract: every method is safe to call from concurrent tasks of one
event loop; `set_if_absent` is atomic (exactly one of several racing callers wins),
which is what makes single-use `requestState` safe across instances;
`compare_and_set` is atomic the same way (of several writers that read the same value,
exactly one replaces it), which is what lets task records change safely when several
instances touch them at once.
Cleanup contract: expired keys behave as absent at once; a backend may free their
memory lazily. `close()` releases connections; a closed store is not reused.
Values are bytes so that every backend stores the same thing.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class KeyValueStore(Protocol):
    """The little shared state a stateless server keeps (handles, the replay guard, task
    records): bytes under a key, each with a lifetime. `MemoryStore` in one process,
    `RedisStore` across instances; `backends.from_url(url)` picks one."""

    async def get(self, key: str) -> bytes | None:
        """The value, or None when absent or expired."""
        ...

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        """Store `value` for `ttl_s` seconds, replacing any previous value."""
        ...

    async def set_if_absent(self, key: str, value: bytes, ttl_s: float) -> bool:
        """Atomically store `value` only if `key` is absent; True if this call stored it."""
        ...

    async def compare_and_set(self, key: str, expected: bytes, value: bytes, ttl_s: float) -> bool:
        """Atomically replace the value of `key` with `value` (for `ttl_s` seconds) only
        if it is present and equal to `expected` byte for byte; True if this call wrote.
        A False answer means "re-read and decide again"."""
        ...

    async def delete(self, key: str) -> bool:
        """Remove `key`; True if it was present."""
        ...

    async def close(self) -> None: ...
