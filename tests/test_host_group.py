"""ClientGroup against real servers at once (issue 16).

Our docs server (stdio), our HTTP server (uvicorn subprocess, restartable), the official
`mcp` 2.3.0 SDK server over HTTP, the npm `server-everything` (stdio, a 2025-11-25 peer)
and a server that cannot start, all from one `mcp.json`: the group serves the others,
routes tools, prompts and resource reads by name, asks before risky tools, tags
callbacks and events by server, merges list changes, logs, progress and resource
updates, and reconnects the HTTP server after it restarts.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _peers
import pytest

from nimblemcp.host import (
    ClientGroup,
    HostEvent,
    NameScheme,
    ServerConfig,
    ServerUnavailable,
    Supervision,
    ToolCall,
    ToolCallDenied,
    UnknownName,
)

ROOT = Path(__file__).resolve().parents[1]
DOCS_SERVER = ROOT / "examples" / "docs_server" / "server.py"

NOTES_SERVER = '''
import nimblemcp as m

server = m.Server("host-test-notes", "1.0.0")
NOTES = {"first": "hello"}
SAFE = {"readOnlyHint": True, "openWorldHint": False}


@server.tool(annotations=SAFE)
def list_notes() -> list[str]:
    """The note keys."""
    return sorted(NOTES)


@server.tool(annotations={"destructiveHint": True, "openWorldHint": False})
def delete_note(key: str) -> str:
    """Delete a note for good."""
    NOTES.pop(key, None)
    return f"deleted {key}"


@server.tool(annotations=SAFE)
def add_tool(name: str) -> str:
    """Register another tool (the list changes)."""
    server.add_tool(lambda: "hi", name=name)
    return "added"


@server.tool(annotations=SAFE)
async def work(steps: int, ctx: m.Context) -> str:
    """Report progress and log each step."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
        await ctx.info(f"did step {step}")
    return "done"


@server.tool(annotations=SAFE)
async def consult(ctx: m.Context) -> str:
    """Ask the host for its roots and its model's opinion."""
    roots = await ctx.roots()
    reply = await ctx.sample("opinion", ["Say hi"], 20)
    return f"{roots[0]['uri']} / {reply['content']['text']}"


@server.resource("notes://first", mime_type="text/plain")
def first() -> str:
    return NOTES.get("first", "")
'''

OFFICIAL_SERVER = '''
import sys
from mcp.server.mcpserver import MCPServer, Context

server = MCPServer("official-peer", version="2.3.0")

@server.tool(annotations={"readOnlyHint": True, "openWorldHint": False})
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b

