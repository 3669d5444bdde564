"""`completion/complete`: argument suggestions for prompts and resource templates (COMP-01..04).

A prompt or template argument can have its own completer (`complete={"arg": fn}`); the
server-wide `@server.completion` handler answers the rest. At most 100 values go out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nimblemcp.errors import InvalidParams

if TYPE_CHECKING:
    from nimblemcp.server._registry import Registry

_MAX_COMPLETIONS = 100


async def complete(registry: Registry, params: dict[str, Any]) -> dict[str, Any]:
    ref = params.get("ref")
    argument = params.get("argument")
    if not isinstance(ref, dict) or not isinstance(argument, dict):
        raise InvalidParams("completion/complete needs 'ref' and 'argument' objects")
    arg_name = argument.get("name")  # type: ignore[union-attr]
    value = argument.get("value", "")  # type: ignore[union-attr]
    if not isinstance(arg_name, str) or not isinstance(value, str):
        raise InvalidParams("argument needs string 'name' and 'value'")
    context = params.get("context")
    context_args: dict[str, str] = {}
    if isinstance(context, dict) and isinstance(context.get("arguments"), dict):  # type: ignore[union-attr]
        context_args = context["arguments"]  # type: ignore[index]
    completer: Callable[..., Any] | None = None
    ref_type = ref.get("type")  # type: ignore[union-attr]
    if ref_type == "ref/prompt":
        prompt = registry.served.prompts.get(ref.get("name"))  # type: ignore[union-attr, arg-type]
        if prompt is None:
            raise InvalidParams(f"Unknown prompt: {ref.get('name')}")  # type: ignore[union-attr]
        completer = prompt.completers.get(arg_name)
    elif ref_type == "ref/resource":
        uri = ref.get("uri")  # type: ignore[union-attr]
        template = registry.served.templates.get(uri)  # type: ignore[arg-type]
        if template is not None:
            completer = template.completers.get(arg_name)
        elif uri not in registry.served.resources:
            raise InvalidParams(f"Unknown resource or template: {uri}")
    else:
        raise InvalidParams("ref.type must be 'ref/prompt' or 'ref/resource'")
    values: Any = []
    if completer is not None:
        values = completer(value, context_args)
    elif registry.completer is not None:
        values = registry.completer(ref, arg_name, value, context_args)
    if asyncio.iscoroutine(values):
        values = await values
    return {"resultType": "complete", "completion": _completion(values)}


def _completion(values: Any) -> dict[str, Any]:
    if isinstance(values, dict):
        out = dict(values)  # type: ignore[arg-type]
        items = [str(v) for v in out.get("values", [])]
    else:
        out = {}
        items = [str(v) for v in values or []]
    total = out.get("total", len(items))
    completion: dict[str, Any] = {"values": items[:_MAX_COMPLETIONS], "total": total}
    completion["hasMore"] = bool(out.get("hasMore", len(items) > _MAX_COMPLETIONS))
    return completion
