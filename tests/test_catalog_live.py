"""`nimblemcp snapshot`, `diff` and `stubs` against live servers of three libraries, over
stdio and over HTTP (issue 36: items 1 and 2, "Done when").

- nimblemcp: examples/docs_server/server.py (TARGET given as the server file; HTTP by
  `nimblemcp run --transport http`);
- the official Python SDK (`mcp` 2.3.0): tests/interop/sdk_catalog_server.py, typed
  arguments of every kind pydantic writes (enums, nested models in `$defs`, optionals,
  unions, maps) and a structured result;
- the npm reference server `@modelcontextprotocol/server-everything` (a 2025-11-25
  peer; stdio, and its Streamable HTTP transport).

Every command runs as a user runs it (`python -m nimblemcp ...`). The stubs are imported
and called against the same server, and pass `mypy --strict`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import _peers
import pytest

from nimblemcp.client import Client, RetryPolicy

ROOT = Path(__file__).resolve().parents[1]
DOCS_SERVER = ROOT / "examples" / "docs_server" / "server.py"
SDK_SERVER = ROOT / "tests" / "interop" / "sdk_catalog_server.py"


def nimblemcp(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nimblemcp", *args], capture_output=True, text=True,
                          timeout=180, cwd=cwd)


@dataclass
class Peer:
    """One library's server: its stdio TARGET words, its HTTP URL, and what to call."""

    name: str
    stdio: list[str]  # the words after `nimblemcp COMMAND` that name it over stdio
    url: str
    tools: set[str]
    exercise: Callable[[Any, ModuleType], Awaitable[None]]
    client_target: list[str]  # the same server as a Client target (command line)


async def _exercise_docs(stub: Any, module: ModuleType) -> None:
    listed = await stub.list_docs()
    assert "brief.md" in listed["result"]  # a structured result, as its TypedDict says
    read = await stub.read_doc(name="brief.md")
    assert read["content"][0]["type"] == "text" and read["content"][0]["text"]
    hits = await stub.search_docs(query="risk")
    assert hits["result"]
    resource = await stub.read_document(name="brief.md")  # the template docs://{name}
    assert resource["contents"][0]["uri"] == "docs://brief.md"
    prompt = await stub.prompt_review_brief()
    assert prompt["messages"]


async def _exercise_sdk(stub: Any, module: ModuleType) -> None:
    assert await stub.add(a=2, b=3) == {"result": 5}
    order = await stub.place_order(items=["tea"], ship_to={"street": "1 Main St", "city": "Oslo"},
                                   colour="green", weights={"tea": 1.5}, code="x")
    assert order["items"] == ["tea", "green", "low", "x"]  # priority left out: the server's default
    assert order["ship_to"]["city"] == "Oslo" and order["total"] == 2.5
    note = await stub.read_topic_note(topic="a b/c")  # expanded and percent-encoded
    assert note["contents"][0]["text"] == "note on a b/c"
    assert (await stub.read_readme())["contents"][0]["text"] == "read me"
    prompt = await stub.prompt_review(topic="tests")
    assert prompt["messages"][0]["content"]["text"] == "Review tests, kindly"


async def _exercise_everything(stub: Any, module: ModuleType) -> None:
    echo = await stub.echo(message="hello")
    assert echo["content"][0]["text"] == "Echo: hello"
    total = await stub.get_sum(a=2, b=40)
    assert "42" in total["content"][0]["text"]
    weather = await stub.get_structured_content(location="Chicago")
    assert set(weather) == {"temperature", "conditions", "humidity"}
    text = await stub.read_dynamic_text_resource(resource_id=3)
    assert text["contents"][0]["uri"] == "demo://resource/dynamic/text/3"
    prompt = await stub.prompt_args_prompt(city="Paris")  # `state` left out
    assert "Paris" in json.dumps(prompt["messages"])


