"""The listen hand-over, message by message (issue 34, point 1; SUB-02, SUB-09): what
`Server.move_listeners` (SIGTERM under `run_http`) does to each listen, in process on
the in-memory bus through `Server.handle`. The same through real processes, nginx and
Redis is tests/test_deploy_listen_handover.py."""

from __future__ import annotations

import asyncio
from typing import Any

import nimblemcp as m
from nimblemcp.backends.bus import Event, InProcessBus
from nimblemcp.types._meta import HANDOVER, LISTEN_AGAIN, MOVING, SUBSCRIPTION_ID

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
HANG_GUARD = 10.0


class Listen:
    """One `subscriptions/listen` through `Server.handle`, its messages as they come."""

    def __init__(self, server: m.Server, rid: Any, offer: bool | str | None) -> None:
        meta = dict(META) if offer is None else {**META, HANDOVER: offer}
        message = {"jsonrpc": "2.0", "id": rid, "method": "subscriptions/listen",
                   "params": {"_meta": meta, "notifications": {"resourceSubscriptions": ["test://doc"]}}}
        self.notes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task = asyncio.ensure_future(server.handle(message, self.notes.put_nowait))

    async def next(self) -> dict[str, Any]:
        return await asyncio.wait_for(self.notes.get(), HANG_GUARD)

    async def ack(self) -> dict[str, Any]:
        note = await self.next()
        assert note["method"] == "notifications/subscriptions/acknowledged", note
        return note

    async def uris(self, count: int) -> list[str]:
        return [(await self.next())["params"]["uri"] for _ in range(count)]

    async def result(self) -> dict[str, Any]:
        response: dict[str, Any] = await asyncio.wait_for(self.task, HANG_GUARD)
        assert response["result"]["resultType"] == "complete", response
        meta: dict[str, Any] = dict(response["result"]["_meta"])
        meta.pop("io.modelcontextprotocol/serverInfo", None)  # on every result
        return meta


def make(**options: Any) -> m.Server:
    server = m.Server("handover", **options)

    @server.resource("test://doc")
    def doc() -> str:
        return "doc"

    return server


async def test_the_token_comes_only_to_a_client_that_offers_a_hand_over() -> None:
    server = make()
    plain, offered = Listen(server, 1, None), Listen(server, 2, True)
    assert (await plain.ack())["params"]["_meta"] == {SUBSCRIPTION_ID: 1}
    token = (await offered.ack())["params"]["_meta"][HANDOVER]
    assert isinstance(token, str) and len(token) >= 16
    server.close_listeners()
    assert await plain.result() == {SUBSCRIPTION_ID: 1}  # SIGINT: no hint
    assert await offered.result() == {SUBSCRIPTION_ID: 2}


async def test_a_move_ends_plain_listens_with_the_hint_and_keeps_offered_ones_until_taken_over() -> None:
    server = make()
    plain, old = Listen(server, "p", None), Listen(server, "o", True)
    await plain.ack()
    token = (await old.ack())["params"]["_meta"][HANDOVER]
    assert server.move_listeners(5.0)
    assert await plain.result() == {SUBSCRIPTION_ID: "p", LISTEN_AGAIN: True}
    assert await old.next() == {"jsonrpc": "2.0", "method": MOVING, "params": {"_meta": {SUBSCRIPTION_ID: "o"}}}
    server.close_listeners()  # any other stop meanwhile leaves the hand-over alone
    server.notify_resource_updated("test://doc/1")
    assert await old.uris(1) == ["test://doc/1"]  # still delivering
    server.moving = False  # the successor lands on another instance (here: this one, not moving)
    new = Listen(server, "n", token)
    await new.ack()
    assert await old.result() == {SUBSCRIPTION_ID: "o", HANDOVER: token}
    server.notify_resource_updated("test://doc/2")
    assert await new.uris(1) == ["test://doc/2"]
    assert old.notes.empty()
    server.close_listeners()
    await new.result()


class HeldMarks(InProcessBus):
    """Holds back the marks of successor listens until `release()`, as the trip through
    Redis delays them."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[Event] = []

    def publish(self, event: Event) -> None:
        if event.kind == "listen-handed":
            self.held.append(event)
        else:
            super().publish(event)

    def release(self) -> None:
        for event in self.held:
            super().publish(event)
        self.held.clear()


async def test_a_successor_skips_what_comes_before_its_mark_returns() -> None:
    """Its predecessor delivers those (on Redis, every instance sees one order); a mark
    that never returns is waited for `handover` seconds at most."""
    bus = HeldMarks()
    server = make(backends=m.Backends(bus=bus), listen=m.ListenOptions(handover=0.5))
    new = Listen(server, "n", "the-old-listens-token")
    await new.ack()
    assert bus.held == [Event("listen-handed", "the-old-listens-token")]
    server.notify_resource_updated("test://doc/before-its-mark")
    bus.release()
    server.notify_resource_updated("test://doc/after")
    assert await new.uris(1) == ["test://doc/after"]
    lost = Listen(server, "l", "another-token")  # its mark is lost
    await lost.ack()
    server.notify_resource_updated("test://doc/while-waiting")
    await asyncio.sleep(0.6)
    server.notify_resource_updated("test://doc/late")
    assert await lost.uris(1) == ["test://doc/late"]
    server.close_listeners()
    await new.result()
    await lost.result()


async def test_a_listen_not_moved_in_the_window_ends_and_a_late_one_ends_at_once() -> None:
    server = make(listen=m.ListenOptions(handover=0.2))
    old = Listen(server, 1, True)
    await old.ack()
    assert server.move_listeners(server.config.listen.handover)
    assert (await old.next())["method"] == MOVING
    assert await old.result() == {SUBSCRIPTION_ID: 1, LISTEN_AGAIN: True}  # nobody took over
    late = Listen(server, 2, True)  # reached this instance while it moves its listens
    await late.ack()
    assert await late.result() == {SUBSCRIPTION_ID: 2, LISTEN_AGAIN: True}
    assert len(server.bus) == 0