@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Register another tool and tell listeners."""
    server.add_tool(lambda: "hi", name=name)
    await ctx.notify_tools_changed()
    return "grown"

@server.resource("docs://brief.md", mime_type="text/markdown")
def brief() -> str:
    return "# Official brief"

@server.prompt()
def review(topic: str) -> str:
    return f"Review {topic}"

if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]), stateless_http=True)
'''

NAME_OK = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class HttpServer:
    """Our notes server under uvicorn in a subprocess, restartable on the same port."""

    def __init__(self, script: Path) -> None:
        self.script = script
        self.port = _peers.free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nimblemcp", "run", str(self.script), "--transport", "http",
             "--port", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _peers.wait_for_port(self.proc, self.port, "the notes server")

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=20)


@pytest.fixture
def notes(tmp_path: Path) -> Iterator[HttpServer]:
    script = tmp_path / "notes_server.py"
    script.write_text(NOTES_SERVER)
    server = HttpServer(script)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def official(tmp_path: Path) -> Iterator[str]:
    script = tmp_path / "official_server.py"
    script.write_text(OFFICIAL_SERVER)
    port = _peers.free_port()
    with _peers.running([str(_peers.mcp_python()), str(script), str(port)], port,
                        "the official SDK server", env={"PYTHONPATH": ""}):
        yield f"http://127.0.0.1:{port}/mcp"


def _docs_entry(docs_dir: Path | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"command": sys.executable,
                             "args": ["-m", "nimblemcp", "run", str(DOCS_SERVER)]}
    if docs_dir is not None:
        entry["env"] = {"DOCS_DIR": str(docs_dir), "DOCS_POLL_SECONDS": "0.1"}
    return entry


async def _next(events: Any, kinds: tuple[str, ...], server: str, **kw: Any) -> HostEvent:
    event: HostEvent = await asyncio.wait_for(events.next(kinds, server=server, **kw), 30)
    return event


async def test_group_serves_five_real_servers_from_one_config(
    tmp_path: Path, notes: HttpServer, official: str,
) -> None:
    docs_dir = tmp_path / "docs"
    shutil.copytree(DOCS_SERVER.parent / "docs", docs_dir)
    command, *args = _peers.server_everything()
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "docs": _docs_entry(docs_dir),
        "notes": {"type": "http", "url": notes.url},
        "official": {"url": official},
        "everything": {"command": command, "args": args},
        "broken": {"command": str(tmp_path / "no-such-server")},
    }}))
    asked: list[ToolCall] = []
    elicited: list[tuple[str, dict[str, Any]]] = []
    logs: list[tuple[str, Any]] = []

    def confirm(call: ToolCall) -> bool:
        asked.append(call)
        return call.tool != "delete_note"  # the user says no to deleting

    def elicit(server: str, params: dict[str, Any]) -> dict[str, Any]:
        elicited.append((server, params))
        return {"action": "accept", "content": {"publish": False}}

    def roots(server: str, params: dict[str, Any]) -> list[dict[str, str]]:
        return [{"uri": f"file:///work/{server}", "name": "work"}]

    def sample(server: str, params: dict[str, Any]) -> str:
        return f"hi from the host to {server}"

    started = time.monotonic()
    group = ClientGroup.from_config(
        config, confirm=confirm, on_elicit=elicit, on_roots=roots, on_sample=sample, on_log=lambda s, p: logs.append((s, p["data"])),
        supervision=Supervision(backoff=0.1, max_backoff=0.5), client_options={"log_level": "info"},
    )
    async with group.events() as events, group:
        states = group.states
        assert {n: s.status for n, s in states.items()} == {
            "docs": "connected", "notes": "connected", "official": "connected",
            "everything": "connected", "broken": "failed",
        }, states
        assert "cannot start" in (states["broken"].error or "")
        assert states["everything"].era == "legacy" and states["docs"].era == "modern"
        assert (states["docs"].server_info or {}).get("name") == "project-docs"
        assert "everything" in str((states["everything"].server_info or {}).get("name"))
        assert time.monotonic() - started < 60

        # one catalog, collision-free names valid for model APIs, routed back by name
        names = [t.name for t in group.catalog.tools]
        assert len(names) == len(set(names)) and all(NAME_OK.match(n) for n in names)
        assert {"docs__read_doc", "notes__delete_note", "official__add", "everything__echo"} <= set(names)
        assert group.catalog.resolve("official__add") == ("official", "add")
        read = await group.call_tool("docs__read_doc", {"name": "brief.md"})
        assert "Harbor" in read["content"][0]["text"]
        echo = await group.call_tool("everything.echo", {"message": "hi"})  # SERVER.TOOL works too
        assert echo["content"][0]["text"] == "Echo: hi"
        total = await group.call_tool("official__add", {"a": 2, "b": 3})
        assert total["content"][0]["text"] == "5"
        with pytest.raises(UnknownName):
            await group.call_tool("broken__anything")
        with pytest.raises(ServerUnavailable):
            group.client("broken")

        # resources: a URI two servers list is ambiguous until a server is named
        with pytest.raises(UnknownName, match="pass server="):
            await group.read_resource("docs://brief.md")
        official_brief = await group.read_resource("docs://brief.md", server="official")
        assert official_brief["contents"][0]["text"] == "# Official brief"
        glossary = await group.read_resource("docs://glossary.md")  # listed by docs only
        assert glossary["contents"][0]["uri"] == "docs://glossary.md"
        assert group.server_for_uri("notes://first") == "notes"
        prompt = await group.get_prompt("official__review", {"topic": "risks"})
        assert "Review risks" in prompt["messages"][0]["content"]["text"]
        simple = await group.get_prompt("everything__simple-prompt")
        assert simple["messages"][0]["role"] == "user"

        # the consent hook: read-only tools run, a destructive one asks and is refused
        assert asked == []
        with pytest.raises(ToolCallDenied, match="user declined"):
            await group.call_tool("notes__delete_note", {"key": "first"})
        assert [(c.server, c.tool, dict(c.arguments)) for c in asked] == [
            ("notes", "delete_note", {"key": "first"})]
        assert (await group.call_tool("notes__list_notes"))["structuredContent"] == {
            "result": ["first"]}  # never reached the server

        # elicitation tagged with the server that asks (unannotated tools ask first)
        handle = (await group.call_tool("docs__start_review", {"document": "brief.md"}))
        review = handle["content"][0]["text"]
        await group.call_tool("docs__add_comment", {"review": review, "comment": "ok"})
        finished = await group.call_tool("docs__finish_review", {"review": review})
        assert "Not published" in finished["content"][0]["text"]
        assert [s for s, _ in elicited] == ["docs"] and "Publish" in elicited[0][1]["message"]
        assert {c.tool for c in asked} >= {"start_review", "add_comment", "finish_review"}

        # roots and sampling callbacks hear which server asks
        consulted = await group.call_tool("notes__consult")
        assert consulted["content"][0]["text"] == "file:///work/notes / hi from the host to notes"

        # progress and logs, tagged by server
        assert (await group.call_tool("notes__work", {"steps": 2}))["content"][0]["text"] == "done"
        progress = await _next(events, ("progress",), "notes")
        assert progress.raw is not None and progress.raw["tool"] == "work"
        assert progress.raw["progress"] == 1 and progress.raw["total"] == 2
        log = await _next(events, ("log",), "notes")
        assert log.raw is not None and log.raw["data"] == "did step 1"
        assert ("notes", "did step 2") in logs

        # list changes from several servers merge into one stream; the catalog follows
        await group.call_tool("notes__add_tool", {"name": "late"})
        changed = await _next(events, ("tools_changed",), "notes")
        assert changed.kind == "tools_changed"
        assert "notes__late" in [t.name for t in group.catalog.tools]
        assert (await group.call_tool("notes__late"))["content"][0]["text"] == "hi"
        await group.call_tool("official__grow", {"name": "extra"}, retry=False)
        await _next(events, ("tools_changed",), "official")
        assert "official__extra" in [t.name for t in group.catalog.tools]

        # a subscribed resource edited on disk: resource_updated from docs
        await group.subscribe("docs://risks.md", server="docs")  # returns once acknowledged
        with open(docs_dir / "risks.md", "a", encoding="utf-8") as fh:
            fh.write("\n- a new risk\n")
        updated = await _next(events, ("resource_updated",), "docs")
        assert updated.uri == "docs://risks.md"
    assert all(s.status == "closed" for n, s in group.states.items() if n != "broken")


async def test_group_reconnects_the_http_server_after_it_restarts(notes: HttpServer) -> None:
    servers = {
        "notes": ServerConfig.http("notes", notes.url),
        "docs": ServerConfig.stdio("docs", [sys.executable, *_docs_entry()["args"]]),
    }
    async with ClientGroup(servers, supervision=Supervision(backoff=0.1, max_backoff=0.3)) as group, \
            group.events() as events:
        assert group.states["notes"].status == "connected"
        assert (await group.call_tool("notes__list_notes"))["structuredContent"] == {"result": ["first"]}
        notes.stop()  # killed: the listen stream drops
        lost = await _next(events, ("status",), "notes",
                           where=lambda e: e.state is not None and e.state.status == "failed")
        assert lost.state is not None and lost.state.error
        assert not [t for t in group.catalog.tools if t.server == "notes"]
        with pytest.raises((UnknownName, ServerUnavailable)):
            await group.call_tool("notes__list_notes")
        # the other server is untouched
        assert (await group.call_tool("docs__list_docs"))["structuredContent"]["result"]
        notes.start()
        await _next(events, ("status",), "notes",
                    where=lambda e: e.state is not None and e.state.status == "connected")
        assert (await group.call_tool("notes__list_notes"))["structuredContent"] == {"result": ["first"]}
        # a graceful shutdown (the listen's closing result) is noticed as well
        notes.stop(signal.SIGINT)
        await _next(events, ("status",), "notes",
                    where=lambda e: e.state is not None and e.state.status == "failed")
        notes.start()
        await _next(events, ("status",), "notes",
                    where=lambda e: e.state is not None and e.state.status == "connected")


async def test_servers_added_and_removed_while_running_and_a_dead_process_restarted(
    tmp_path: Path,
) -> None:
    crash = tmp_path / "crash_server.py"
    crash.write_text(
        "import os\nimport nimblemcp as m\nserver = m.Server('crash')\n"
        "@server.tool\ndef crash() -> str:\n    os._exit(3)\n"
        "@server.tool\ndef read_doc(name: str) -> str:\n    return 'mine: ' + name\n"
    )
    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    group = ClientGroup({"hang": ServerConfig.stdio("hang", hang, timeout=1.0)},
                        scheme=NameScheme(always=False), policy=lambda call: "allow",
                        supervision=Supervision(backoff=0.1, max_backoff=0.2, max_attempts=1))
    async with group, group.events() as events:
        assert group.states["hang"].status == "failed"
        assert group.states["hang"].error == "did not connect within 1 s"
        assert group.states["hang"].retry_in is None  # max_attempts=1
        state = await group.add_server(ServerConfig.stdio("docs", [sys.executable, *_docs_entry()["args"]]))
        assert state.status == "connected"
        assert group.catalog.tool("read_doc") is not None  # unique: kept bare
        await group.add_server(ServerConfig.stdio(
            "crashy", [sys.executable, "-m", "nimblemcp", "run", str(crash)]))
        names = {t.name for t in group.catalog.tools}
        assert {"docs__read_doc", "crashy__read_doc", "crash", "list_docs"} <= names  # only collisions qualified
        assert (await group.call_tool("crashy__read_doc", {"name": "x"}))["content"][0]["text"] == "mine: x"
        with pytest.raises(Exception):  # noqa: B017 - the process dies mid-call
            await group.call_tool("crash")
        await _next(events, ("status",), "crashy",
                    where=lambda e: e.state is not None and e.state.status == "failed")
        await _next(events, ("status",), "crashy",
                    where=lambda e: e.state is not None and e.state.status == "connected")
        assert (await group.call_tool("crashy__read_doc", {"name": "y"}))["content"][0]["text"] == "mine: y"
        await group.remove_server("docs")
        assert "docs" not in group.states
        assert group.catalog.tool("read_doc") is not None  # the survivor's name is bare again
        with pytest.raises(UnknownName):
            await group.call_tool("list_docs")
        with pytest.raises(UnknownName):
            await group.remove_server("docs")


async def test_disabled_and_sse_servers_are_listed_with_their_state(tmp_path: Path) -> None:
    config = {"servers": {
        "off": {"type": "stdio", "command": "nothing", "disabled": True},
        "old": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
    }}
    async with ClientGroup.from_config(config, supervision=Supervision(reconnect=False)) as group:
        assert group.states["off"].status == "disabled"
        assert group.states["old"].status == "failed"
        assert "HTTP+SSE" in (group.states["old"].error or "")
        assert len(group.catalog) == 0


async def test_remote_headers_and_the_auth_factory_reach_a_protected_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import httpx
    from _serving import serving

    import nimblemcp as m
    from nimblemcp.transports.auth.bearer import AccessToken, BearerAuth, StaticTokens

    server = m.Server("protected")

    @server.tool(annotations={"readOnlyHint": True, "openWorldHint": False})
    def secret() -> str:
        return "42"

    app = BearerAuth(server.asgi_app(), verifier=StaticTokens({"t1": AccessToken("alice", audience=("http://127.0.0.1/mcp",))}),
                     resource="http://127.0.0.1/mcp", authorization_servers=["https://auth.example"])

    class Token(httpx.Auth):
        def auth_flow(self, request: httpx.Request) -> Any:
            request.headers["Authorization"] = "Bearer t1"
            yield request

    asked: list[str] = []

    def auth(config: ServerConfig) -> httpx.Auth | None:
        asked.append(config.name)
        return Token() if config.oauth is not None else None

    async with serving(app) as base:
        config = {"mcpServers": {
            "headed": {"type": "http", "url": f"{base}/mcp",
                       "headers": {"Authorization": "Bearer ${TOKEN}"}},
            "oauth": {"type": "http", "url": f"{base}/mcp", "oauth": {"clientId": "host"}},
            "anonymous": {"type": "http", "url": f"{base}/mcp"},
        }}
        monkeypatch.setenv("TOKEN", "t1")
        group = ClientGroup.from_config(config, auth=auth, supervision=Supervision(reconnect=False))
        async with group:
            states = group.states
            assert states["headed"].status == "connected"
            assert states["oauth"].status == "connected"
            assert states["anonymous"].status == "failed" and "401" in (states["anonymous"].error or "")
            assert sorted(asked) == ["anonymous", "headed", "oauth"]
            for name in ("headed", "oauth"):
                result = await group.call_tool(f"{name}__secret")
                assert result["content"][0]["text"] == "42"


async def test_servers_start_in_parallel_not_one_after_another(tmp_path: Path) -> None:
    """Four servers that each need 2 s to start are started together, not one after another:
    every process begins before the first one is ready (each writes when it began and when
    its 2 s were over: a check that holds on a loaded machine, not a stopwatch)."""
    script = tmp_path / "slow_server.py"
    script.write_text(
        "import sys, time\n"
        "from pathlib import Path\n"
        "log = Path(sys.argv[1])\n"
        "log.write_text(f'{time.time()}\\n')\n"
        "time.sleep(2.0)\n"
        "with log.open('a') as f:\n"
        "    f.write(f'{time.time()}\\n')\n"
        "import nimblemcp as m\n"
        "server = m.Server('slow')\n@server.tool\ndef ok() -> str:\n    return 'ok'\n"
        "server.run()\n"
    )
    logs = [tmp_path / f"s{i}.log" for i in range(4)]
    servers = {f"s{i}": ServerConfig.stdio(f"s{i}", [sys.executable, str(script), str(logs[i])])
               for i in range(4)}
    async with ClientGroup(servers, supervision=Supervision(reconnect=False, listen=False)) as group:
        assert all(s.status == "connected" for s in group.states.values()), group.states
        assert [t.name for t in group.catalog.tools] == ["s0__ok", "s1__ok", "s2__ok", "s3__ok"]
    times = [[float(x) for x in log.read_text().split()] for log in logs]
    began, ready = [t[0] for t in times], [t[1] for t in times]
    assert max(began) < min(ready), times  # one after another: each begins after the last is ready


CHANGES_AT_ONCE = '''
import nimblemcp as m
server = m.Server("changes-at-once", "1.0.0")

@server.tool(annotations={"readOnlyHint": True, "openWorldHint": False})
def grow() -> str:
    """Adds a tool: sent as tools/list_changed."""
    server.add_tool(lambda: "new", name="grown")
    return "grown"
'''


async def test_a_change_before_the_listen_is_acknowledged_still_reaches_the_catalog(
        tmp_path: Path) -> None:
    """The group lists a server, then opens its listen: a change made in between sends its
    notice to no one, so the first acknowledgement lists once more, past the Client's
    cache. The call below goes out at once, usually before the listen is acknowledged."""
    script = tmp_path / "grow.py"
    script.write_text(CHANGES_AT_ONCE)
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"s": {
        "command": sys.executable, "args": ["-m", "nimblemcp", "run", str(script)]}}}))
    async with ClientGroup.from_config(str(config)) as group:
        await group.call_tool("s__grow")
        async with asyncio.timeout(30):
            while "s__grown" not in {item.name for item in group.catalog.tools}:
                await asyncio.sleep(0.05)
