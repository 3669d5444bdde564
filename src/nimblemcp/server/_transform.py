"""Derived tools: a new tool made from an existing one (`Server.derive_tool`).

The source may be a tool of this server, a mounted server's (by its name here) or a
proxied one's: the derived tool is built when its source is registered and rebuilt when
the source's definition changes (a proxy's mirror fills in after start-up), and it
calls the source as registered at the time of the call, also when the source itself is
no longer served (`hide_source=True`).

What can change: the name, title, description and annotations; each argument by an
`ArgChange`: renamed, described, given a default (then no longer required), or hidden
(gone from the schema; a fixed `value`, one `compute`d from the Context per call, or
else the source's own default is sent). `wrap` runs around the call: it gets the
Context, the arguments under the new names (checked against the derived schema, defaults
filled in) and `forward`, which sends arguments under the new names to the source and
returns the source's result; what `wrap` returns is the result (a result dict as
`forward` gives it, or anything a tool may return).

Scopes the source requires apply to the derived tool too (`_mount.rules_in_force`):
deriving never opens a way around `require_scopes`.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nimblemcp.errors import ToolError
from nimblemcp.server._context import Context
from nimblemcp.server._tools import ToolEntry, ToolResult

if TYPE_CHECKING:
    from nimblemcp.server._registry import Registry

__all__ = ["ArgChange", "Derivation", "derived_schema"]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()

Forward = Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]
Wrap = Callable[["Context", dict[str, Any], Forward], Any]


@dataclass(frozen=True)
class ArgChange:
    """How a derived tool changes one argument of its source:
    `ArgChange(name="query")`, `ArgChange(default=10)`, `ArgChange(hidden=True, value="eu")`,
    `ArgChange(hidden=True, compute=lambda ctx: ctx.principal.subject)`."""

    name: str | None = None
    description: str | None = None
    default: Any = UNSET
    hidden: bool = False
    value: Any = UNSET
    compute: Callable[[Context], Any] | None = None

    def __post_init__(self) -> None:
        if (self.value is not UNSET or self.compute is not None) and not self.hidden:
            raise ValueError("value= and compute= are for a hidden argument: add hidden=True")
        if self.value is not UNSET and self.compute is not None:
            raise ValueError("a hidden argument takes value= or compute=, not both")
        if self.hidden and (self.name is not None or self.default is not UNSET or self.description):
            raise ValueError("a hidden argument is not renamed, described or given a default")


def derived_schema(source: Mapping[str, Any], changes: Mapping[str, ArgChange],
                   tool: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The derived inputSchema, and new argument name -> source argument name."""
    schema = copy.deepcopy(dict(source))
    properties: dict[str, Any] = dict(schema.get("properties") or {})
    required = [r for r in schema.get("required") or [] if isinstance(r, str)]
    unknown = sorted(set(changes) - set(properties))
    if unknown:
        raise ValueError(f"deriving from tool {tool!r}: it has no argument {', '.join(map(repr, unknown))}")
    renamed: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for arg, spec in properties.items():
        change = changes.get(arg)
        if change is None:
            change = ArgChange()
        if change.hidden:
            needs_value = arg in required and "default" not in (spec if isinstance(spec, dict) else {})
            if needs_value and change.value is UNSET and change.compute is None:
                raise ValueError(f"deriving from tool {tool!r}: hidden argument {arg!r} is required "
                                 "and has no default: give value= or compute=")
            continue
        new = change.name or arg
        spec = dict(spec) if isinstance(spec, dict) else {}
        if change.description is not None:
            spec["description"] = change.description
        if change.default is not UNSET:
            spec["default"] = change.default
        if new in renamed:
            raise ValueError(f"deriving from tool {tool!r}: two arguments would be named {new!r}")
        renamed[new], sources[new] = spec, arg
    schema["properties"] = renamed
    new_required = []
    for new, arg in sources.items():
        change = changes.get(arg)
        if arg in required and (change is None or change.default is UNSET):
            new_required.append(new)
    if new_required:
        schema["required"] = new_required
    else:
        schema.pop("required", None)
    return schema, sources


@dataclass
class Derivation:
    """One `derive_tool` call: how to build the derived tool from its source."""

    source: str
    name: str
    title: str | None
    description: str | None
    annotations: Mapping[str, Any] | None
    args: Mapping[str, ArgChange]
    wrap: Wrap | None
    tags: frozenset[str] | None
    built_from: Any = None  # the source's definition the current entry was built from

    def build(self, registry: Registry, source: ToolEntry) -> ToolEntry:
        """The derived entry for `source` (its definition as published now)."""
        schema, sources = derived_schema(source.definition.get("inputSchema") or {"type": "object"},
                                         self.args, self.source)
        defaults = {new: self.args[arg].default for new, arg in sources.items()
                    if arg in self.args and self.args[arg].default is not UNSET}
        hidden = {arg: change for arg, change in self.args.items() if change.hidden}
        source_name, wrap = self.source, self.wrap

        async def forward_to(ctx: Context, arguments: Mapping[str, Any]) -> dict[str, Any]:
            sent = {sources[k]: v for k, v in arguments.items() if k in sources}
            for arg, change in hidden.items():
                if change.compute is not None:
                    value = change.compute(ctx)
                    sent[arg] = await value if inspect.isawaitable(value) else value
                elif change.value is not UNSET:
                    sent[arg] = change.value
            current = registry.tools.get(source_name)  # served or not: hide_source keeps it
            if current is None:
                raise ToolError(f"the tool {source_name!r} this tool calls is gone")
            result: dict[str, Any] = await current.invoke(ctx, sent)
            return result

        async def derived(ctx: Context, **arguments: Any) -> Any:
            arguments = {**defaults, **arguments}
            if wrap is None:
                return _as_tool_result(await forward_to(ctx, arguments))

            async def forward(given: Mapping[str, Any]) -> dict[str, Any]:
                return await forward_to(ctx, given)

            value = wrap(ctx, arguments, forward)
            if inspect.isawaitable(value):
                value = await value
            return _as_tool_result(value) if _is_result(value) else value

        derived.__name__ = self.name
        definition = {k: v for k, v in source.definition.items() if k not in ("name", "inputSchema")}
        entry = ToolEntry(derived, name=self.name, input_schema=schema, structured_output=False,
                          tags=source.tags if self.tags is None else self.tags)
        definition = {"name": self.name, **definition, "inputSchema": schema}
        for key, value in (("title", self.title), ("description", self.description),
                           ("annotations", self.annotations)):
            if value is not None:
                definition[key] = dict(value) if isinstance(value, Mapping) else value
        entry.definition = definition
        entry.one_time = source.one_time
        self.built_from = source.definition
        return entry


def _is_result(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("content"), list)


def _as_tool_result(result: Mapping[str, Any]) -> ToolResult:
    return ToolResult(result.get("content") or [], structured=result.get("structuredContent"),
                      is_error=bool(result.get("isError")), meta=result.get("_meta"))
