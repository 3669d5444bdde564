"""Local stand-ins for the OpenAI and Anthropic HTTP APIs, for the sampling handlers'
tests: the real APIs cannot be reached from here, so these answer on a loopback port
with the shapes the SDKs parse, after checking each request the SDK sent against the
documented request shape (keys, roles, content parts, tool calls and results paired
with the calls before them, the key header). A request that breaks the shape is
answered 400 as the API would, and kept in `refused` for the test to see.

Answers come from `replies` (first in, first out), built with `openai_reply` or
`anthropic_reply`; with none queued the model echoes the last user text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

KEY = "test-key"


class Shape(Exception):
    """The request breaks the API's documented shape."""


def need(condition: object, why: str) -> None:
    if not condition:
        raise Shape(why)


class FakeApi:
    """One provider's stand-in: an ASGI app plus what it was asked and told to answer."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.refused: list[str] = []
        self.replies: list[dict[str, Any] | tuple[int, dict[str, Any]]] = []

    async def answer(self, request: Request, check: Any, default: Any) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        try:
            check(body, request.headers)
        except Shape as exc:
            self.refused.append(str(exc))
            return JSONResponse({"error": {"type": "invalid_request_error", "message": str(exc)}}, status_code=400)
        reply = self.replies.pop(0) if self.replies else default(body)
        if isinstance(reply, tuple):
            return JSONResponse(reply[1], status_code=reply[0])
        return JSONResponse(reply)


# -- OpenAI: POST /v1/chat/completions -----------------------------------------------------

OPENAI_KEYS = {"model", "messages", "max_completion_tokens", "temperature", "stop", "tools", "tool_choice"}


def check_openai(body: dict[str, Any], headers: Any) -> None:
    need(headers.get("authorization") == f"Bearer {KEY}", "missing or wrong bearer key")
    need(set(body) <= OPENAI_KEYS, f"unexpected keys {sorted(set(body) - OPENAI_KEYS)}")
    need(isinstance(body.get("model"), str) and body["model"], "model must be a string")
    need(isinstance(body.get("max_completion_tokens"), int) and body["max_completion_tokens"] > 0,
         "max_completion_tokens must be a positive integer")
    if "temperature" in body:
        need(isinstance(body["temperature"], int | float) and 0 <= body["temperature"] <= 2, "temperature 0..2")
    if "stop" in body:
        need(isinstance(body["stop"], list) and len(body["stop"]) <= 4, "stop: at most 4 sequences")
    for tool in body.get("tools", []):
        need(tool.get("type") == "function" and isinstance(tool.get("function", {}).get("name"), str)
             and isinstance(tool["function"].get("parameters"), dict), f"bad tool {tool}")
    if "tool_choice" in body:
        need(body["tool_choice"] in ("auto", "none", "required"), "bad tool_choice")
    messages = body.get("messages")
    need(isinstance(messages, list) and messages, "messages must be a non-empty list")
    open_calls: set[str] = set()
    for m in messages:
        role = m.get("role")
        need(role in ("system", "developer", "user", "assistant", "tool"), f"bad role {role!r}")
        if role == "tool":
            need(m.get("tool_call_id") in open_calls, f"tool message for unknown call {m.get('tool_call_id')!r}")
            need(isinstance(m.get("content"), str), "a tool message's content is text")
            open_calls.discard(m["tool_call_id"])
            continue
        need(not open_calls, f"tool calls {sorted(open_calls)} have no tool message")
        if role == "assistant":
            need(m.get("content") is None or isinstance(m["content"], str), "assistant content is text or null")
            for call in m.get("tool_calls", []):
                need(call.get("type") == "function" and isinstance(call.get("id"), str), f"bad tool call {call}")
                json.loads(call["function"]["arguments"])
                open_calls.add(call["id"])
            continue
        content = m.get("content")
        if isinstance(content, str):
            continue
        need(isinstance(content, list) and content, f"{role} content must be text or parts")
        need(role == "user", f"{role} content parts are text only")
        for part in content:
            kind = part.get("type")
            if kind == "text":
                need(isinstance(part.get("text"), str), "a text part has text")
            elif kind == "image_url":
                need(str(part.get("image_url", {}).get("url", "")).startswith("data:image/"), "an image is a data URL")
            elif kind == "input_audio":
                need(part.get("input_audio", {}).get("format") in ("wav", "mp3"), "audio is wav or mp3")
            else:
                raise Shape(f"unknown content part {kind!r}")
    need(not open_calls, f"tool calls {sorted(open_calls)} have no tool message")


def openai_reply(text: str | None = None, *, tool_calls: Sequence[tuple[str, str, dict[str, Any]]] = (),
                 finish: str = "stop", model: str = "gpt-test-1") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                                 for i, n, a in tool_calls]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def _openai_echo(body: dict[str, Any]) -> dict[str, Any]:
    last = next(m for m in reversed(body["messages"]) if m["role"] in ("user", "tool"))
    said = last["content"] if isinstance(last["content"], str) else " ".join(
        p.get("text", "") for p in last["content"])
    return openai_reply(f"echo: {said}", model=body["model"])


def openai_app(fake: FakeApi) -> Starlette:
    async def completions(request: Request) -> JSONResponse:
        return await fake.answer(request, check_openai, _openai_echo)

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


# -- Anthropic: POST /v1/messages -------------------------------------------------------------

ANTHROPIC_KEYS = {"model", "messages", "max_tokens", "system", "stop_sequences", "tools", "tool_choice"}
IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}


def _image(block: dict[str, Any]) -> None:
    source = block.get("source", {})
    need(source.get("type") == "base64" and source.get("media_type") in IMAGE_TYPES
         and isinstance(source.get("data"), str), f"bad image source {source}")


def check_anthropic(body: dict[str, Any], headers: Any) -> None:
    # Older SDKs send the key as x-api-key, newer ones as a bearer token.
    need(headers.get("x-api-key") == KEY or headers.get("authorization") == f"Bearer {KEY}",
         "missing or wrong API key")
    need(headers.get("anthropic-version"), "missing anthropic-version")
    need(set(body) <= ANTHROPIC_KEYS, f"unexpected keys {sorted(set(body) - ANTHROPIC_KEYS)}")
    need(isinstance(body.get("model"), str) and body["model"], "model must be a string")
    need(isinstance(body.get("max_tokens"), int) and body["max_tokens"] > 0, "max_tokens must be positive")
    if "system" in body:
        need(isinstance(body["system"], str), "system is text")
    for tool in body.get("tools", []):
        need(isinstance(tool.get("name"), str) and tool.get("input_schema", {}).get("type") == "object",
             f"bad tool {tool}")
    if "tool_choice" in body:
        need(body["tool_choice"].get("type") in ("auto", "any", "tool", "none"), "bad tool_choice")
    messages = body.get("messages")
    need(isinstance(messages, list) and messages and messages[0].get("role") == "user",
         "messages start with a user message")
    open_calls: set[str] = set()
    for m in messages:
        role = m.get("role")
        need(role in ("user", "assistant"), f"bad role {role!r}")
        content = m.get("content")
        if isinstance(content, str):
            continue
        need(isinstance(content, list) and content, "content is text or blocks")
        results = {b.get("tool_use_id") for b in content if b.get("type") == "tool_result"}
        need(results == open_calls, f"tool uses {sorted(open_calls)} answered by {sorted(results)}")
        open_calls = set()
        for block in content:
            kind = block.get("type")
            if kind == "text":
                need(isinstance(block.get("text"), str), "a text block has text")
            elif kind == "image":
                _image(block)
            elif kind == "tool_use":
                need(role == "assistant" and isinstance(block.get("input"), dict), "tool_use: assistant, input object")
                open_calls.add(block["id"])
            elif kind == "tool_result":
                need(role == "user", "tool_result comes from the user")
                for part in block.get("content", []):
                    if part.get("type") == "image":
                        _image(part)
                    else:
                        need(part.get("type") == "text", f"bad tool_result part {part}")
            else:
                raise Shape(f"unknown block {kind!r}")
    need(not open_calls, f"tool uses {sorted(open_calls)} are not answered")


def anthropic_reply(content: list[dict[str, Any]] | str, *, stop: str = "end_turn",
                    model: str = "claude-test-1") -> dict[str, Any]:
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": blocks,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}


def _anthropic_echo(body: dict[str, Any]) -> dict[str, Any]:
    last = body["messages"][-1]["content"]
    said = last if isinstance(last, str) else " ".join(b.get("text", "") for b in last if b.get("type") == "text")
    return anthropic_reply(f"echo: {said}", model=body["model"])


def anthropic_app(fake: FakeApi) -> Starlette:
    async def messages(request: Request) -> JSONResponse:
        return await fake.answer(request, check_anthropic, _anthropic_echo)

    return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])
