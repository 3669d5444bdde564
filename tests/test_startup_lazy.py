"""What a stdio server does not need to answer `server/discover` (nor a plain
`tools/call`) is loaded on first use, and works the same once loaded: parts of the
server, the backends' selection and protocols, the client's parts; the error tree is
one module.

Each check of what is (not) imported runs in a fresh interpreter: this test process has
imported everything long ago.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import nimblemcp.backends as backends
import nimblemcp.backends.bus as bus
from nimblemcp import errors
from nimblemcp.server import _options


def _fresh(code: str) -> list[object]:
    """Run `code` in a fresh interpreter; the JSON it prints last."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    result: list[object] = json.loads(out.strip().splitlines()[-1])
    return result


# -- errors: one tree, one module -----------------------------------------------------------


def test_a_client_error_is_caught_as_its_branch_and_pickles() -> None:
    out = _fresh("""
        import json, pickle
        import nimblemcp.errors as errors
        from nimblemcp.errors import StreamBroken, TransportError
        try:
            raise StreamBroken("cut")
        except errors.ClientError as exc:
            caught = [type(exc).__module__, type(exc).__qualname__, exc.retryable,
                      isinstance(exc, TransportError), isinstance(exc, errors.McpError)]
        again = pickle.loads(pickle.dumps(StreamBroken("cut")))
        print(json.dumps([caught, type(again) is errors.StreamBroken, again.args]))
    """)
    assert out == [["nimblemcp.errors", "StreamBroken", True, True, True], True, ["cut"]]


def test_every_error_name_resolves_in_a_fresh_interpreter() -> None:
    names = _fresh("""
        import json, nimblemcp.errors as errors
        print(json.dumps({n: getattr(errors, n).__module__ for n in errors.__all__}))
    """)
    assert set(names) == set(errors.__all__)  # type: ignore[arg-type]
    assert set(names.values()) == {"nimblemcp.errors"}  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(n for n in errors.__all__ if isinstance(getattr(errors, n), type)))
def test_error_names_are_public_documented_and_picklable(name: str) -> None:
    cls = getattr(errors, name)
    assert name in errors.__all__ and name in dir(errors)
    assert cls.__module__ == "nimblemcp.errors" and cls.__qualname__ == name
    assert issubclass(cls, errors.McpError)
    assert pickle.loads(pickle.dumps(cls)) is cls
    assert f" {name} " in (errors.__doc__ or "")

def test_unknown_error_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchError"):
        errors.NoSuchError  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(ImportError):
        exec("from nimblemcp.errors import NoSuchError")


def test_picklable_instances_round_trip() -> None:
    for exc in (errors.StreamBroken("x"), errors.RequestTimeout("slow"), errors.BackendError("down"),
                errors.ConfigError("bad"), errors.UnknownName("who")):
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is type(exc) and again.args == exc.args


# -- server modules loaded on first use, over a real stdio process ---------------------------

# Not needed to answer `server/discover` (nor a plain tools/call); each loads when used.
LAZY = ["nimblemcp.server._completion", "nimblemcp.server._subscriptions", "nimblemcp.server._task_events",
        "nimblemcp.server._middleware", "nimblemcp.server._refs", "nimblemcp.server._uri_values",
        "nimblemcp.transports._legacy"]
# Never imported by a stdio server's start, nor later by these features.
NEVER = ["argparse", "shutil", "pathlib", "nimblemcp.client"]

SERVER = textwrap.dedent('''
    import json, sys
    from nimblemcp import Server

    FULL = sys.argv[1] == "full"
    server = Server("lazy", "1.0")

    @server.tool
    def loaded() -> str:
        """Which of the watched modules this process has imported."""
        return json.dumps([m for m in json.loads(sys.argv[2]) if m in sys.modules])

    @server.tool
    def add_tool() -> str:
        server.add_tool(lambda: "new", name="late")
        return "added"

    @server.prompt(complete={"topic": lambda value, ctx: [t for t in ("python", "rust") if t.startswith(value)]})
    def ask(topic: str) -> str:
        return f"tell me about {topic}"

    if FULL:
        import pydantic

        class Point(pydantic.BaseModel):
            x: int
            y: int

        @server.tool
        def norm(p: Point) -> str:
            return str(abs(p.x) + abs(p.y))

        @server.resource("notes://{name}")
        def note(name: str) -> str:
            return f"note {name}"

        @server.add_middleware
        async def tag(ctx, call_next):
            result = await call_next()
            if ctx.method == "tools/call" and ctx.params.get("name") == "norm":
                result["content"][0]["text"] += "!"
            return result

    server.run()
''')

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}


