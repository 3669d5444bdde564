"""In-process KeyValueStore: the default for one process (no server needed).

Wrong for several instances behind a load balancer: each would have its own memory.
"""

from __future__ import annotations

import time

__all__ = ["MemoryStore"]


class MemoryStore:
    """A dict with expiry; expired entries are swept every `sweep_every` writes."""

    def __init__(self, *, max_entries: int = 100_000, sweep_every: int = 1024) -> None:
        self._data: dict[str, tuple[bytes, float]] = {}
        self._max = max_entries
        self._sweep_every = sweep_every
        self._writes = 0

    def _live(self, key: str, now: float) -> bytes | None:
        item = self._data.get(key)
        if item is None:
            return None
        if item[1] <= now:
            del self._data[key]
            return None
        return item[0]

    def _write(self, key: str, value: bytes, ttl_s: float, now: float) -> None:
        self._writes += 1
        if self._writes % self._sweep_every == 0 or len(self._data) >= self._max:
            self._sweep(now)
        if len(self._data) >= self._max:
            raise MemoryError("MemoryStore is full; raise max_entries or use a shared backend")
        self._data[key] = (value, now + ttl_s)

    def _sweep(self, now: float) -> None:
        for k in [k for k, (_, exp) in self._data.items() if exp <= now]:
            del self._data[k]

    async def get(self, key: str) -> bytes | None:
        return self._live(key, time.monotonic())

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        self._write(key, value, ttl_s, time.monotonic())

    async def set_if_absent(self, key: str, value: bytes, ttl_s: float) -> bool:
        # No await between the check and the write: atomic within one event loop.
        now = time.monotonic()
        if self._live(key, now) is not None:
            return False
        self._write(key, value, ttl_s, now)
        return True

    async def compare_and_set(self, key: str, expected: bytes, value: bytes, ttl_s: float) -> bool:
        now = time.monotonic()  # no await between the check and the write, as above
        if self._live(key, now) != expected:
            return False
        self._write(key, value, ttl_s, now)
        return True

    async def delete(self, key: str) -> bool:
        return self._data.pop(key, None) is not None

    async def close(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
