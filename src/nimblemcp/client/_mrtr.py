"""Answering a round of `inputRequests` with the user's callbacks (MRTR-06..09, 17).

`answer_round` runs one callback per input request, all concurrently, and returns the
`inputResponses` map; a callback that raises aborts the round (and the loop). Callbacks
may be sync or async. Elicitation answers get the schema's defaults for fields the
user left out (ELIC-03). Must not import transports or the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from nimblemcp._loop import maybe_await
from nimblemcp.errors import InputRequestRefused

__all__ = [
    "Callback",
    "InputRequestRefused",
    "answer_round",
    "capabilities_for",
    "fill_defaults",
]

Callback = Callable[[dict[str, Any]], Any | Awaitable[Any]]

_METHOD_TO_CALLBACK = {
    "elicitation/create": "elicit",
    "sampling/createMessage": "sample",
    "roots/list": "roots",
}


def capabilities_for(
    callbacks: Mapping[str, Callback | None],
    *,
    elicitation_modes: tuple[str, ...] = ("form",),
    sampling: Mapping[str, Any] | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """clientCapabilities derived from the registered callbacks (ELIC-01, SAMP-01, ROOTS-01)."""
    caps: dict[str, Any] = {}
    if callbacks.get("elicit") is not None:
        caps["elicitation"] = {mode: {} for mode in elicitation_modes}
    if callbacks.get("sample") is not None:
        caps["sampling"] = dict(sampling or {})
    if callbacks.get("roots") is not None:
        caps["roots"] = {}
    if extensions:
        caps["extensions"] = dict(extensions)
    return caps


def fill_defaults(schema: Any, content: Any) -> Any:
    """Add `default` values from a flat form schema for properties left unanswered."""
    if not isinstance(schema, dict) or not isinstance(content, dict):
        return content
    props = schema.get("properties")
    if not isinstance(props, dict):
        return content
    filled = dict(content)
    for name, prop in props.items():
        if name not in filled and isinstance(prop, dict) and "default" in prop:
            filled[name] = prop["default"]
    return filled


async def _call(callback: Callback, params: dict[str, Any]) -> Any:
    return await maybe_await(callback(params))


def _shape(method: str, params: dict[str, Any], answer: Any) -> dict[str, Any]:
    if hasattr(answer, "model_dump"):  # a pydantic model from the user
        answer = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
    if method == "roots/list":
        if isinstance(answer, list):
            answer = {"roots": answer}
        if not isinstance(answer, dict) or not isinstance(answer.get("roots"), list):
            raise InputRequestRefused("on_roots must return a list of roots or {'roots': [...]}")
        return dict(answer)
    if method == "sampling/createMessage":
        if isinstance(answer, str):
            answer = {"role": "assistant", "content": {"type": "text", "text": answer},
                      "model": "unknown", "stopReason": "endTurn"}
        if not isinstance(answer, dict):
            raise InputRequestRefused("on_sample must return a CreateMessageResult dict")
        return dict(answer)
    # elicitation/create
    if answer is None:
        return {"action": "decline"}
    if not isinstance(answer, dict):
        raise InputRequestRefused("on_elicit must return an ElicitResult dict or None")
    if "action" not in answer:  # plain content: the user accepted
        answer = {"action": "accept", "content": answer}
    if answer.get("action") == "accept" and params.get("mode", "form") == "form":
        answer = dict(answer)
        answer["content"] = fill_defaults(params.get("requestedSchema"), answer.get("content") or {})
    return dict(answer)


async def answer_round(
    input_requests: Mapping[str, Any], callbacks: Mapping[str, Callback | None]
) -> dict[str, Any]:
    """Answer every input request of one round concurrently (MRTR-06, MRTR-17)."""

    async def one(key: str, request: Any) -> tuple[str, dict[str, Any]]:
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            raise InputRequestRefused(f"input request {key!r} is malformed")
        method = request["method"]
        params = request.get("params") or {}
        slot = _METHOD_TO_CALLBACK.get(method)
        callback = callbacks.get(slot) if slot else None
        if callback is None:
            raise InputRequestRefused(f"the server asked for {method} ({key!r}) "
                                      "and no callback handles it")
        return key, _shape(method, params, await _call(callback, params))

    tasks = [asyncio.ensure_future(one(k, r)) for k, r in input_requests.items()]
    try:
        pairs = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    return dict(pairs)