class StdioPeer:
    """One stdio server process, spoken to one request at a time."""

    def __init__(self, variant: str) -> None:
        import queue
        import threading

        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, variant, json.dumps(LAZY + NEVER)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")

    def send(self, message: dict[str, object]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def until(self, rid: object) -> tuple[list[dict[str, object]], dict[str, object]]:
        """Notifications read before the response to `rid`, and that response."""
        seen: list[dict[str, object]] = []
        while True:
            line = self.lines.get(timeout=30)
            assert line, "the server closed stdout"
            message = json.loads(line)
            if message.get("id") == rid and ("result" in message or "error" in message):
                return seen, message
            seen.append(message)

    def request(self, rid: object, method: str, params: dict[str, object] | None = None,
                modern: bool = True) -> dict[str, object]:
        params = dict(params or {})
        if modern:
            params["_meta"] = META
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return self.until(rid)[1]

    def call(self, rid: object, name: str, arguments: dict[str, object] | None = None,
             modern: bool = True) -> str:
        response = self.request(rid, "tools/call", {"name": name, "arguments": arguments or {}}, modern)
        result = response["result"]
        assert isinstance(result, dict), response
        text: str = result["content"][0]["text"]
        return text

    def loaded(self, rid: object) -> list[str]:
        return json.loads(self.call(rid, "loaded"))  # type: ignore[no-any-return]

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            err = self.proc.stderr.read()
            self.proc.stderr.close()
            assert self.proc.stdout is not None
            self.proc.stdout.close()
        assert code == 0, err


def test_discover_loads_none_of_them_and_each_works_when_first_used() -> None:
    peer = StdioPeer("plain")
    try:
        discover = peer.request(1, "server/discover")
        assert "2026-07-28" in discover["result"]["supportedVersions"]  # type: ignore[index]
        assert peer.loaded(2) == []  # nothing watched after discover and a tools/call
        completion = peer.request(3, "completion/complete", {
            "ref": {"type": "ref/prompt", "name": "ask"}, "argument": {"name": "topic", "value": "py"}})
        assert completion["result"]["completion"]["values"] == ["python"]  # type: ignore[index]
        assert peer.loaded(4) == ["nimblemcp.server._completion"]
        peer.send({"jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen",
                   "params": {"_meta": META, "notifications": {"toolsListChanged": True}}})
        ack = json.loads(peer.lines.get(timeout=30))
        assert ack["method"] == "notifications/subscriptions/acknowledged", ack
        peer.send({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                   "params": {"_meta": META, "name": "add_tool", "arguments": {}}})
        seen, added = peer.until(6)
        assert added["result"]["content"][0]["text"] == "added"  # type: ignore[index]
        if not seen:  # the change may also follow the tool's response
            seen.append(json.loads(peer.lines.get(timeout=30)))
        assert seen[0]["method"] == "notifications/tools/list_changed", seen
        assert "nimblemcp.server._subscriptions" in peer.loaded(7)
        init = peer.request(8, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                              "clientInfo": {"name": "old", "version": "1"}}, modern=False)
        assert init["result"]["protocolVersion"] == "2025-11-25"  # type: ignore[index]
        peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert peer.call(9, "late", modern=False) == "new"
        now = peer.loaded(10)
        assert "nimblemcp.transports._legacy" in now and set(now) & set(NEVER) == set()
    finally:
        peer.close()


