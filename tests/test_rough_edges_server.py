"""Issue 33, errors and the CLI: what a server author trips over, seen from outside.

- `@server.tool` (or `@server.prompt`, `@server.resource`) on a class raises at
  registration with a message saying what to do; `nimblemcp run` on such a file stops
  with that message, instead of serving a tool that answers "<Thing object at 0x...>".
- A bare `-> list` (or `list[Any]`) of content blocks reaches the client as those
  blocks (TOOL-06 keeps its `structuredContent`), as the official SDK and FastMCP send
  them; a list of data stays JSON text.
- `Server.tool`/`add_tool`/`prompt` spell their options out, typed, so an editor can
  complete them.
- `testing.connect(...).list_tools()` (and the other lists) answer what
  `Client.list_tools()` answers: the list of items.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import nimblemcp as m
from nimblemcp import Client
from nimblemcp.testing import connect
from nimblemcp.transports.client.memory import MemoryTransport


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nimblemcp", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env=dict(os.environ))


# -- a class given to a registration decorator ------------------------------------------


@pytest.mark.parametrize("decorate", [
    lambda s: s.tool, lambda s: s.tool(name="thing"), lambda s: s.prompt,
    lambda s: s.resource("data://thing"),
])
def test_a_class_is_refused_at_registration(decorate: Any) -> None:
    server = m.Server("classes")

    class Thing:
        def __call__(self) -> str:
            return "never reached"

    with pytest.raises(TypeError, match=r"not the class .*Thing: calling it would make an instance"):
        decorate(server)(Thing)
    with pytest.raises(TypeError, match="not the class"):
        server.add_tool(Thing)
    assert not server.tools and not server.prompts and not server.resources


def test_a_bound_method_is_still_a_tool() -> None:
    server = m.Server("methods")

    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def bump(self, by: int) -> int:
            """Add to the counter."""
            self.n += by
            return self.n

    entry = server.add_tool(Counter().bump)
    assert entry.name == "bump" and "by" in entry.definition["inputSchema"]["properties"]


def test_nimblemcp_run_stops_on_a_decorated_class(tmp_path: Path) -> None:
    (tmp_path / "things.py").write_text(
        "import nimblemcp as m\nserver = m.Server('things')\n\n"
        "@server.tool\nclass Thing:\n    '''A thing.'''\n")
    out = subprocess.run([sys.executable, "-m", "nimblemcp", "run", "things.py"], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert out.returncode == 1
    assert "@server.tool applies to a function (def or async def), not the class Thing" in out.stderr


# -- a list of content blocks -------------------------------------------------------------

BLOCKS_SERVER = '''
from typing import Any
import nimblemcp as m

server = m.Server("blocks")

@server.tool
def picture() -> list:
    """A caption and a picture."""
    return [{"type": "text", "text": "a red dot"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]

@server.tool
def captions() -> list[Any]:
    """Two captions."""
    return [m.text("first caption"), m.text("second caption")]

@server.tool
def numbers() -> list:
    """Data, not content."""
    return [1, 2, 3]
'''


async def test_a_bare_list_of_blocks_is_content(tmp_path: Path) -> None:
    (tmp_path / "blocks.py").write_text(BLOCKS_SERVER)
    command = [sys.executable, "-m", "nimblemcp", "run", str(tmp_path / "blocks.py")]
    async with Client(command) as client:
        picture = await client.call_tool("picture", {})
        captions = await client.call_tool("captions", {})
        numbers = await client.call_tool("numbers", {})
    assert picture["content"] == [{"type": "text", "text": "a red dot"},
                                  {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]
    assert picture["structuredContent"] == {"result": picture["content"]}  # its outputSchema holds
    assert [b["text"] for b in captions["content"]] == ["first caption", "second caption"]
    # A list of data is still structured output with its JSON text (TOOL-06).
    assert numbers["structuredContent"] == {"result": [1, 2, 3]}
    assert [json.loads(b["text"]) for b in numbers["content"]] == [{"result": [1, 2, 3]}]


def test_the_cli_prints_the_blocks_not_their_json(tmp_path: Path) -> None:
    (tmp_path / "blocks.py").write_text(BLOCKS_SERVER)
    stdio = ["--", sys.executable, "-m", "nimblemcp", "run", str(tmp_path / "blocks.py")]
    captions = cli("call", "captions", *stdio)
    assert captions.returncode == 0, captions.stderr
    assert captions.stdout.splitlines() == ["first caption", "second caption"]
    picture = cli("call", "picture", *stdio)
    assert picture.stdout.splitlines()[0] == "a red dot" and "[image image/png" in picture.stdout
    numbers = cli("call", "numbers", *stdio)
    assert json.loads(numbers.stdout) == {"result": [1, 2, 3]}


# -- options an editor can complete -------------------------------------------------------


@pytest.mark.parametrize("method", [m.Server.tool, m.Server.add_tool, m.Server.prompt])
def test_registration_options_are_spelled_out(method: Any) -> None:
    parameters = inspect.signature(method).parameters
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    for name in ("name", "title", "description", "meta"):
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters[name].annotation != inspect.Parameter.empty
    if method is not m.Server.prompt:
        assert {"annotations", "structured_output", "run_in_thread", "task"} <= set(parameters)


def test_an_unknown_option_is_a_type_error() -> None:
    server = m.Server("typo")
    with pytest.raises(TypeError, match="unexpected keyword argument 'titel'"):
        server.tool(titel="x")  # type: ignore[call-overload]


# -- testing.connect and Client agree ---------------------------------------------------


async def test_testing_lists_have_the_clients_shape() -> None:
    server = m.Server("shapes", lists=m.ListOptions(page_size=2))
    for i in range(5):
        server.add_tool(lambda: "", name=f"t{i}")
        server.resource(f"data://{i}")(lambda: "x")
    server.resource("data://items/{id}")(lambda id: id)

    @server.prompt
    def hello(name: str) -> str:
        return f"Hello {name}"

    async with connect(server) as wire:
        listed = (await wire.list_tools(), await wire.list_resources(),
                  await wire.list_resource_templates(), await wire.list_prompts())
    async with server.lifespan_context(), Client(MemoryTransport(server)) as client:
        expected = (await client.list_tools(), await client.list_resources(),
                    await client.list_resource_templates(), await client.list_prompts())
    assert listed == expected
    assert [t["name"] for t in listed[0]] == ["t0", "t1", "t2", "t3", "t4"]  # every page
