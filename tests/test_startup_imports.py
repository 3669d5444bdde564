"""Issue 18 (start-up, first call): each program imports only the side it uses.

Every check runs in a fresh interpreter (`sys.modules` of this test process is full of
everything), and the stdio server check runs a real server process that answers a real
`server/discover` before it reports what it imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import nimblemcp

VERSION = "2026-07-28"
DISCOVER = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {}}}}


def _modules_after(code: str) -> set[str]:
    """Modules imported by `code` in a fresh interpreter (printed as its last line)."""
    full = code + "\nimport sys as _s, json as _j\nprint(_j.dumps(sorted(_s.modules)))\n"
    out = subprocess.run([sys.executable, "-c", full], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def _under(modules: set[str], package: str) -> set[str]:
    return {m for m in modules if m == package or m.startswith(package + ".")}


def test_client_import_does_not_import_the_server() -> None:
    mods = _modules_after("from nimblemcp import Client")
    assert "nimblemcp.client" in mods
    assert _under(mods, "nimblemcp.server") == set()
    assert _under(mods, "nimblemcp.content") == set()
    assert not {"pydantic", "httpx", "uvicorn"} & mods


def test_bare_package_import_imports_nothing_of_ours() -> None:
    mods = _modules_after("import nimblemcp; nimblemcp.__version__")
    assert _under(mods, "nimblemcp") == {"nimblemcp"}


def test_server_import_does_not_import_the_client() -> None:
    mods = _modules_after("from nimblemcp import Server, Context, text\nServer('x')")
    assert "nimblemcp.server" in mods
    assert _under(mods, "nimblemcp.client") == set()
    assert not {"httpx", "pydantic", "uvicorn", "httptools"} & mods


SERVER = textwrap.dedent("""
    import atexit, json, sys

    from nimblemcp import Server

    server = Server("startup-imports", "1.0.0")

    @server.tool
    def echo(text: str) -> str:
        return text

    def report() -> None:
        print(json.dumps(sorted(sys.modules)), file=sys.stderr, flush=True)

    atexit.register(report)
    server.run()
""")


def test_stdio_server_start_imports_no_client_http_or_pydantic() -> None:
    """A stdio server answers `server/discover` without the client, httpx, pydantic or
    any part of the HTTP transport or engine (what it imported is printed at exit)."""
    proc = subprocess.run([sys.executable, "-c", SERVER], input=json.dumps(DISCOVER) + "\n",
                          capture_output=True, text=True, timeout=60, check=True)
    answer = json.loads(proc.stdout.strip().splitlines()[0])
    assert answer["id"] == 1 and VERSION in answer["result"]["supportedVersions"]
    mods = set(json.loads(proc.stderr.strip().splitlines()[-1]))
    assert "nimblemcp.transports.stdio.server" in mods
    assert _under(mods, "nimblemcp.client") == set()
    for heavy in ("httpx", "httpcore", "pydantic", "pydantic_core", "uvicorn", "httptools", "uvloop",
                  "starlette", "anyio", "cryptography", "jsonschema"):
        assert _under(mods, heavy) == set(), heavy
    http = {"nimblemcp.transports.http.app", "nimblemcp.transports.h1.engine", "nimblemcp.transports.h1.engine_server",
            "nimblemcp.transports.http._asgi", "nimblemcp.transports.h1.client", "nimblemcp.transports.client.http",
            "nimblemcp.transports.http._uvicorn", "nimblemcp.transports._sse"}
    assert http & mods == set()


def test_every_public_name_resolves() -> None:
    """Each name of `nimblemcp.__all__` (all imported on first use) resolves, in a fresh
    interpreter and one at a time, and `dir(nimblemcp)` lists them all."""
    code = ("import nimblemcp, json\n"
            "print(json.dumps({n: type(getattr(nimblemcp, n)).__name__ for n in nimblemcp.__all__}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    assert set(json.loads(out.strip().splitlines()[-1])) == set(nimblemcp.__all__)
    for name in nimblemcp.__all__:
        assert getattr(nimblemcp, name) is not None, name
    assert set(nimblemcp.__all__) <= set(dir(nimblemcp))


def test_star_import_gives_every_public_name() -> None:
    out = subprocess.run([sys.executable, "-c", "from nimblemcp import *\nprint(Server.__name__, Client.__name__)"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.split() == ["Server", "Client"]


def test_lazy_names_are_the_defining_objects() -> None:
    from nimblemcp.client import Client
    from nimblemcp.content import text
    from nimblemcp.errors import McpError
    from nimblemcp.server import Server, StateOptions
    from nimblemcp.types import LATEST_VERSION

    assert nimblemcp.Client is Client
    assert nimblemcp.Server is Server
    assert nimblemcp.StateOptions is StateOptions
    assert nimblemcp.text is text
    assert nimblemcp.McpError is McpError
    assert nimblemcp.LATEST_VERSION == LATEST_VERSION


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        nimblemcp.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("nimblemcp.NoSuchThing resolved")


def test_content_types_in_a_postponed_annotation_still_mean_content() -> None:
    """A tool returning content blocks (named in a postponed annotation, as most user
    modules write) is a content tool: no outputSchema, its blocks sent as they are."""
    code = textwrap.dedent("""
        from __future__ import annotations
        import asyncio, json
        from nimblemcp import Server
        from nimblemcp.content import TextContent, text
        from nimblemcp.testing import connect

        server = Server("blocks")

        @server.tool
        def blocks() -> list[TextContent]:
            return [text("a")]

        async def main() -> None:
            async with connect(server) as client:
                tools = await client.list_tools()
                result = await client.call_tool("blocks")
            print(json.dumps(["outputSchema" in tools[0], result["content"]]))

        asyncio.run(main())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [False, [{"type": "text", "text": "a"}]]
