"""Prompts: a function whose string arguments fill a list of messages."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, Literal

from nimblemcp.content import is_content_block, text
from nimblemcp.errors import InvalidParams
from nimblemcp.server._context import context_param
from nimblemcp.server._depends import injected_params
from nimblemcp.server._docstrings import parse_docstring
from nimblemcp.server._invoke import Invocable
from nimblemcp.server._visibility import tag_set

Role = Literal["user", "assistant"]


def message(role: Role, content: Any) -> dict[str, Any]:
    """One prompt message; `content` is a block or a string (becomes a text block)."""
    return {"role": role, "content": text(content) if isinstance(content, str) else content}


def user(content: Any) -> dict[str, Any]:
    """A prompt message from the user: `return [user("Review this:"), user(embedded(...))]`."""
    return message("user", content)


def assistant(content: Any) -> dict[str, Any]:
    """A prompt message from the assistant, e.g. the start of an answer to continue."""
    return message("assistant", content)


def _to_messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str) or is_content_block(value):
        return [user(value)]
    if isinstance(value, dict) and "role" in value:
        return [value]  # type: ignore[list-item]
    if isinstance(value, list | tuple):
        out: list[dict[str, Any]] = []
        for item in value:  # type: ignore[union-attr]
            out.extend(_to_messages(item))
        return out
    raise TypeError("a prompt must return a string, content blocks or messages")


class PromptEntry(Invocable):
    """One registered prompt; runs by the policy of `_invoke`."""

    __slots__ = ("completers", "definition", "name", "names", "required")

    def __init__(
        self, fn: Callable[..., Any], *, name: str | None = None, title: str | None = None,
        description: str | None = None, icons: list[dict[str, Any]] | None = None,
        meta: dict[str, Any] | None = None,
        complete: dict[str, Callable[..., Any]] | None = None,
        tags: Iterable[str] | None = None,
    ) -> None:
        self.name = name or fn.__name__
        self._set_fn(fn, context_param(fn), self._bind)
        self.tags = tag_set(tags)
        summary, arg_docs = parse_docstring(fn.__doc__)
        args: list[dict[str, Any]] = []
        required: list[str] = []
        injected = injected_params(fn)  # the Context and provider-resolved parameters
        for p in inspect.signature(fn).parameters.values():
            if p.name == self.ctx_param or p.name in injected:
                continue
            arg: dict[str, Any] = {"name": p.name}
            if p.name in arg_docs:
                arg["description"] = arg_docs[p.name]
            is_required = p.default is inspect.Parameter.empty
            arg["required"] = is_required
            if is_required:
                required.append(p.name)
            args.append(arg)
        self.required = tuple(required)
        self.names = frozenset(a["name"] for a in args)
        self.completers = dict(complete or {})
        d: dict[str, Any] = {"name": self.name}
        if title:
            d["title"] = title
        desc = description if description is not None else summary
        if desc:
            d["description"] = desc
        if args:
            d["arguments"] = args
        if icons:
            d["icons"] = icons
        if meta:
            d["_meta"] = meta
        self.definition = d

    def _bind(self, arguments: Any) -> dict[str, Any]:
        # One loop, no generator or comprehension frames; the checks in this order:
        # every value a string, then the required names, then the known ones kept.
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            raise InvalidParams("prompt arguments must be an object of strings")
        names = self.names
        kept: dict[str, Any] = {}
        for k, v in arguments.items():  # type: ignore[union-attr]
            if not isinstance(v, str):
                raise InvalidParams("prompt arguments must be an object of strings")
            if k in names:
                kept[k] = v
        for n in self.required:
            if n not in arguments:
                missing = [n for n in self.required if n not in arguments]
                raise InvalidParams(f"Missing required argument(s) for prompt {self.name}: {', '.join(missing)}")
        return kept

    def finish(self, value: Any) -> dict[str, Any]:
        result: dict[str, Any] = {"resultType": "complete"}
        if "description" in self.definition:
            result["description"] = self.definition["description"]
        # A plain string, the common case, is one user message (what `_to_messages` makes).
        result["messages"] = [{"role": "user", "content": {"type": "text", "text": value}}] \
            if type(value) is str else _to_messages(value)
        return result