@pytest.fixture(scope="module")
def peers() -> Iterator[dict[str, Peer]]:
    sdk_python = str(_peers.mcp_python())
    everything = _peers.server_everything()
    ports = [_peers.free_port() for _ in range(3)]
    docs_http = [sys.executable, "-m", "nimblemcp", "run", str(DOCS_SERVER), "--transport", "http",
                 "--port", str(ports[0])]
    sdk_http = [sdk_python, str(SDK_SERVER), "http", str(ports[1])]
    every_http = [everything[0], everything[1], "streamableHttp"]
    with _peers.running(docs_http, ports[0], "the docs server"), \
            _peers.running(sdk_http, ports[1], "the SDK server", env={"PYTHONPATH": ""}), \
            _peers.running(every_http, ports[2], "server-everything", env={"PORT": str(ports[2])}):
        yield {
            "nimblemcp": Peer("nimblemcp", [str(DOCS_SERVER)], f"http://127.0.0.1:{ports[0]}/mcp",
                              {"list_docs", "read_doc", "search_docs"}, _exercise_docs,
                              [sys.executable, "-m", "nimblemcp", "run", str(DOCS_SERVER)]),
            "official": Peer("official", ["--", sdk_python, str(SDK_SERVER)],
                             f"http://127.0.0.1:{ports[1]}/mcp", {"add", "place_order"},
                             _exercise_sdk, [sdk_python, str(SDK_SERVER)]),
            "everything": Peer("everything", ["--", *everything], f"http://127.0.0.1:{ports[2]}/mcp",
                               {"echo", "get-sum", "get-structured-content"}, _exercise_everything,
                               everything),
        }


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory, peers: dict[str, Peer]) -> dict[str, Path]:
    """`nimblemcp stubs` of every peer over stdio and over HTTP, written to files."""
    out = tmp_path_factory.mktemp("stubs")
    found: dict[str, Path] = {}
    for peer in peers.values():
        for transport, words in (("stdio", peer.stdio), ("http", [peer.url])):
            path = out / f"{peer.name}_{transport}_stubs.py"
            done = nimblemcp("stubs", "-o", str(path), *words)
            assert done.returncode == 0, done.stderr
            found[f"{peer.name}/{transport}"] = path
    return found


PEERS = ["nimblemcp", "official", "everything"]


@pytest.mark.parametrize("name", PEERS)
def test_snapshot_over_stdio_and_http_gives_the_same_canonical_catalog(name: str, peers: dict[str, Peer],
                                                                       tmp_path: Path) -> None:
    peer = peers[name]
    over_stdio = nimblemcp("snapshot", *peer.stdio)
    over_http = nimblemcp("snapshot", peer.url)
    assert over_stdio.returncode == 0, over_stdio.stderr
    assert over_http.returncode == 0, over_http.stderr
    assert over_stdio.stdout == over_http.stdout  # canonical: the same catalog, the same bytes
    snap = json.loads(over_stdio.stdout)
    assert snap["format"] == "nimblemcp-catalog/1"
    names = [t["name"] for t in snap["tools"]]
    assert peer.tools <= set(names) and names == sorted(names)
    assert "ttlMs" not in over_stdio.stdout and "cacheScope" not in over_stdio.stdout
    assert nimblemcp("snapshot", *peer.stdio).stdout == over_stdio.stdout  # and again
    lock = tmp_path / "server.lock.json"
    lock.write_text(over_stdio.stdout)
    same = nimblemcp("diff", str(lock), peer.url)
    assert same.returncode == 0 and same.stdout == "no changes\n", same.stderr


