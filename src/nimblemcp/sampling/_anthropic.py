"""`sampling/createMessage` answered by Anthropic's Messages API (the `anthropic` SDK).

Request: `systemPrompt` is `system`; text, images (base64 JPEG, PNG, GIF or WebP),
tool uses and tool results map one to one onto the API's blocks (a tool result's text
and images kept, its other blocks as text); `maxTokens` is `max_tokens`,
`stopSequences` is `stop_sequences`, `tools` become tools with an `input_schema`, and
`toolChoice` auto/required/none becomes auto/any/none. `temperature` is sent only when
the installed SDK still takes it (recent ones dropped it). The API takes no audio: a
request with audio is refused before any request is made.

Result: the text and tool-use blocks of the message (thinking blocks are the model's
own); `stop_reason` end_turn/stop_sequence/max_tokens/tool_use becomes endTurn/
stopSequence/maxTokens/toolUse, any other (refusal, pause_turn...) is passed on as the
API says it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nimblemcp.sampling._common import blocks, refuse

__all__ = ["request", "result"]

PROVIDER = "Anthropic"
_IMAGES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_STOP = {"end_turn": "endTurn", "stop_sequence": "stopSequence", "max_tokens": "maxTokens", "tool_use": "toolUse"}
_CHOICE = {"auto": "auto", "required": "any", "none": "none"}


def request(params: Mapping[str, Any], model: str, *, temperature: bool) -> dict[str, Any]:
    """The keyword arguments of `messages.create` for one sampling request;
    `temperature`: whether the SDK takes that keyword."""
    messages = [{"role": "assistant" if m.get("role") == "assistant" else "user",
                 "content": [_block(b) for b in blocks(m)]} for m in params.get("messages") or ()]
    call: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": int(params["maxTokens"])}
    if params.get("systemPrompt"):
        call["system"] = str(params["systemPrompt"])
    if params.get("stopSequences"):
        call["stop_sequences"] = list(params["stopSequences"])
    if temperature and params.get("temperature") is not None:
        call["temperature"] = params["temperature"]
    if params.get("tools"):
        call["tools"] = [_tool(tool) for tool in params["tools"]]
    choice = params.get("toolChoice")
    if isinstance(choice, Mapping) and choice.get("mode") in _CHOICE:
        call["tool_choice"] = {"type": _CHOICE[choice["mode"]]}
    return call


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool["name"], "input_schema": tool.get("inputSchema") or {"type": "object"}}
    if tool.get("description"):
        out["description"] = tool["description"]
    return out


def _image(block: Mapping[str, Any]) -> dict[str, Any]:
    mime = str(block.get("mimeType", "")).lower()
    if mime not in _IMAGES:
        raise refuse(PROVIDER, f"an image of type {block.get('mimeType')!r} (the API takes JPEG, PNG, GIF, WebP)")
    return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": block["data"]}}


def _block(block: Mapping[str, Any]) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block["text"]}
    if kind == "image":
        return _image(block)
    if kind == "tool_use":
        return {"type": "tool_use", "id": block["id"], "name": block["name"], "input": block.get("input") or {}}
    if kind == "tool_result":
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block["toolUseId"],
                               "content": [_result_part(p) for p in block.get("content") or ()]}
        if block.get("isError"):
            out["is_error"] = True
        return out
    if kind == "audio":
        raise refuse(PROVIDER, "audio (the API takes none)")
    raise refuse(PROVIDER, f"a message block of type {kind!r}")


def _result_part(part: Mapping[str, Any]) -> dict[str, Any]:
    if part.get("type") == "text":
        return {"type": "text", "text": part["text"]}
    if part.get("type") == "image":
        return _image(part)
    resource = part.get("resource")
    if part.get("type") == "resource" and isinstance(resource, Mapping) and "text" in resource:
        return {"type": "text", "text": str(resource["text"])}
    return {"type": "text", "text": json.dumps(dict(part))}


def result(message: Mapping[str, Any]) -> dict[str, Any]:
    """A `CreateMessageResult` from a Messages API answer (its JSON form)."""
    content: list[dict[str, Any]] = []
    for block in message.get("content") or ():
        if block.get("type") == "text":
            content.append({"type": "text", "text": block.get("text", "")})
        elif block.get("type") == "tool_use":
            content.append({"type": "tool_use", "id": block["id"], "name": block["name"],
                            "input": block.get("input") or {}})
    out: dict[str, Any] = {"role": "assistant",
                           "content": content[0] if len(content) == 1 else content or {"type": "text", "text": ""},
                           "model": str(message.get("model") or "")}
    reason = message.get("stop_reason")
    if reason:
        out["stopReason"] = _STOP.get(reason, reason)
    return out
