"""Issue 19: resource-template variables converted per annotation (-32602 on a bad
value), and registration mistakes caught at import with a message saying what to write.
Over the in-memory client and a real stdio subprocess."""

from __future__ import annotations

import enum
import sys
import uuid
from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import Field

import nimblemcp as m
from nimblemcp.client import Client
from nimblemcp.testing import connect
from nimblemcp.transports.stdio.client import StdioTransport


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


def _server() -> m.Server:
    server = m.Server("typed")

    @server.resource("items://{id}/{ratio}/{flag}")
    def item(id: int, ratio: float, flag: bool) -> str:
        return f"{id!r}|{ratio!r}|{flag!r}"

    @server.resource("things://{key}/{color}/{level}/{mode}")
    def thing(key: uuid.UUID, color: Color, level: Level, mode: Literal["a", "b"]) -> str:
        return f"{key.hex}|{color.name}|{level.name}|{mode}"

    @server.resource("pages://{n}")
    def page(n: Annotated[int, Field(ge=1, le=10)]) -> str:
        return f"page {n!r}"

    @server.resource("plain://{name}")
    def plain(name: str) -> str:
        return name

    return server


async def test_variables_are_converted() -> None:
    server = _server()
    key = uuid.uuid4()
    async with connect(server) as client:
        got = await client.read_resource("items://42/0.5/true")
        assert got["contents"][0]["text"] == "42|0.5|True"
        got = await client.read_resource(f"things://{key}/blue/2/b")
        assert got["contents"][0]["text"] == f"{key.hex}|BLUE|HIGH|b"
        assert (await client.read_resource("pages://3"))["contents"][0]["text"] == "page 3"
        assert (await client.read_resource("plain://x"))["contents"][0]["text"] == "x"


@pytest.mark.parametrize(("uri", "words"), [
    ("items://4x/0.5/true", "'id': expected an integer, got '4x'"),
    ("items://4/half/true", "'ratio': expected a number"),
    ("items://4/0.5/maybe", "'flag': expected a boolean"),
    ("things://not-a-uuid/red/1/a", "'key': expected a UUID"),
    (f"things://{uuid.UUID(int=1)}/green/1/a", "'color'"),
    (f"things://{uuid.UUID(int=1)}/red/3/a", "'level'"),
    (f"things://{uuid.UUID(int=1)}/red/1/c", "'mode'"),
    ("pages://11", "'n'"),
])
async def test_bad_values_are_invalid_params(uri: str, words: str) -> None:
    async with connect(_server()) as client:
        exchange = await client.exchange("resources/read", {"uri": uri})
    assert exchange.error["code"] == -32602
    assert words in exchange.error["message"]


def test_all_string_templates_keep_the_plain_binder() -> None:
    server = _server()
    assert server.templates["plain://{name}"].bind is dict


def test_mistakes_caught_at_registration() -> None:
    server = m.Server("mistakes")
    with pytest.raises(TypeError, match=r"@server.resource needs the resource's URI: write @server.resource\("):

        @server.resource  # type: ignore[arg-type]
        def forgot() -> str:
            return ""

    with pytest.raises(TypeError, match=r"@server.tool applies to a function"):
        server.tool()(42)  # type: ignore[type-var]
    with pytest.raises(TypeError, match=r"@server.prompt applies to a function"):
        server.prompt()("hello")
    with pytest.raises(TypeError, match=r"@server.resource\('a://b'\) applies to a function"):
        server.resource("a://b")(None)  # type: ignore[type-var]
    with pytest.raises(TypeError, match=r"'sock'.*cannot be built from a URI segment"):

        @server.resource("sockets://{sock}")
        def bad(sock: Server) -> str:
            return ""


Server = m.Server  # the annotation above, resolvable at registration

TYPED = """
import nimblemcp as m
server = m.Server("typed-stdio")

@server.resource("items://{id}")
def item(id: int) -> str:
    return str(id * 2)

if __name__ == "__main__":
    server.run()
"""


async def test_typed_variables_over_stdio(tmp_path: Path) -> None:
    src = tmp_path / "typed.py"
    src.write_text(TYPED)
    async with Client(StdioTransport(sys.executable, [str(src)])) as client:
        assert (await client.read_resource("items://21"))["contents"][0]["text"] == "42"
        with pytest.raises(m.InvalidParams, match="expected an integer"):
            await client.read_resource("items://x")
