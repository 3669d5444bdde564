"""`nimblemcp._loop.running_loop()`: the running loop without asyncio's per-call
getpid() on 3.11; it must never hand back a loop that is not the running one."""

from __future__ import annotations

import asyncio
import threading

import pytest

from nimblemcp._loop import running_loop


async def _lookup() -> tuple[asyncio.AbstractEventLoop, asyncio.AbstractEventLoop]:
    return running_loop(), asyncio.get_running_loop()


def test_same_as_asyncio_and_follows_a_new_loop_on_the_same_thread() -> None:
    seen: list[asyncio.AbstractEventLoop] = []
    for _ in range(3):  # each asyncio.run() makes a new loop on this thread
        ours, theirs = asyncio.run(_lookup())
        assert ours is theirs
        seen.append(ours)
    assert len({id(loop) for loop in seen}) == 3


def test_no_running_loop_raises_like_asyncio() -> None:
    asyncio.run(_lookup())  # leave a stopped loop behind in the cache
    with pytest.raises(RuntimeError):
        running_loop()


def test_each_thread_sees_its_own_loop() -> None:
    results: dict[str, bool] = {}
    started = threading.Barrier(2)

    async def check(name: str) -> None:
        started.wait()  # both loops run at the same time
        ours, theirs = await _lookup()
        await asyncio.sleep(0.01)
        results[name] = ours is theirs and running_loop() is theirs

    threads = [threading.Thread(target=lambda n=n: asyncio.run(check(n))) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == {"a": True, "b": True}
