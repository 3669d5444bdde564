"""Every code sample in the docs site, the README and the repository's other guides runs
(issue 14; issue 33: no page is exempt).

Python blocks of a page run in order in one namespace, like a notebook, with top-level
`await` allowed; `if __name__ == "__main__":` blocks do not fire (the namespace is not
`__main__`). Pages run in a scratch directory where `examples/` is the repository's, and
`python` on PATH is the interpreter running the tests, so a sample may start an example
server as a user would from a checkout. After a page, every `Server` it defined answers
`tools/list` and, if its first tool needs no arguments, one `tools/call`.

A block written for another library (it imports `fastmcp` or the official SDK's `mcp`)
runs under that library, installed by `tests/_peers.py`.

A block that cannot run on its own (it needs a browser, a server at a public URL, a
certificate of yours) is a fragment on purpose: its first line is the marker
`# not run: <why> (see <where>)`, where `<where>` is a runnable sample of the same feature
(an `examples/` program or a page section, `docs/page.md#anchor`) that exists. It is
only compiled.

Shell blocks are command references: every `nimblemcp …` line names a command whose
`--help` lists each option the line uses, and every `scripts/…` line names a script of
the repository.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import shlex
import subprocess
import sys
import types
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from nimblemcp import Server
from nimblemcp.testing import connect

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOT_RUN = "# not run:"
_FRAGMENT = re.compile(r"^# not run: (?P<why>.+) \(see (?P<where>[^)\s]+)\)\s*$")
_BLOCK = re.compile(r"^```(?P<lang>[a-z]*)[^\n]*\n(?P<code>.*?)^```", re.S | re.M)
_PEER_IMPORT = re.compile(r"^\s*(from|import)\s+(fastmcp|mcp)\b", re.M)


def pages() -> list[Path]:
    guides = [ROOT / name for name in ("README.md", "SECURITY.md", "CONTRIBUTING.md") if (ROOT / name).exists()]
    return [*guides, *sorted(DOCS.glob("*.md"))]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def blocks(page: Path, *langs: str) -> list[str]:
    return [m.group("code") for m in _BLOCK.finditer(page.read_text()) if m.group("lang") in langs]


def is_fragment(code: str) -> bool:
    return code.lstrip().startswith(NOT_RUN)


def test_the_docs_have_samples_and_few_are_fragments() -> None:
    every = [b for p in pages() for b in blocks(p, "python")]
    fragments = [b for b in every if is_fragment(b)]
    assert len(every) >= 35
    assert len(fragments) * 5 <= len(every), "most samples must run"


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_fragment_points_to_a_runnable_sample(page: Path) -> None:
    for code in blocks(page, "python"):
        if not is_fragment(code):
            continue
        first = code.lstrip().splitlines()[0]
        marker = _FRAGMENT.match(first)
        assert marker, f"{page_id(page)}: a fragment says why and where a runnable sample is: {first!r}"
        path, _, anchor = marker.group("where").partition("#")
        target = ROOT / path
        assert target.exists(), f"{page_id(page)}: {path} does not exist"
        if anchor:
            headings = {_anchor(h) for h in re.findall(r"^#+ (.+)$", target.read_text(), re.M)}
            assert anchor in headings, f"{page_id(page)}: no section #{anchor} in {path}"


def _anchor(heading: str) -> str:
    """The id mkdocs (python-markdown's toc) gives a heading."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return re.sub(r"[\s-]+", "-", text).strip("-")


async def run_block(code: str, namespace: dict[str, Any], where: str) -> None:
    compiled = compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    outcome = eval(compiled, namespace)  # our own docs samples
    if asyncio.iscoroutine(outcome):
        await outcome


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory like a checkout's: `examples/` is there, `python` is ours."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return tmp_path


@pytest.mark.parametrize("page", pages(), ids=page_id)
async def test_page_samples_run(page: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real module, as a user's script is one: dataclasses and pickling look it up.
    module = types.ModuleType(f"docs_{page.stem}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace: dict[str, Any] = module.__dict__
    for index, code in enumerate(blocks(page, "python"), 1):
        where = f"{page_id(page)} sample {index}"
        if is_fragment(code):
            compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            continue
        if _PEER_IMPORT.search(code):
            _run_with_peer(code, where, scratch)
            continue
        await run_block(code, namespace, where)
    for value in list(namespace.values()):
        if isinstance(value, Server) and value.tools:
            async with connect(value) as client:
                tools = await client.list_tools()
                if tools and not tools[0]["inputSchema"].get("required"):
                    result = await client.call_tool(tools[0]["name"], {})
                    assert "content" in result or "resultType" in result


def _run_with_peer(code: str, where: str, cwd: Path) -> None:
    """A sample written for FastMCP or the official SDK, run under that library."""
    from _peers import fastmcp_python, mcp_python

    python = fastmcp_python() if re.search(r"^\s*(from|import)\s+fastmcp\b", code, re.M) else mcp_python()
    stem = re.sub(r"\W+", "_", where)
    sample = cwd / f"{stem}.py"
    sample.write_text(code)
    done = subprocess.run([str(python), "-c", f"import runpy; runpy.run_path({str(sample)!r}, run_name='sample')"],
                          cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{where} under its own library:\n{done.stderr}"


# Shell blocks: command references, checked against the CLI's own help.

def shell_lines(page: Path) -> list[list[str]]:
    lines = []
    for code in blocks(page, "bash", "sh", "console"):
        for raw in code.replace("\\\n", " ").splitlines():
            line = raw.split(" #", 1)[0].strip().removeprefix("$ ")
            if line and not line.startswith("#"):
                lines.append(shlex.split(line))
    return lines


@cache
def cli_help(command: str) -> str:
    done = subprocess.run([sys.executable, "-m", "nimblemcp", *command.split(), "--help"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, f"nimblemcp {command} --help:\n{done.stderr}"
    return done.stdout


def _nimblemcp_words(words: list[str]) -> list[str] | None:
    """The words after `nimblemcp` (or `python -m nimblemcp`), None for other commands."""
    for env in range(len(words)):  # skip `NAME=value` prefixes
        if "=" not in words[env]:
            break
    words = words[env:]
    if words[:1] == ["nimblemcp"]:
        return words[1:]
    if len(words) >= 3 and words[1:3] == ["-m", "nimblemcp"]:
        return words[3:]
    return None


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_shell_samples_name_real_commands_and_options(page: Path) -> None:
    top = cli_help("")
    for words in shell_lines(page):
        if words[0].startswith("scripts/"):
            assert (ROOT / words[0]).exists(), f"{page_id(page)}: no script {words[0]}"
            continue
        args = _nimblemcp_words(words)
        if args is None:
            continue
        if "--" in args:
            args = args[:args.index("--")]
        command = next((a for a in args if not a.startswith("-")), "")
        if command and re.search(rf"^\s+{re.escape(command)}\b|[{{,]{re.escape(command)}[,}}]", top, re.M):
            text = cli_help(command)
        else:
            text = top
        for option in (a.split("=", 1)[0] for a in args if a.startswith("--")):
            assert option in text, f"{page_id(page)}: `nimblemcp {' '.join(args)}`: {option} is not an option"
