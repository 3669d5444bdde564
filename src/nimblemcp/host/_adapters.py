"""MCP tools and results in the function-calling shapes of the common model APIs.

Pure data: no model SDK is imported or needed.

    tools = openai_tools(group.catalog.tools)                   # Chat Completions
    tools = openai_tools(group.catalog.tools, api="responses")  # Responses API
    tools = anthropic_tools(group.catalog.tools)                # Messages API
    call = parse_tool_call(block)          # any of the three call shapes -> ModelToolCall
    result = await group.call_tool(call.name, call.arguments)
    messages.append(openai_tool_output(result, call.id))        # or anthropic_tool_result

Definitions are shown under their catalog names (`CatalogItem.as_definition()`); plain
MCP tool dicts work too. Result content: text as text; images as images where the API
takes them in a tool result (Anthropic, OpenAI Responses) and as a short note where it
does not (Chat Completions tool messages are text only); audio as a note; resource
links as a line naming the link; embedded text resources as their text, binary ones as a
note (PDFs as documents for Anthropic, files for Responses); `structuredContent`
as JSON text when the result carries no text of its own; `isError` as `is_error`
(Anthropic) or an "Error:" prefix (OpenAI, which has no error flag).
Imports only the host catalog (for the item type).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._catalog import CatalogItem

__all__ = [
    "ModelToolCall",
    "anthropic_tool_result",
    "anthropic_tools",
    "openai_tool_output",
    "openai_tools",
    "parse_tool_call",
]

OpenAIApi = Literal["chat", "responses"]
_ANTHROPIC_IMAGES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


def _definition(tool: CatalogItem | Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    data = tool.as_definition() if isinstance(tool, CatalogItem) else dict(tool)
    schema = data.get("inputSchema")
    params: dict[str, Any] = dict(schema) if isinstance(schema, Mapping) else {}
    params.pop("$schema", None)
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    description = data.get("description") or data.get("title") or ""
    return str(data["name"]), str(description), params


def openai_tools(
    tools: Iterable[CatalogItem | Mapping[str, Any]], *, api: OpenAIApi = "chat",
) -> list[dict[str, Any]]:
    """Function tools for OpenAI: Chat Completions `{"type": "function", "function":
    {...}}` or (`api="responses"`) the Responses API's flat `{"type": "function", ...}`."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        name, description, params = _definition(tool)
        function = {"name": name, "description": description, "parameters": params}
        out.append({"type": "function", "function": function} if api == "chat"
                   else {"type": "function", **function})
    return out


