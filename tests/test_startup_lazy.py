"""Issue 18 (start-up): what a stdio server does not need to answer `server/discover` is
loaded on first use, and works the same once loaded.

Each check of what is (not) imported runs in a fresh interpreter: this test process has
imported everything long ago.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap

import pytest

from nimblemcp import errors


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
NEVER = ["queue", "argparse", "shutil", "pathlib", "nimblemcp.client"]

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
