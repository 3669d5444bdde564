"""`sampling/createMessage` answered by OpenAI's Chat Completions API (the `openai` SDK).

Request: `systemPrompt` becomes a leading system message; user text, images (a data
URL) and audio (`input_audio`, WAV or MP3) become content parts; an assistant's
`tool_use` blocks become its `tool_calls`; a user's `tool_result` blocks become one
`tool` message each (text only, as the API takes); `maxTokens` is
`max_completion_tokens`, `stopSequences` is `stop`, `temperature` passes through, `tools`
become function tools and `toolChoice` auto/none/required the same words.

Result: the text and the tool calls of the first choice (a tool call's JSON arguments
become its `input`); `finish_reason` stop/length/tool_calls becomes endTurn/maxTokens/
toolUse, any other is passed on as OpenAI says it. The API cannot tell a stop sequence
from a natural end: both come back as endTurn. What the API cannot take (audio other
than WAV or MP3, an image in an assistant message) is refused before any request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nimblemcp.sampling._common import blocks, refuse, tool_result_text

__all__ = ["request", "result"]

PROVIDER = "OpenAI"
_AUDIO = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}
_STOP = {"stop": "endTurn", "length": "maxTokens", "tool_calls": "toolUse", "function_call": "toolUse"}


def request(params: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The keyword arguments of `chat.completions.create` for one sampling request."""
    messages: list[dict[str, Any]] = []
    if params.get("systemPrompt"):
        messages.append({"role": "system", "content": str(params["systemPrompt"])})
    for message in params.get("messages") or ():
        if message.get("role") == "assistant":
            messages.append(_assistant(blocks(message)))
        else:
            messages.extend(_user(blocks(message)))
    call: dict[str, Any] = {"model": model, "messages": messages,
                            "max_completion_tokens": int(params["maxTokens"])}
    if params.get("temperature") is not None:
        call["temperature"] = params["temperature"]
    if params.get("stopSequences"):
        call["stop"] = list(params["stopSequences"])
    if params.get("tools"):
        call["tools"] = [{"type": "function", "function": _function(tool)} for tool in params["tools"]]
    choice = params.get("toolChoice")
    if isinstance(choice, Mapping) and choice.get("mode") in ("auto", "none", "required"):
        call["tool_choice"] = choice["mode"]
    return call


def _function(tool: Mapping[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool["name"], "parameters": tool.get("inputSchema") or {"type": "object"}}
    if tool.get("description"):
        function["description"] = tool["description"]
    return function


def _user(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    results = [b for b in content if b.get("type") == "tool_result"]
    if results:  # tool results travel as `tool` messages of their own
        return [{"role": "tool", "tool_call_id": b["toolUseId"], "content": tool_result_text(b)} for b in results]
    parts = [_part(b) for b in content]
    if len(parts) == 1 and parts[0]["type"] == "text":
        return [{"role": "user", "content": parts[0]["text"]}]
    return [{"role": "user", "content": parts}]


def _part(block: Mapping[str, Any]) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block["text"]}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": f"data:{block['mimeType']};base64,{block['data']}"}}
    if kind == "audio":
        audio_format = _AUDIO.get(str(block.get("mimeType", "")).lower())
        if audio_format is None:
            raise refuse(PROVIDER, f"audio of type {block.get('mimeType')!r} (the API takes WAV or MP3)")
        return {"type": "input_audio", "input_audio": {"data": block["data"], "format": audio_format}}
    raise refuse(PROVIDER, f"a user message block of type {kind!r}")


def _assistant(content: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant"}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        if block.get("type") == "text":
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"], "arguments": json.dumps(block.get("input") or {})}})
        else:
            raise refuse(PROVIDER, f"an assistant message block of type {block.get('type')!r} (text and tool "
                                   "calls only)")
    message["content"] = "".join(texts) if texts else None
    if calls:
        message["tool_calls"] = calls
    return message


def result(completion: Mapping[str, Any]) -> dict[str, Any]:
    """A `CreateMessageResult` from a chat completion (its JSON form)."""
    choices = completion.get("choices") or []
    if not choices:
        raise refuse(PROVIDER, "the API answered no choice")
    choice = choices[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    said = message.get("content") or message.get("refusal")
    if said:
        content.append({"type": "text", "text": said})
    for call in message.get("tool_calls") or ():
        if call.get("type", "function") != "function":
            continue
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            raise refuse(PROVIDER, f"the model called {function.get('name')!r} with arguments that are not "
                                   "JSON") from None
        content.append({"type": "tool_use", "id": call["id"], "name": function.get("name", ""),
                        "input": arguments if isinstance(arguments, dict) else {"value": arguments}})
    reason = choice.get("finish_reason")
    out: dict[str, Any] = {"role": "assistant",
                           "content": content[0] if len(content) == 1 else content or {"type": "text", "text": ""},
                           "model": str(completion.get("model") or "")}
    if reason:
        out["stopReason"] = _STOP.get(reason, reason)
    return out
