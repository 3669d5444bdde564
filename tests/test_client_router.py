"""Where a message a server sends on a shared stream goes (stdio and HTTP+SSE clients):
one router for both (issue 32, point 5; SUB-06, BASE-06, CANC-01)."""

from __future__ import annotations

from typing import Any

import pytest

from nimblemcp.errors import TransportError
from nimblemcp.transports.client._router import Inbox, Router
from nimblemcp.types._meta import SUBSCRIPTION_ID


def request(rid: Any, token: Any = None) -> dict[str, Any]:
    meta = {"progressToken": token} if token is not None else {}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"_meta": meta}}


def note(method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def drained(inbox: Inbox) -> list[Any]:
    out = []
    while not inbox.empty():
        out.append(inbox.get_nowait())
    return out


def test_each_message_reaches_its_request_or_the_notification_callback() -> None:
    router, loose, served = Router(), [], []
    first, second = router.open(request(1, token="p1")), router.open(request("1"))
    route = lambda m: router.route(m, serve=served.append, on_notification=loose.append)  # noqa: E731
    route({"jsonrpc": "2.0", "id": "1", "result": {}})  # "1" is not 1
    route(note("notifications/progress", progressToken="p1", progress=1))
    route(note("notifications/message", level="info", data="x", _meta={SUBSCRIPTION_ID: 1}))
    route(note("notifications/cancelled", requestId="1"))
    route(note("notifications/tools/list_changed"))
    route({"jsonrpc": "2.0", "id": 9, "method": "ping"})
    route({"jsonrpc": "2.0", "id": [1], "result": {}})  # not an id: dropped
    route(note("notifications/progress", progressToken={"x": 1}))  # not a token: loose
    route([1, 2])
    assert [m.get("method") for m in drained(first)] == ["notifications/progress", "notifications/message"]
    assert [m.get("method", "response") for m in drained(second)] == ["response", "notifications/cancelled"]
    assert [m["method"] for m in loose] == ["notifications/tools/list_changed", "notifications/progress"]
    assert [m["method"] for m in served] == ["ping"]


def test_a_lone_log_goes_to_the_one_request_in_flight_where_asked() -> None:
    for lone, expected in ((True, 1), (False, 0)):
        router, loose = Router(lone_logs=lone), []
        inbox = router.open(request(1))
        router.route(note("notifications/message", level="info", data="x"), serve=None, on_notification=loose.append)
        assert len(drained(inbox)) == expected and len(loose) == 1 - expected


def test_open_close_and_end() -> None:
    router = Router()
    inbox = router.open(request(1, token="t"))
    with pytest.raises(TransportError):
        router.open(request(1))
    with pytest.raises(TransportError):
        router.open(request({"no": "id"}))
    router.end_all()
    assert drained(inbox) == [None]
    router.close(request(1, token="t"))
    assert router.pending == {} and router.tokens == {}
    router.route({"jsonrpc": "2.0", "id": 1, "result": {}}, serve=None, on_notification=None)  # no one waits


def test_a_server_request_without_a_server_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    Router().route({"jsonrpc": "2.0", "id": 3, "method": "sampling/createMessage"}, serve=None,
                   on_notification=None)
    assert any("BASE-06" in r.getMessage() for r in caplog.records)


def test_a_log_for_a_listen_that_is_over_goes_to_the_one_request_in_flight() -> None:
    """A subscription id no request holds any more routes nothing: the lone-log rule
    still applies, as before the two routers were merged."""
    router, loose = Router(lone_logs=True), []
    inbox = router.open(request(2))
    router.route(note("notifications/message", level="info", data="x", _meta={SUBSCRIPTION_ID: 1}),
                 serve=None, on_notification=loose.append)
    assert len(drained(inbox)) == 1 and loose == []
