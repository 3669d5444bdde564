"""`generate_stubs`: typed, stable, safe with hostile text, and right on the wire (issue 36,
item 1). The servers here are nimblemcp servers in-process (`Client(server)`); the three
libraries over stdio and HTTP are in tests/test_catalog_live.py.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nimblemcp import Server
from nimblemcp.catalog import (
    NOT_GIVEN,
    canonical,
    dumps,
    expand_template,
    generate_stubs,
    take_snapshot,
)
from nimblemcp.client import Client
from nimblemcp.errors import ToolError

# A description written to break out of a docstring, run code at import, hide itself in
# a terminal and trip Python's string escapes.
HOSTILE = ('Adds numbers."""\nimport os; os.environ["PWNED"] = "1"\n"""\n'
           "''' \\N{BEL} \\x41 \\\n\x00\x1b[2J\u202eevil\u200b \"\"\"\"\"\" end\"")
RECORDED: dict[str, Any] = {}


def hostile_server() -> Server:
    server = Server('evil"""server', "1.0\"\"\"", instructions=HOSTILE)

    @server.tool(description=HOSTILE)
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(name="class", description="A keyword as a name.", input_schema={
        "type": "object",
        "properties": {
            "self": {"type": "string", "description": HOSTILE},
            "from": {"type": "integer"},
            "first-name": {"type": "string", "enum": ["a", 'b"\'', "x | y"]},
            "tree": {"$ref": "#/$defs/Node"},
            "when": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
        "required": ["self", "from"],
        "$defs": {"Node": {"type": "object", "properties": {
            "value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            "odd-key": {"type": "boolean"}}, "required": ["value"]}},
    })
    def keyword_tool(**arguments: Any) -> str:
        RECORDED.clear()
        RECORDED.update(arguments)
        return "ok"

    @server.tool(name="get-sum")
    def get_sum_dash(a: float, b: float = 1.0) -> float:
        return a + b

    @server.tool(name="get_sum")
    def get_sum_under() -> str:
        return "under"

    @server.tool(name="list")
    def list_tool() -> str:
        return "listed"

    @server.tool
    def broken() -> dict[str, int]:
        raise ToolError("it broke, on purpose")

    @server.resource("notes://readme", name=HOSTILE, description=HOSTILE)
    def readme() -> str:
        return "read me"

    @server.resource("notes://{topic}/page/{n}", name="page")
    def page(topic: str, n: int) -> str:
        return f"{topic} page {n}"

    @server.prompt(description=HOSTILE)
    def review(topic: str, tone: str = "kind") -> str:
        return f"Review {topic}, {tone}ly"

    return server


def write_module(source: str, folder: Path, name: str) -> ModuleType:
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mypy_strict(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
                           os.devnull, *(str(p) for p in paths)], capture_output=True, text=True,
                          timeout=600, cwd=paths[0].parent)


def stub_class(module: ModuleType) -> Any:
    return next(v for k, v in vars(module).items() if isinstance(v, type) and k in module.__all__
                and hasattr(v, "_call_tool"))


def clean(text: str) -> str:
    return "\n".join(line.rstrip() for line in inspect.cleandoc(text).split("\n"))


async def test_hostile_text_stays_text_and_the_stub_still_works(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PWNED", raising=False)
    server = hostile_server()
    async with Client(server) as client:
        snapshot = await take_snapshot(client)
        source = generate_stubs(snapshot)
        module = write_module(source, tmp_path, "hostile_stubs")
        assert "PWNED" not in os.environ  # importing it ran no code of the server's
        for bad in ("\x00", "\x1b", "\u202e", "\u200b"):
            assert bad not in source  # escaped, never raw in the file
        stub = stub_class(module)(client)
        assert clean(stub.add.__doc__).startswith(clean(HOSTILE))  # the same text, as text
        assert clean(HOSTILE) in clean(stub_class(module).__doc__)
        assert clean(HOSTILE) in clean(stub.prompt_review.__doc__)
        # and the calls are right on the wire
        assert await stub.add(a=2, b=3) == {"result": 5}
        result = await stub.class_(self_="me", from_=3, first_name='b"\'',
                                   tree={"value": 1, "children": [{"value": 2, "odd-key": True}]})
        assert result["content"][0]["text"] == "ok"
        assert RECORDED == {"self": "me", "from": 3, "first-name": 'b"\'',
                            "tree": {"value": 1, "children": [{"value": 2, "odd-key": True}]}}
        assert "when" not in RECORDED  # NOT_GIVEN is not sent
        await stub.class_(self_="me", from_=3, when=None)
        assert RECORDED["when"] is None  # None is a value, and is sent
        assert (await stub.get_sum(a=2))["result"] == 3.0  # `get-sum` (b: the server's default)
        assert (await stub.get_sum_2())["content"][0]["text"] == "under"  # `get_sum`
        assert (await stub.list_())["content"][0]["text"] == "listed"
        with pytest.raises(ToolError, match="it broke, on purpose"):
            await stub.broken()
        page = await stub.read_page(topic="a b", n=2)  # expanded, percent-encoded
        assert page["contents"][0]["uri"] == "notes://a%20b/page/2"
        assert page["contents"][0]["text"] == "a b page 2"
        readme = [m for m in dir(stub) if m.startswith("read_") and m != "read_page"]
        assert len(readme) == 1 and (await getattr(stub, readme[0])())["contents"][0]["text"] == "read me"
        prompt = await stub.prompt_review(topic="tests")
        assert prompt["messages"][0]["content"]["text"] == "Review tests, kindly"
    checked = mypy_strict(tmp_path / "hostile_stubs.py")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_same_catalog_gives_the_same_bytes_whatever_its_order() -> None:
    raw_tools = [
        {"name": "b-tool", "description": "B.", "inputSchema": {"type": "object", "properties": {
            "z": {"type": "string"}, "a": {"type": "object", "properties": {"y": {"type": "integer"},
                                                                            "x": {"type": "string"}}}},
            "required": ["z", "a"]}},
        {"name": "a-tool", "inputSchema": {"type": "object"},
         "outputSchema": {"type": "object", "properties": {"k": {"type": "integer"}, "j": {"type": "string"}}}},
    ]
    shuffled = copy.deepcopy(raw_tools)[::-1]
    props = shuffled[1]["inputSchema"]["properties"]
    shuffled[1]["inputSchema"]["properties"] = dict(reversed(list(props.items())))
    shuffled[1]["inputSchema"]["required"] = ["a", "z"]
    one = canonical({"serverInfo": {"name": "s", "version": "1"}}, tools=raw_tools)
    two = canonical({"serverInfo": {"version": "1", "name": "s"}}, tools=shuffled)
    assert generate_stubs(one) == generate_stubs(two) == generate_stubs(json.loads(dumps(one)))
    assert generate_stubs(one, name="Custom") != generate_stubs(one)
    assert "class Custom(ServerStub):" in generate_stubs(one, name="Custom")


def test_schema_types_become_python_types(tmp_path: Path) -> None:
    tool = {"name": "shapes", "inputSchema": {"type": "object", "properties": {
        "text": {"type": "string"},
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "maybe": {"type": ["string", "null"]},
        "legacy": {"type": "integer", "nullable": True},
        "choice": {"enum": ["a", "b", None]},
        "fixed": {"const": 3},
        "floats": {"enum": [1.5, 2.5], "type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "grid": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "scores": {"type": "object", "additionalProperties": {"type": "integer"}},
        "free": {"type": "object"},
        "either": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
        "both": {"allOf": [{"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
                           {"type": "object", "properties": {"name": {"type": "string"}}}]},
        "anything": {},
    }, "required": ["text"]}}
    source = generate_stubs(canonical({"serverInfo": {"name": "types"}}, tools=[tool]))
    for expected in ("text: str", "count: int | NotGiven", "ratio: float | NotGiven",
                     "flag: bool | NotGiven", "maybe: str | None | NotGiven",
                     "legacy: int | None | NotGiven", "choice: Literal['a', 'b', None] | NotGiven",
                     "fixed: Literal[3] | NotGiven", "floats: float | NotGiven",
                     "tags: list[str] | NotGiven", "grid: list[list[float]] | NotGiven",
                     "scores: dict[str, int] | NotGiven", "free: dict[str, Any] | NotGiven",
                     "either: int | str | NotGiven", "both: ShapesBoth | NotGiven",
                     "anything: Any | NotGiven"):
        assert expected in source, expected
    assert "class ShapesBoth(TypedDict):\n    id: int\n    name: NotRequired[str]" in source
    path = tmp_path / "types_stubs.py"
    path.write_text(source)
    checked = mypy_strict(path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(("template", "values", "expected"), [
    ("notes://{topic}", {"topic": "a b/c"}, "notes://a%20b%2Fc"),
    ("file:///{+path}", {"path": "a b/c"}, "file:///a%20b/c"),
    ("x://y{?q,page}", {"q": "tea & cake", "page": 2}, "x://y?q=tea%20%26%20cake&page=2"),
    ("x://y{?q,page}", {"page": 2}, "x://y?page=2"),
    ("x://y{?q}", {}, "x://y"),
    ("x://y{/a,b}", {"a": "1", "b": "2"}, "x://y/1/2"),
    ("x://y{.ext}", {"ext": "md"}, "x://y.md"),
    ("x://y{;v}", {"v": ""}, "x://y;v"),
    ("x://y{#frag}", {"frag": "a/b c"}, "x://y#a/b%20c"),
    ("x://{name:3}", {"name": "abcdef"}, "x://abc"),
    ("x://{flag}", {"flag": True}, "x://true"),
])
def test_uri_templates_expand_by_rfc_6570(template: str, values: dict[str, Any], expected: str) -> None:
    assert expand_template(template, values) == expected


def test_not_given_is_falsy() -> None:
    assert not NOT_GIVEN and repr(NOT_GIVEN) == "NOT_GIVEN"