@pytest.mark.parametrize("name", PEERS)
def test_diff_of_a_live_server_against_an_edited_lockfile(name: str, peers: dict[str, Peer],
                                                          tmp_path: Path) -> None:
    peer = peers[name]
    snap = json.loads(nimblemcp("snapshot", peer.url).stdout)
    tools = {t["name"]: t for t in snap["tools"]}
    first = sorted(peer.tools)[0]
    # the pinned catalog said something else: the live one is a change from it
    tools[first]["description"] = "An older description."
    snap["tools"].append({"name": "retired_tool", "inputSchema": {"type": "object"}})
    old = tmp_path / "old.lock.json"
    old.write_text(json.dumps(snap))
    human = nimblemcp("diff", str(old), *peer.stdio)
    assert human.returncode == 4, human.stdout + human.stderr  # security-relevant is the worst
    assert f"tool {first}" in human.stdout and "SECURITY" in human.stdout
    assert "tool retired_tool" in human.stdout and "BREAKING" in human.stdout
    as_json = nimblemcp("diff", "--json", str(old), peer.url)
    assert as_json.returncode == 4
    report = json.loads(as_json.stdout)
    assert {(c["severity"], c["code"], c["name"]) for c in report["changes"]} == {
        ("security", "description-changed", first), ("breaking", "tool-removed", "retired_tool")}
    assert report["worst"] == "security" and report["exitCode"] == 4


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("name", PEERS)
async def test_generated_stubs_call_the_real_server(name: str, transport: str, peers: dict[str, Peer],
                                                    generated: dict[str, Path]) -> None:
    peer = peers[name]
    path = generated[f"{name}/{transport}"]
    assert path.read_bytes() == generated[f"{name}/stdio"].read_bytes()  # the same catalog
    module = _load(path)
    stub_class = next(v for k, v in vars(module).items()
                      if isinstance(v, type) and k in module.__all__ and hasattr(v, "_call_tool"))
    target: Any = peer.url if transport == "http" else peer.client_target
    async with Client(target, retry_policy=RetryPolicy(probe_timeout=30)) as client:
        await peer.exercise(stub_class(client), module)


def test_every_generated_module_passes_mypy_strict(generated: dict[str, Path], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
         *(str(p) for p in generated.values())],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"no issues found in {len(generated)} source files" in done.stdout


def test_stubs_from_a_lockfile_are_the_bytes_from_the_live_server(peers: dict[str, Peer],
                                                                  generated: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    peer = peers["official"]
    lock = tmp_path / "sdk.lock.json"
    lock.write_text(nimblemcp("snapshot", peer.url).stdout)
    again = nimblemcp("stubs", str(lock))
    assert again.returncode == 0, again.stderr
    assert again.stdout == generated["official/stdio"].read_text()


def test_the_pins_of_an_mcp_json_are_the_snapshots_of_its_servers(peers: dict[str, Peer],
                                                                  tmp_path: Path) -> None:
    """`--config` reaches each server as a `ClientGroup` does; what it pins (from the
    group's own lists) is byte for byte what `snapshot TARGET` prints, for every library
    and both transports, so a host never sees a change that is not there."""
    servers: dict[str, Any] = {}
    for name, peer in peers.items():
        servers[f"{name}_http"] = {"type": "http", "url": peer.url}
        command = peer.client_target
        servers[f"{name}_stdio"] = {"command": command[0], "args": command[1:]}
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    pinned = nimblemcp("snapshot", "--config", str(config), "--write-lock")
    assert pinned.returncode == 0, pinned.stderr
    lock = json.loads((tmp_path / "mcp.lock.json").read_text())["servers"]
    assert set(lock) == set(servers)
    for name, peer in peers.items():
        direct = nimblemcp("snapshot", peer.url).stdout
        for transport in ("http", "stdio"):
            one = nimblemcp("snapshot", "--config", str(config), f"{name}_{transport}")
            assert one.stdout == direct, (name, transport)
            assert json.loads(direct) == lock[f"{name}_{transport}"]["catalog"]
    again = nimblemcp("diff", "--config", str(config))
    assert again.returncode == 0 and again.stdout == "no changes\n", again.stdout + again.stderr


def test_the_client_commands_take_a_server_file_too(tmp_path: Path) -> None:
    """The TARGET parsing is one (`split_target`): `path.py[:name]` is spawned with
    `nimblemcp run` over stdio by the client commands as by stubs, snapshot and diff."""
    listed = nimblemcp("tools", f"{DOCS_SERVER}:server")
    assert listed.returncode == 0, listed.stderr
    assert "read_doc" in listed.stdout
    called = nimblemcp("call", str(DOCS_SERVER), "read_doc", "--arg", "name=brief.md")
    assert called.returncode == 0 and called.stdout.startswith("# Project brief"), called.stderr
    both = nimblemcp("tools", str(DOCS_SERVER), "http://127.0.0.1:9/mcp")
    assert both.returncode == 2 and "not both" in both.stderr
    missing = nimblemcp("snapshot", str(tmp_path / "nowhere.py"))
    assert missing.returncode == 2 and "give one TARGET" in missing.stderr