def test_a_server_using_everything_answers_after_discover() -> None:
    """Middleware, a pydantic-model tool (`_refs`), a resource template (`_uri_values`),
    completion and the legacy leg, each loaded at registration or first use."""
    peer = StdioPeer("full")
    try:
        discover = peer.request(1, "server/discover")
        caps = discover["result"]["capabilities"]  # type: ignore[index]
        assert {"tools", "prompts", "resources", "completions"} <= set(caps)
        before = peer.loaded(2)
        assert {"nimblemcp.server._middleware", "nimblemcp.server._refs",
                "nimblemcp.server._uri_values"} <= set(before)
        assert "nimblemcp.server._completion" not in before
        assert peer.call(3, "norm", {"p": {"x": 3, "y": -4}}) == "7!"
        read = peer.request(4, "resources/read", {"uri": "notes://today"})
        assert read["result"]["contents"][0]["text"] == "note today"  # type: ignore[index]
        completion = peer.request(5, "completion/complete", {
            "ref": {"type": "ref/prompt", "name": "ask"}, "argument": {"name": "topic", "value": "r"}})
        assert completion["result"]["completion"]["values"] == ["rust"]  # type: ignore[index]
        init = peer.request(6, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                              "clientInfo": {"name": "old", "version": "1"}}, modern=False)
        assert "tools" in init["result"]["capabilities"]  # type: ignore[index]
        peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert peer.call(7, "norm", {"p": {"x": 1, "y": 1}}, modern=False) == "2!"
        assert "nimblemcp.client" not in peer.loaded(8)  # (pydantic imports pathlib and shutil)
    finally:
        peer.close()


# -- the backends, the bus and the client's parts -------------------------------------------

# Not loaded by a stdio server that answers `server/discover` and a `tools/call`.
NOT_AT_START = ["nimblemcp.backends._select", "nimblemcp.backends._store"]

LOADED_SERVER = textwrap.dedent('''
    import json, sys
    from nimblemcp import Server

    server = Server("lazy4", "1.0")

    @server.tool
    def loaded() -> str:
        """Which of the watched modules this process has imported."""
        return json.dumps([m for m in json.loads(sys.argv[1]) if m in sys.modules])

    server.run()
''')