def anthropic_tools(tools: Iterable[CatalogItem | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Client tools for the Anthropic Messages API: `{"name", "description", "input_schema"}`."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        name, description, params = _definition(tool)
        out.append({"name": name, "description": description, "input_schema": params})
    return out


@dataclass(frozen=True, slots=True)
class ModelToolCall:
    """A tool call a model asked for: its id (to answer it), name and arguments."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


def parse_tool_call(call: Mapping[str, Any]) -> ModelToolCall:
    """Read a tool call in any of the shapes: an OpenAI Chat Completions `tool_calls`
    entry, a Responses API `function_call` item, or an Anthropic `tool_use` block
    (plain dicts; for SDK objects pass `obj.model_dump()`)."""
    if call.get("type") == "tool_use":
        raw: Any = call.get("input") or {}
        return ModelToolCall(str(call["id"]), str(call["name"]), _object(raw))
    if call.get("type") == "function_call":
        return ModelToolCall(str(call.get("call_id") or call.get("id")), str(call["name"]),
                             _object(call.get("arguments")))
    function = call.get("function")
    if isinstance(function, Mapping):
        return ModelToolCall(str(call["id"]), str(function["name"]),
                             _object(function.get("arguments")))
    raise ValueError(f"not a tool call in a known shape: {dict(call)!r}")


def _object(raw: Any) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the model sent arguments that are not JSON: {raw!r}") from exc
    if not isinstance(raw, Mapping):
        raise ValueError(f"tool arguments must be a JSON object, not {raw!r}")
    return dict(raw)


# -- results ---------------------------------------------------------------------------


def _note(block: Mapping[str, Any]) -> str:
    kind = block.get("type")
    if kind == "resource_link":
        label = block.get("title") or block.get("name") or block.get("uri")
        extra = f" ({block['mimeType']})" if block.get("mimeType") else ""
        return f"[resource link: {label} <{block.get('uri')}>{extra}]"
    if kind == "resource":
        inner = block.get("resource") or {}
        return f"[resource {inner.get('uri')} ({inner.get('mimeType') or 'binary'}), not shown]"
    mime = block.get("mimeType") or "unknown type"
    return f"[{kind} ({mime}), not shown]"


def _text_of(block: Mapping[str, Any]) -> str | None:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "resource":
        inner = block.get("resource")
        if isinstance(inner, Mapping) and isinstance(inner.get("text"), str):
            return f"[resource {inner.get('uri')}]\n{inner['text']}"
    return None


def _blocks(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = result.get("content")
    blocks = [b for b in content if isinstance(b, Mapping)] if isinstance(content, list) else []
    has_text = any(b.get("type") == "text" for b in blocks)
    if "structuredContent" in result and not has_text:
        blocks.append({"type": "text", "text": json.dumps(result["structuredContent"])})
    return blocks


def anthropic_tool_result(result: Mapping[str, Any], tool_use_id: str) -> dict[str, Any]:
    """A `tool_result` content block for the next `user` message of the Messages API."""
    parts: list[dict[str, Any]] = []
    for block in _blocks(result):
        text = _text_of(block)
        if text is not None:
            parts.append({"type": "text", "text": text})
            continue
        data, mime = _binary(block)
        if data is not None and mime in _ANTHROPIC_IMAGES:
            parts.append({"type": "image",
                          "source": {"type": "base64", "media_type": mime, "data": data}})
        elif data is not None and mime == "application/pdf":
            parts.append({"type": "document",
                          "source": {"type": "base64", "media_type": mime, "data": data}})
        else:
            parts.append({"type": "text", "text": _note(block)})
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": parts}
    if result.get("isError"):
        out["is_error"] = True
    return out


def _binary(block: Mapping[str, Any]) -> tuple[str | None, str | None]:
    kind = block.get("type")
    if kind in ("image", "audio") and isinstance(block.get("data"), str):
        return block["data"], str(block.get("mimeType") or "")
    inner = block.get("resource")
    if kind == "resource" and isinstance(inner, Mapping) and isinstance(inner.get("blob"), str):
        return inner["blob"], str(inner.get("mimeType") or "")
    return None, None


def openai_tool_output(
    result: Mapping[str, Any], call_id: str, *, api: OpenAIApi = "chat",
) -> dict[str, Any]:
    """The answer to an OpenAI tool call: a Chat Completions `{"role": "tool", ...}`
    message (text only), or (`api="responses"`) a `function_call_output` input item whose
    output may hold `input_text`, `input_image` and `input_file` parts."""
    blocks = _blocks(result)
    prefix = "Error: " if result.get("isError") else ""
    if api == "chat":
        lines = [t if (t := _text_of(b)) is not None else _note(b) for b in blocks]
        return {"role": "tool", "tool_call_id": call_id, "content": prefix + "\n".join(lines)}
    parts: list[dict[str, Any]] = []
    for block in blocks:
        text = _text_of(block)
        data, mime = (None, None) if text is not None else _binary(block)
        if text is not None:
            parts.append({"type": "input_text", "text": text})
        elif data is not None and block.get("type") == "image":
            parts.append({"type": "input_image", "image_url": f"data:{mime};base64,{data}"})
        elif data is not None and block.get("type") == "resource":
            uri = str((block.get("resource") or {}).get("uri") or "file")
            parts.append({"type": "input_file", "filename": uri.rsplit("/", 1)[-1] or "file",
                          "file_data": f"data:{mime};base64,{data}"})
        else:
            parts.append({"type": "input_text", "text": _note(block)})
    if prefix:
        parts.insert(0, {"type": "input_text", "text": prefix.strip()})
    if all(p["type"] == "input_text" for p in parts):
        output: Any = prefix + "\n".join(p["text"] for p in parts if p["text"] != prefix.strip())
    else:
        output = parts
    return {"type": "function_call_output", "call_id": call_id, "output": output}
