"""Drive a nimblemcp server with the official Python SDK client (mcp 2.3.0); print JSON.

Run with the interop venv's python (tests/_peers.py installs it):

    python sdk_client.py MODE SCENARIO URL
    python sdk_client.py MODE SCENARIO -- COMMAND ARG...

MODE is the SDK's `mode=` ("auto", "legacy" or a version pin); SCENARIO is "target"
(tests/interop/nimble_server.py) or "docs" (examples/docs_server/server.py). Each step's
outcome goes into one JSON object on stdout, errors included, so the test can say exactly
which step failed and why. A stdio server gets the SDK's default environment plus the JSON
object in $INTEROP_SERVER_ENV.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as types
from mcp.client import Client, ClientRequestContext
from mcp.client.stdio import StdioServerParameters


def dump(model: Any) -> Any:
    if hasattr(model, "model_dump"):
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return model


async def on_elicit(context: ClientRequestContext, params: Any) -> types.ElicitResult:
    message = getattr(params, "message", "")
    if "colour" in message:
        return types.ElicitResult(action="accept", content={"colour": "teal"})
    return types.ElicitResult(action="accept", content={"publish": True})


async def target(client: Client, out: dict[str, Any]) -> None:
    out["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
    out["weather_tool"] = dump(next(t for t in (await client.list_tools()).tools
                                    if t.name == "weather"))
    out["add"] = dump(await client.call_tool("add", {"a": 2, "b": 40}))
    out["weather"] = dump(await client.call_tool("weather", {"city": "Lisbon"}))
    progress: list[list[Any]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append([value, total, message])

    out["slow_count"] = dump(await client.call_tool("slow_count", {"n": 3},
                                                    progress_callback=on_progress))
    out["progress"] = progress
    out["ask_colour"] = dump(await client.call_tool("ask_colour", {}))
    out["fail"] = dump(await client.call_tool("fail", {"reason": "nope"}))
    out["resources"] = [r.uri for r in (await client.list_resources()).resources]
    out["templates"] = [t.uri_template
                        for t in (await client.list_resource_templates()).resource_templates]
    out["readme"] = dump(await client.read_resource("notes://readme"))
    out["topic"] = dump(await client.read_resource("notes://topics/alpha"))
    out["prompts"] = [p.name for p in (await client.list_prompts()).prompts]
    out["prompt"] = dump(await client.get_prompt("review", {"topic": "beta"}))
    out["complete_prompt"] = dump(await client.complete(
        types.PromptReference(type="ref/prompt", name="review"), {"name": "topic", "value": "al"}))
    out["complete_template"] = dump(await client.complete(
        types.ResourceTemplateReference(type="ref/resource", uri="notes://topics/{topic}"),
        {"name": "topic", "value": "b"}))


async def docs(client: Client, out: dict[str, Any]) -> None:
    out["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
    out["list_docs"] = dump(await client.call_tool("list_docs", {}))
    out["read_doc"] = dump(await client.call_tool("read_doc", {"name": "brief.md"}))
    out["templates"] = [t.uri_template
                        for t in (await client.list_resource_templates()).resource_templates]
    out["document"] = dump(await client.read_resource("docs://brief.md"))
    out["prompt"] = dump(await client.get_prompt("review_brief", {}))
    review = await client.call_tool("start_review", {"document": "brief.md"})
    out["start_review"] = dump(review)
    handle = review.content[0].text  # type: ignore[union-attr]
    out["add_comment"] = dump(await client.call_tool("add_comment",
                                                     {"review": handle, "comment": "Add a budget."}))
    out["finish_review"] = dump(await client.call_tool("finish_review", {"review": handle}))


async def listen(client: Client, out: dict[str, Any]) -> None:
    """docs_server watching $DOCS_DIR: an edited document and an added one reach listeners."""
    from pathlib import Path

    docs_dir = Path(json.loads(os.environ["INTEROP_SERVER_ENV"])["DOCS_DIR"])
    events: list[list[Any]] = []
    async with client.listen(resources_list_changed=True,
                             resource_subscriptions=["docs://brief.md"]) as sub:
        out["honored"] = dump(sub.honored)
        brief = docs_dir / "brief.md"
        brief.write_text(brief.read_text() + "\nEdited.\n")
        async with asyncio.timeout(30):
            async for event in sub:
                events.append([type(event).__name__, getattr(event, "uri", None)])
                if getattr(event, "uri", None) == "docs://brief.md":
                    break
        (docs_dir / "added.md").write_text("# Added\n")
        async with asyncio.timeout(30):
            async for event in sub:
                events.append([type(event).__name__, getattr(event, "uri", None)])
                if getattr(event, "uri", None) is None:
                    break
    out["events"] = events
    out["resources"] = sorted(r.uri for r in (await client.list_resources(
        cache_mode="refresh")).resources)


SCENARIOS: dict[str, Callable[[Client, dict[str, Any]], Awaitable[None]]] = {
    "target": target, "docs": docs, "listen": listen,
}


async def main(argv: list[str]) -> dict[str, Any]:
    mode, scenario, *rest = argv
    server: Any
    if rest[0] == "--":
        extra = json.loads(os.environ.get("INTEROP_SERVER_ENV", "{}"))
        server = StdioServerParameters(command=rest[1], args=rest[2:], env=extra)
    else:
        server = rest[0]
    out: dict[str, Any] = {}
    try:
        async with Client(server, mode=mode, elicitation_callback=on_elicit) as client:
            out["protocol_version"] = client.protocol_version
            info = client.server_info
            out["server_name"] = info.name if info else None
            await SCENARIOS[scenario](client, out)
    except BaseException as exc:  # report, do not crash: the test prints it
        out["error"] = "".join(traceback.format_exception(exc))[-4000:]
        leaf: BaseException | None = exc
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        if leaf is not None and hasattr(leaf, "code"):
            out["error_code"] = leaf.code
            out["error_data"] = getattr(leaf, "data", None)
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1:]))))
