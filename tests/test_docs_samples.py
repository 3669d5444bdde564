"""Every Python sample in the docs site runs (issue 14).

The fenced ```python blocks of a page run in order in one namespace, like a notebook,
with top-level `await` allowed; `if __name__ == "__main__":` blocks do not fire (the
namespace is not `__main__`). A block that cannot run on its own (it needs a server at
a URL, a browser, a file of yours) starts with the explicit marker line
`# not run: <reason>` and is only compiled. After a page, every `Server` it defined
answers `tools/list` and, if it has tools, one `tools/call` through
`nimblemcp.testing.connect`.

`docs/server_framework.md` (issue 19's page, linked from the server guide) holds
fragments; its samples are the runnable `examples/` programs that page names, which
`tests/test_examples_framework.py` runs.
"""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from nimblemcp import Server
from nimblemcp.testing import connect

DOCS = Path(__file__).resolve().parents[1] / "docs"
NOT_RUN = "# not run:"
FRAGMENT_PAGES = {"server_framework.md", "rough_edges.md", "deployment.md"}
_BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)


def pages() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if p.name not in FRAGMENT_PAGES)


def blocks(page: Path) -> list[str]:
    return [m.group(1) for m in _BLOCK.finditer(page.read_text())]


def test_the_docs_have_samples_and_few_are_not_run() -> None:
    every = [b for p in pages() for b in blocks(p)]
    skipped = [b for b in every if b.lstrip().startswith(NOT_RUN)]
    assert len(every) >= 15
    assert len(skipped) * 4 <= len(every), "most samples must run"


async def run_block(code: str, namespace: dict[str, Any], where: str) -> None:
    compiled = compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    outcome = eval(compiled, namespace)  # our own docs samples
    if asyncio.iscoroutine(outcome):
        await outcome


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
async def test_page_samples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem}"}
    for index, code in enumerate(blocks(page), 1):
        where = f"{page.name} sample {index}"
        if code.lstrip().startswith(NOT_RUN):
            compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            continue
        await run_block(code, namespace, where)
    for value in list(namespace.values()):
        if isinstance(value, Server):
            async with connect(value) as client:
                tools = await client.list_tools()
                if tools:
                    first = tools[0]
                    required = first["inputSchema"].get("required", [])
                    if not required:
                        result = await client.call_tool(first["name"], {})
                        assert "content" in result or "resultType" in result
