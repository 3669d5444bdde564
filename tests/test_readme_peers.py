"""README "Coming from FastMCP / the official SDK" (issue 19): the nimblemcp version of the
example server is no longer than the FastMCP or official-SDK version, and all three
(FastMCP 4.1.6 and mcp 2.3.0 from tests/_peers.py) run over real stdio and expose the same
tools, templates and prompts with the same results, reached by one nimblemcp client."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from _peers import fastmcp_python, mcp_python

from nimblemcp.client import Client
from nimblemcp.transports.stdio.client import StdioTransport

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> dict[str, str]:
    text = README.read_text()
    start = text.index("## Coming from FastMCP / the official SDK")
    end = text.index("\n## ", start + 1)
    blocks = re.findall(r"```python\n(.*?)```", text[start:end], re.S)
    assert len(blocks) == 3, "expected FastMCP, official SDK and nimblemcp versions"
    fastmcp, official, nimble = blocks
    assert "from fastmcp import" in fastmcp
    assert "from mcp.server.mcpserver import" in official
    assert "from nimblemcp import" in nimble
    return {"fastmcp": fastmcp, "official": official, "nimblemcp": nimble}


def _lines(code: str) -> int:
    return sum(1 for line in code.splitlines() if line.strip())


def test_nimblemcp_version_is_no_longer_than_either_peer() -> None:
    blocks = _blocks()
    assert _lines(blocks["nimblemcp"]) <= _lines(blocks["fastmcp"])
    assert _lines(blocks["nimblemcp"]) <= _lines(blocks["official"])
    assert len(blocks["nimblemcp"]) <= min(len(blocks["fastmcp"]), len(blocks["official"]))


async def _surface(python: str, script: Path) -> dict[str, Any]:
    async with Client(StdioTransport(python, [str(script)])) as client:
        tools = {t["name"]: sorted(t["inputSchema"].get("properties", {}))
                 for t in await client.list_tools()}
        templates = sorted(t["uriTemplate"] for t in await client.list_resource_templates())
        prompts = {p["name"]: sorted(a["name"] for a in p.get("arguments", []))
                   for p in await client.list_prompts()}
        first = await client.call_tool("add_note", {"body": "milk"})
        second = await client.call_tool("add_note", {"body": "eggs"})
        read = await client.read_resource("notes://7")
        prompt = await client.get_prompt("summarize", {"topic": "food"})
    return {
        "tools": tools,
        "templates": templates,
        "prompts": prompts,
        "ids": [first.get("structuredContent"), second.get("structuredContent")],
        "read": read["contents"][0]["text"],
        "prompt": prompt["messages"][0]["content"]["text"],
    }


@pytest.fixture(scope="module")
def peer_python() -> Path:
    return mcp_python()


@pytest.fixture(scope="module")
def fastmcp_peer() -> Path:
    return fastmcp_python()


async def test_all_three_versions_expose_the_same_server(
    tmp_path: Path, peer_python: Path, fastmcp_peer: Path
) -> None:
    blocks = _blocks()
    scripts = {}
    for name, code in blocks.items():
        scripts[name] = tmp_path / f"notes_{name}.py"
        scripts[name].write_text(code)
    nimble = await _surface(sys.executable, scripts["nimblemcp"])
    official = await _surface(str(peer_python), scripts["official"])
    fastmcp = await _surface(str(fastmcp_peer), scripts["fastmcp"])
    assert nimble["tools"] == {"add_note": ["body"]}
    assert nimble["templates"] == ["notes://{id}"]
    assert nimble["prompts"] == {"summarize": ["topic"]}
    assert nimble["ids"] == [{"result": 1}, {"result": 2}]  # the lifespan's database kept the first row
    assert nimble["read"] == "note 7"
    assert "food" in nimble["prompt"]
    assert nimble == official
    assert nimble == fastmcp
