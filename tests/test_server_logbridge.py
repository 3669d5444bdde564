"""Python logging inside handlers forwarded as notifications/message (LOG-02/03/06)."""

from __future__ import annotations

import logging

from nimblemcp import Server
from nimblemcp.testing import connect

LOG_LEVEL = "io.modelcontextprotocol/logLevel"


def make_server() -> Server:
    server = Server("logs", forward_logs="bridge_app")
    log = logging.getLogger("bridge_app.tools")

    @server.tool
    async def work() -> str:
        log.debug("fine detail")
        log.info("started %s", "work")
        logging.getLogger("nimblemcp.server").warning("internal detail")
        log.error("went wrong")
        return "done"

    @server.tool
    def sync_work() -> str:  # runs in a worker thread
        log.warning("from a thread")
        return "done"

    return server


async def test_records_follow_the_requests_log_level() -> None:
    async with connect(make_server()) as client:
        ex = await client.exchange("tools/call", {"name": "work"}, meta=client.meta(**{LOG_LEVEL: "info"}))
        assert ex.result["content"][0]["text"] == "done"
        notes = [n["params"] for n in ex.notifications]
        assert [(n["level"], n["data"], n["logger"]) for n in notes] == [
            ("info", "started work", "bridge_app.tools"),
            ("error", "went wrong", "bridge_app.tools"),
        ]


async def test_nothing_is_sent_without_a_log_level() -> None:
    async with connect(make_server()) as client:
        ex = await client.exchange("tools/call", {"name": "work"})
        assert ex.notifications == []


async def test_records_from_worker_threads_are_forwarded() -> None:
    async with connect(make_server()) as client:
        ex = await client.exchange("tools/call", {"name": "sync_work"}, meta=client.meta(**{LOG_LEVEL: "debug"}))
        assert [n["params"]["data"] for n in ex.notifications] == ["from a thread"]