def test_a_stdio_server_answers_without_the_backend_selection_or_the_protocols() -> None:
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"_meta": META, "name": "loaded", "arguments": {}}},
    ]
    proc = subprocess.run([sys.executable, "-c", LOADED_SERVER, json.dumps(NOT_AT_START)],
                          input="".join(json.dumps(r) + "\n" for r in requests),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    answers = {m["id"]: m for m in map(json.loads, proc.stdout.splitlines()) if "id" in m}
    assert "2026-07-28" in answers[1]["result"]["supportedVersions"]
    assert json.loads(answers[2]["result"]["content"][0]["text"]) == []


def test_backends_names_load_on_first_use() -> None:
    out = _fresh("""
        import json, sys
        import nimblemcp.backends as backends
        before = [m for m in ("nimblemcp.backends._select", "nimblemcp.backends._store",
                              "nimblemcp.backends.memory") if m in sys.modules]
        from nimblemcp.backends import KeyValueStore, MemoryStore, from_env, from_url
        store, channel = from_url("memory://")
        print(json.dumps([before, isinstance(store, KeyValueStore), type(store) is MemoryStore,
                          from_env() is None, sorted(set(backends.__all__) - set(dir(backends)))]))
    """)
    assert out == [[], True, True, True, []]


def test_backends_unknown_name_is_an_attribute_error() -> None:
    try:
        backends.NoSuchBackend  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchBackend" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_the_bus_protocols_are_the_bus_module_s() -> None:
    out = _fresh("""
        import json, pickle, sys
        import nimblemcp.backends.bus as bus
        from nimblemcp.backends.bus import FlushingBus, NotificationBus, Subscription
        names = [(c.__module__, c.__qualname__) for c in (FlushingBus, NotificationBus, Subscription)]

        class Flushes:
            async def flush(self, timeout: float = 1.0) -> bool:
                return True

        try:
            isinstance(bus.InProcessBus(), NotificationBus)
            checked = "no error"
        except TypeError:
            checked = "TypeError"  # not runtime_checkable, as before
        print(json.dumps([names, isinstance(Flushes(), FlushingBus),
                          isinstance(bus.InProcessBus(), FlushingBus), checked,
                          pickle.loads(pickle.dumps(NotificationBus)) is NotificationBus,
                          {"FlushingBus", "NotificationBus", "Subscription"} <= set(dir(bus))]))
    """)
    assert out == [[["nimblemcp.backends.bus", "FlushingBus"], ["nimblemcp.backends.bus", "NotificationBus"],
                    ["nimblemcp.backends.bus", "Subscription"]],
                   True, False, "TypeError", True, True]


def test_bus_records_and_a_user_bus_built_on_the_protocol() -> None:
    event = bus.Event("updated", "notes://a")
    assert event == ("updated", "notes://a") and bus.Event("tools").uri is None
    assert bus.Match(kinds=("tools",)).uris == () and bus.Match._fields == ("kinds", "uris", "tasks", "keys")
    assert bus.Event.__annotations__ == {"kind": str, "uri": str | None}
    assert pickle.loads(pickle.dumps(event)) == event

    class Recorder(bus.NotificationBus):
        def __init__(self) -> None:
            self.seen: list[bus.Event] = []

        def publish(self, event: bus.Event) -> None:
            self.seen.append(event)

        def subscribe(self, max_queue: int = 256, *, match: bus.Match | None = None) -> bus.Subscription:
            raise NotImplementedError

        def close_all(self) -> None:
            pass

    recorder = Recorder()
    recorder.publish(event)
    assert recorder.seen == [event]
    try:
        bus.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_the_redis_url_variable_is_the_backend_selections() -> None:
    from nimblemcp.backends._select import ENV_URL

    assert _options.ENV_REDIS_URL == ENV_URL


# -- the package root: an import leaves the collector as the process set it -----------------

def test_a_lazy_import_leaves_the_processes_own_freeze_alone() -> None:
    out = _fresh("""
        import gc, json
        import nimblemcp

        keep = [[i] for i in range(5000)]
        gc.freeze()  # as an HTTP server's freeze_gc does
        nimblemcp.Client  # noqa: B018  (unfreeze would leave the count at 0)
        same = gc.get_freeze_count() > 5000
        gc.disable()
        nimblemcp.text  # noqa: B018
        print(json.dumps([same, gc.isenabled()]))
    """)
    assert out == [True, False]


# -- the client's first call -----------------------------------------------------------------


def test_a_first_stdio_call_loads_neither_listen_nor_shlex_and_both_work_later(tmp_path: Path) -> None:
    script = tmp_path / "echo_server.py"  # a plain path: nothing to quote in the peer name
    script.write_text("from nimblemcp import Server\ns = Server('t', '1')\ns.tool(lambda text: text, name='echo')\n"
                      "s.run()\n")
    out = _fresh(f"""
        import asyncio, json, sys
        from nimblemcp import Client

        async def main():
            async with Client([sys.executable, {str(script)!r}]) as client:
                result = await client.call_tool("echo", {{"text": "hi"}})
                first = [m for m in ("nimblemcp.client._listen", "shlex", "nimblemcp.server")
                         if m in sys.modules]
                listener = client.listen(tools=True)
                return [first, result["content"][0]["text"], type(listener).__name__]

        print(json.dumps(asyncio.run(main())))
    """)
    assert out == [[], "hi", "Listener"]


def test_client_package_names_load_on_first_use() -> None:
    out = _fresh("""
        import json, sys
        import nimblemcp.client as client
        before = [m for m in ("nimblemcp.client._client", "nimblemcp.client._listen") if m in sys.modules]
        missing = sorted(n for n in client.__all__ if getattr(client, n, None) is None)
        print(json.dumps([before, missing, client.ListenEvent.__module__, sorted(set(client.__all__) - set(dir(client)))]))
    """)
    assert out == [[], [], "nimblemcp.client._listen", []]


def test_the_stdio_peer_name_quotes_as_shlex_does() -> None:
    import shlex

    from nimblemcp.transports.stdio.client import StdioTransport, _quote

    for arg in ["", "python3", "/usr/bin/python3", "a b", "it's", "x$y", "é", "-m", "a=b,c:d", "\t", "*", "~/x",
                "@%+=:,./-_", "a\nb", "semi;colon"]:
        assert _quote(arg) == shlex.quote(arg)
    transport = StdioTransport("python 3", ["-c", "print('x')"])
    assert transport.peer == "stdio:" + shlex.join(["python 3", "-c", "print('x')"])


# -- the HTTP client: where a URL's requests go ------------------------------------------


def test_an_http_transport_routes_its_url() -> None:
    out = _fresh("""
        import json, sys
        from nimblemcp.transports.client.http import HttpTransport
        from nimblemcp.transports.client._wire import route as _route
        transport = HttpTransport("http://127.0.0.1:8000/mcp?x=1")
        route = _route("http://Localhost:8000/mcp?x=1")
        v6 = _route("http://[::1]:8000/mcp")
        print(json.dumps([transport.peer, route[0], route[1], v6[0]]))
    """)
    assert out == ["http://127.0.0.1:8000", ["http", "localhost", 8000],
                   " /mcp?x=1 HTTP/1.1\r\nHost: Localhost:8000\r\n", ["http", "::1", 8000]]
