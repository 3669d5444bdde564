"""A small terminal agent: one model, many MCP servers, and the user in the loop.

    python examples/host_agent/agent.py                 # starts the notes server itself
    python examples/host_agent/agent.py --notes-url http://127.0.0.1:8765/mcp

It reads `mcp.json` next to this file (the docs server over stdio, the notes server
over HTTP), puts every tool in one catalog (`docs__read_doc`, `notes__delete_note`, ...)
and runs the classic loop: the model sees the conversation and the tools in the
Anthropic Messages shape, asks for tool calls, the host runs them (asking the user
first when a tool is destructive or open-world) and hands the results back.

THE MODEL HERE IS NOT A LANGUAGE MODEL. `RuleBasedStandIn` matches a few phrases
("list docs", "read brief.md", "search risk", "note: ...", "notes", "delete note 2")
so the example runs offline and in tests. To use a real model, pass any callable with
the same signature, for example with the `anthropic` package:

    import anthropic
    api = anthropic.AsyncAnthropic()

    async def claude(messages, tools):
        reply = await api.messages.create(model="claude-sonnet-4-5", max_tokens=1024,
                                          messages=messages, tools=tools)
        return [block.model_dump() for block in reply.content]

    await run_agent(claude, ...)

(for OpenAI, convert with `openai_tools` / `parse_tool_call` / `openai_tool_output`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

from nimblemcp.host import (
    ClientGroup,
    Supervision,
    ToolCall,
    ToolCallDenied,
    anthropic_tool_result,
    anthropic_tools,
    parse_tool_call,
)

HERE = Path(__file__).resolve().parent
Blocks = list[dict[str, Any]]
#: messages (Anthropic shape) and tools (Anthropic shape) -> the reply's content blocks
Model = Callable[[list[dict[str, Any]], list[dict[str, Any]]], Awaitable[Blocks]]


class RuleBasedStandIn:
    """NOT A LANGUAGE MODEL: a few regular expressions that answer in the Anthropic
    Messages shape, so the example runs without an API key. Swap in a real model."""

    RULES: ClassVar[list[tuple[str, str, Callable[[re.Match[str]], dict[str, Any]]]]] = [
        (r"^(list|which|what) (the )?docs", "docs__list_docs", lambda m: {}),
        (r"^read (?P<name>\S+)", "docs__read_doc", lambda m: {"name": m["name"]}),
        (r"^search (?P<q>.+)", "docs__search_docs", lambda m: {"query": m["q"]}),
        (r"^note: (?P<text>.+)", "notes__add_note", lambda m: {"text": m["text"]}),
        (r"^delete note (?P<key>\S+)", "notes__delete_note", lambda m: {"key": m["key"]}),
        (r"^(show )?notes$", "notes__list_notes", lambda m: {}),
    ]

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Blocks:
        last = messages[-1]["content"]
        if isinstance(last, list) and last and last[0].get("type") == "tool_result":
            result = last[0]
            text = "\n".join(p.get("text", "") for p in result["content"] if p.get("type") == "text")
            if result.get("is_error"):
                return [{"type": "text", "text": f"That did not work: {text}"}]
            return [{"type": "text", "text": f"Done. The tool said:\n{text}"}]
        known = {tool["name"] for tool in tools}
        for pattern, tool, arguments in self.RULES:
            found = re.match(pattern, str(last).strip(), re.IGNORECASE)
            if found and tool in known:
                self.calls += 1
                return [{"type": "tool_use", "id": f"toolu_{self.calls}", "name": tool,
                         "input": arguments(found)}]
        return [{"type": "text", "text": "I am a rule-based stand-in, not a model. Try: list docs, "
                 "read brief.md, search risk, note: <text>, notes, delete note <key>, quit."}]


async def ask(prompt: str) -> str:
    print(prompt, end="", flush=True)
    line: str = await asyncio.to_thread(sys.stdin.readline)
    if not line:
        raise EOFError
    return line.strip()


async def confirm(call: ToolCall) -> bool:
    """The consent UI: say which server wants to run what, with which arguments."""
    shown = json.dumps(dict(call.arguments), ensure_ascii=False)
    return (await ask(f"[{call.server}] wants to run {call.title}({shown}). Allow? [y/N] ")).lower() in ("y", "yes")


async def turn(group: ClientGroup, model: Model, messages: list[dict[str, Any]]) -> None:
    """Let the model answer one user message, running the tools it asks for."""
    for _ in range(8):  # a bound on tool rounds per user message
        tools = anthropic_tools(group.catalog.tools)  # current: servers come and go
        reply = await model(messages, tools)
        messages.append({"role": "assistant", "content": reply})
        uses = [block for block in reply if block.get("type") == "tool_use"]
        for block in reply:
            if block.get("type") == "text":
                print(f"assistant> {block['text']}")
        if not uses:
            return
        results = []
        for use in uses:
            call = parse_tool_call(use)
            try:
                result = await group.call_tool(call.name, call.arguments)
            except ToolCallDenied as exc:
                result = {"content": [{"type": "text", "text": f"Not run: {exc.reason}."}],
                          "isError": True}
            except Exception as exc:  # a server down, a bad argument: tell the model
                result = {"content": [{"type": "text", "text": f"{type(exc).__name__}: {exc}"}],
                          "isError": True}
            results.append(anthropic_tool_result(result, call.id))
        messages.append({"role": "user", "content": results})


async def run_agent(model: Model, config: Path, notes_url: str) -> None:
    variables = {"python": sys.executable, "here": str(HERE), "notes_url": notes_url}
    async with ClientGroup.from_config(config, variables=variables, confirm=confirm,
                                       supervision=Supervision(backoff=0.5, max_backoff=5.0),
                                       ) as group:
        for name, state in group.states.items():
            print(f"[{name}] {state.status}" + (f": {state.error}" if state.error else ""))
        print(f"{len(group.catalog.tools)} tools: " + ", ".join(t.name for t in group.catalog.tools))
        messages: list[dict[str, Any]] = []
        while True:
            try:
                text = await ask("you> ")
            except EOFError:
                return
            if text in ("quit", "exit"):
                return
            if text:
                messages.append({"role": "user", "content": text})
                await turn(group, model, messages)


def _start_notes_server() -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "run", str(HERE / "notes_server.py"),
                             "--transport", "http", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}/mcp"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--notes-url", help="a running notes server (default: start one)")
    parser.add_argument("--config", type=Path, default=HERE / "mcp.json")
    args = parser.parse_args()
    proc = None
    url = args.notes_url
    if url is None:
        proc, url = _start_notes_server()
    try:
        asyncio.run(run_agent(RuleBasedStandIn(), args.config, url))
    except KeyboardInterrupt:
        pass
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=20)


if __name__ == "__main__":
    main()
