"""Issue 18 (start-up, round four): what a stdio server no longer imports to answer
`server/discover`, and that each of those names still works when first used.

Checks of what is (not) imported run in a fresh interpreter or a real stdio server
process: this test process has imported everything long ago.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import nimblemcp.backends as backends
import nimblemcp.backends.bus as bus
from nimblemcp.server import _options

# Not loaded by a stdio server that answers `server/discover` and a `tools/call`.
NOT_AT_START = ["nimblemcp.backends._select", "nimblemcp.backends._store", "nimblemcp.backends._bus_protocols"]

SERVER = textwrap.dedent('''
    import json, sys
    from nimblemcp import Server

    server = Server("lazy4", "1.0")

    @server.tool
    def loaded() -> str:
        """Which of the watched modules this process has imported."""
        return json.dumps([m for m in json.loads(sys.argv[1]) if m in sys.modules])

    server.run()
''')

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}


def _fresh(code: str) -> list[object]:
    """Run `code` in a fresh interpreter; the JSON it prints last."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    result: list[object] = json.loads(out.strip().splitlines()[-1])
    return result


def test_a_stdio_server_answers_without_the_backend_selection_or_the_protocols() -> None:
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"_meta": META, "name": "loaded", "arguments": {}}},
    ]
    proc = subprocess.run([sys.executable, "-c", SERVER, json.dumps(NOT_AT_START)],
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


def test_bus_protocols_load_on_first_use_as_the_bus_module_names() -> None:
    out = _fresh("""
        import json, pickle, sys
        import nimblemcp.backends.bus as bus
        before = "nimblemcp.backends._bus_protocols" in sys.modules
        from nimblemcp.backends.bus import FlushingBus, NotificationBus, Subscription
        after = "nimblemcp.backends._bus_protocols" in sys.modules
        names = [(c.__module__, c.__qualname__) for c in (FlushingBus, NotificationBus, Subscription)]

        class Flushes:
            async def flush(self, timeout: float = 1.0) -> bool:
                return True

        try:
            isinstance(bus.InProcessBus(), NotificationBus)
            checked = "no error"
        except TypeError:
            checked = "TypeError"  # not runtime_checkable, as before
        print(json.dumps([before, after, names, isinstance(Flushes(), FlushingBus),
                          isinstance(bus.InProcessBus(), FlushingBus), checked,
                          pickle.loads(pickle.dumps(NotificationBus)) is NotificationBus,
                          {"FlushingBus", "NotificationBus", "Subscription"} <= set(dir(bus))]))
    """)
    assert out == [False, True,
                   [["nimblemcp.backends.bus", "FlushingBus"], ["nimblemcp.backends.bus", "NotificationBus"],
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


# -- the package root: what an import made is promoted, not walked at once, nor frozen -------


def test_a_lazy_import_promotes_its_objects_and_freezes_nothing() -> None:
    """Where the interpreter starts with nothing frozen (3.11, 3.13), the import's objects
    are promoted; CPython 3.12.1 starts with objects of its own in the permanent
    generation, which `_load` must not release, so there it leaves the collector as it is."""
    out = _fresh("""
        import gc, json, weakref
        base = gc.get_freeze_count()  # what the interpreter froze before any of our code
        import nimblemcp

        class Node:
            pass

        cycle = Node()
        cycle.self = cycle  # garbage made before the import, collected only by gc
        probe = weakref.ref(cycle)
        del cycle
        young = []
        gc.callbacks.append(lambda phase, info: phase == "start" and young.append(info["generation"]))
        nimblemcp.Server  # noqa: B018  (imports the server: ~20k objects)
        after = [gc.isenabled(), gc.get_freeze_count(), gc.get_count()[0] <= gc.get_threshold()[0]]
        nimblemcp.Server("x", "1")  # the first allocations after the import
        collected_at_once = 0 in young
        gc.collect()
        print(json.dumps([base, after, collected_at_once, probe() is None, gc.get_freeze_count()]))
    """)
    base = out[0]
    if base == 0:
        assert out[1:] == [[True, 0, True], False, True, 0]
    else:  # nothing promoted, nothing frozen or released: the young collection ran as usual
        assert out[1:] == [[True, base, False], True, True, base]


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

    from nimblemcp.transports.stdio_client import StdioTransport, _quote

    for arg in ["", "python3", "/usr/bin/python3", "a b", "it's", "x$y", "é", "-m", "a=b,c:d", "\t", "*", "~/x",
                "@%+=:,./-_", "a\nb", "semi;colon"]:
        assert _quote(arg) == shlex.quote(arg)
    transport = StdioTransport("python 3", ["-c", "print('x')"])
    assert transport.peer == "stdio:" + shlex.join(["python 3", "-c", "print('x')"])


# -- the HTTP client: plain URLs split without urllib.parse (and ipaddress) ------------------


def _parts(split: object) -> list[object]:
    out: list[object] = []
    for name in ("scheme", "netloc", "path", "query", "fragment", "hostname", "port"):
        try:
            out.append(getattr(split, name))
        except ValueError as exc:
            out.append(("ValueError", str(exc)))
    return out


def _either(url: str, split: object) -> object:
    try:
        return split(url)  # type: ignore[operator]
    except ValueError as exc:
        return f"ValueError: {exc}"


def test_split_url_answers_what_urlsplit_answers() -> None:
    import random
    from urllib.parse import urlsplit

    from nimblemcp.transports._url_split import PlainSplit, split_url

    rnd = random.Random(18)
    urls = ["http://127.0.0.1:8000/mcp", "http://localhost/mcp", "https://Example.COM:443/a?b=c#d", "http://h:/x",
            "http://h:99999/", "http://h:0/", "http://h:00080", "http://h?x", "http://h#f?x", "http://:80/",
            "http://h:8a/", "HTTP://h/", "http://[::1]:8000/mcp", "http://u:p@h/", "http://h/ a", "http://é/",
            "http://h\t/", "http://h%41/", "http://h:+80/", "http://h:٣/"]
    for _ in range(4000):  # plain-looking URLs: most take the fast path
        host = "".join(rnd.choice("aZ09.-_") for _ in range(rnd.randint(0, 6)))
        port = rnd.choice(["", ":", ":" + "".join(rnd.choice("0123456789") for _ in range(rnd.randint(0, 7))), ":8a"])
        tail = "".join(rnd.choice("/?#&=a0.%:@-~") for _ in range(rnd.randint(0, 10)))
        urls.append(rnd.choice(["http://", "https://"]) + host + port + tail)
    for _ in range(4000):  # anything
        urls.append(rnd.choice(["http://", "https://", "HTTP://", "ftp://", "", "http://u@", "https://[::1]"])
                    + "".join(rnd.choice("aZ09.-_:/?#@[]%\\ \t\n&=+~!$'()*,;é") for _ in range(rnd.randint(0, 14))))
    fast = 0
    for url in urls:
        mine, theirs = _either(url, split_url), _either(url, urlsplit)
        fast += isinstance(mine, PlainSplit)
        if isinstance(mine, str) or isinstance(theirs, str):
            assert mine == theirs, url
        else:
            assert _parts(mine) == _parts(theirs), url
    assert fast > 500  # the fast path was exercised


def test_an_http_transport_for_a_plain_url_loads_no_url_parser() -> None:
    out = _fresh("""
        import json, sys
        from nimblemcp.transports.http_client import HttpTransport
        from nimblemcp.transports._wire import route as _route
        transport = HttpTransport("http://127.0.0.1:8000/mcp?x=1")
        route = _route("http://Localhost:8000/mcp?x=1")
        plain = [m for m in ("urllib.parse", "ipaddress") if m in sys.modules]
        HttpTransport("http://[::1]:8000/mcp")  # not plain: urlsplit itself
        print(json.dumps([plain, transport.peer, route[0], route[1], "urllib.parse" in sys.modules]))
    """)
    assert out == [[], "http://127.0.0.1:8000", ["http", "localhost", 8000],
                   " /mcp?x=1 HTTP/1.1\r\nHost: Localhost:8000\r\n", True]


def test_nimblemcp_run_imports_the_server_through_the_paused_collector(tmp_path: Path) -> None:
    script = tmp_path / "quiet_server.py"
    script.write_text("from nimblemcp import Server\ns = Server('t', '1')\n")
    code = textwrap.dedent(f"""
        import gc, json, sys
        base = gc.get_freeze_count()  # the interpreter's own (CPython 3.12.1: not 0)
        import nimblemcp
        from nimblemcp.cli import main

        seen = []
        real = nimblemcp._load

        def spy(name):
            seen.append([name, name in sys.modules])
            return real(name)

        nimblemcp._load = spy
        try:
            main(["run", {str(script)!r}])
        finally:
            print(json.dumps([seen, gc.isenabled(), gc.get_freeze_count() - base]), file=sys.stderr)
    """)
    proc = subprocess.run([sys.executable, "-c", code], input="", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen, enabled, frozen = json.loads(proc.stderr.strip().splitlines()[-1])  # stdout is the protocol's
    # `frozen`: what is frozen at the end beyond what the interpreter froze itself
    assert seen[0] == ["nimblemcp.cli.run", False] and enabled is True and frozen == 0
