"""Which parameter takes the Context: one answer for tools, prompts, resources, templates
and dependency providers (issue 32, point 5).

A parameter annotated `Context` takes it, also as the string of a postponed annotation
whose module imports `Context` for type checking only; a class of the module's own that
is named Context is that class (an ordinary argument). Before, a tool refused the
string (its registration raised NameError) while prompts, resources and providers
accepted it, and a provider took a module's own Context class for ours.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nimblemcp.testing import connect

TYPE_CHECKING_ONLY = '''
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import nimblemcp as m

if TYPE_CHECKING:
    from nimblemcp import Context

server = m.Server("ctx-by-name")


def method_of(ctx: Context) -> str:
    return ctx.method


@server.tool
def tool(text: str, ctx: Context) -> str:
    return f"{text}:{ctx.method}"


@server.tool
def provided(text: str, method: Annotated[str, m.Depends(method_of)]) -> str:
    return f"{text}:{method}"


@server.prompt
def prompt(name: str, ctx: Context) -> str:
    return f"{name}:{ctx.method}"


@server.resource("ctx://fixed")
def fixed(ctx: Context) -> str:
    return ctx.method


@server.resource("ctx://items/{key}")
def item(key: str, ctx: Context) -> str:
    return f"{key}:{ctx.method}"
'''

OWN_CLASS = '''
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel

import nimblemcp as m

server = m.Server("own-context")


class Context(BaseModel):
    """The application's own model that happens to share the name."""

    user: str


def user_of(ctx: Context) -> str:
    return ctx.user


@server.tool
def tool(ctx: Context) -> str:
    return ctx.user


def provided(user: Annotated[str, m.Depends(user_of)]) -> str:  # registered by the test
    return user
'''


def _load(tmp_path: Path, name: str, source: str) -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


@pytest.fixture
def by_name(tmp_path: Path) -> Any:
    yield _load(tmp_path, "ctx_type_checking_only", TYPE_CHECKING_ONLY)
    sys.modules.pop("ctx_type_checking_only", None)


@pytest.fixture
def own_class(tmp_path: Path) -> Any:
    yield _load(tmp_path, "ctx_own_class", OWN_CLASS)
    sys.modules.pop("ctx_own_class", None)


async def test_a_context_imported_for_type_checking_only_is_the_context_everywhere(by_name: Any) -> None:
    server = by_name.server
    async with connect(server) as c:
        tools = {t["name"]: t for t in (await c.request("tools/list"))["tools"]}
        # Neither the Context nor a provided parameter is an argument of the tool.
        assert tools["tool"]["inputSchema"]["properties"] == {"text": {"type": "string"}}
        assert tools["provided"]["inputSchema"]["properties"] == {"text": {"type": "string"}}
        assert (await c.call_tool("tool", {"text": "a"}))["content"][0]["text"] == "a:tools/call"
        assert (await c.call_tool("provided", {"text": "b"}))["content"][0]["text"] == "b:tools/call"
        prompts = (await c.request("prompts/list"))["prompts"]
        assert prompts[0]["arguments"] == [{"name": "name", "required": True}]
        got = await c.get_prompt("prompt", {"name": "n"})
        assert got["messages"][0]["content"]["text"] == "n:prompts/get"
        assert (await c.read_resource("ctx://fixed"))["contents"][0]["text"] == "resources/read"
        assert (await c.read_resource("ctx://items/k"))["contents"][0]["text"] == "k:resources/read"


async def test_a_module_s_own_class_named_context_is_an_ordinary_argument(own_class: Any) -> None:
    server = own_class.server
    async with connect(server) as c:
        tools = {t["name"]: t for t in (await c.request("tools/list"))["tools"]}
        assert tools["tool"]["inputSchema"]["required"] == ["ctx"]
        assert (await c.call_tool("tool", {"ctx": {"user": "ada"}}))["content"][0]["text"] == "ada"
    # A provider's `ctx: Context` is the module's class too: not the request's Context,
    # so nothing can fill it, which registration says.
    with pytest.raises(TypeError, match="parameter 'ctx' needs a default, a `Context` annotation"):
        server.add_tool(own_class.provided)
