"""Tools: a registered function, its precomputed `Tool` definition, and the call path.

Schemas, validators and the wire definition are built once at registration. A call
validates arguments, runs the function by the policy of `_invoke` (async on the
loop, sync in a worker thread) and turns what it returned into a `CallToolResult`.
Failures inside the tool become `isError: true` results (TOOL-08); protocol problems
are raised to the dispatcher.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import orjson

from nimblemcp.content import is_content_block, text
from nimblemcp.errors import InvalidToolHeaders, ToolError
from nimblemcp.server._invoke import Invocable
from nimblemcp.server._schema import (
    ArgumentError,
    ArgumentSpec,
    OutputSpec,
    build_arguments,
    build_output,
    parse_docstring,
    verbatim_arguments,
)
from nimblemcp.types._tool_headers import header_rules

if TYPE_CHECKING:
    from nimblemcp.server._context import Context

logger = logging.getLogger("nimblemcp.server")

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")


class ToolAnnotations(TypedDict, total=False):
    """Hints about a tool's behaviour (TOOL-09); clients treat them as untrusted."""

    title: str
    readOnlyHint: bool
    destructiveHint: bool
    idempotentHint: bool
    openWorldHint: bool


class Icon(TypedDict, total=False):
    src: str
    mimeType: str
    sizes: list[str]
    theme: str


class ToolResult:
    """Full control over a tool's result: content, structured content, error flag."""

    __slots__ = ("content", "is_error", "meta", "structured")

    def __init__(
        self,
        content: Sequence[Any] | str | None = None,
        *,
        structured: Any = None,
        is_error: bool = False,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.content = content
        self.structured = structured
        self.is_error = is_error
        self.meta = meta


def _as_blocks(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [text(value)]
    if is_content_block(value):
        return [value]
    if isinstance(value, list | tuple) and all(
        isinstance(v, str) or is_content_block(v) for v in value  # type: ignore[union-attr]
    ):
        return [text(v) if isinstance(v, str) else v for v in value]  # type: ignore[union-attr]
    return [text(orjson.dumps(value, default=_json_default).decode())]


def _json_default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)  # type: ignore[arg-type]
    return str(value)


def error_result(message: str) -> dict[str, Any]:
    return {"resultType": "complete", "content": [text(message)], "isError": True}


class ToolEntry(Invocable):
    """One registered tool."""

    __slots__ = (
        "arguments",
        "defer_task",
        "definition",
        "header_rules",
        "name",
        "one_time",
        "output",
        "task",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        structured_output: bool | None = None,
        meta: dict[str, Any] | None = None,
        one_time: bool = False,
        run_in_thread: bool = True,
        input_schema: dict[str, Any] | None = None,
        task: str | None = None,
        defer_task: bool = False,
    ) -> None:
        if task not in (None, "optional", "required"):
            raise ValueError("task must be None, 'optional' or 'required'")
        self.task = task  # tasks extension support (TASK-02/03)
        self.defer_task = defer_task  # becomes a task only at ctx.as_task()
        self.one_time = one_time  # its requestState may be used once only (MRTR-13)
        self.name = name or fn.__name__
        if not _TOOL_NAME.match(self.name):
            raise ValueError(
                f"tool name {self.name!r} must be 1-128 characters of A-Z a-z 0-9 _ - . (TOOL-10)"
            )
        summary, arg_docs = parse_docstring(fn.__doc__)
        self.arguments: ArgumentSpec = (
            build_arguments(fn, arg_docs) if input_schema is None
            else verbatim_arguments(fn, input_schema)
        )
        self.output: OutputSpec | None = None if structured_output is False else build_output(fn)
        if structured_output and self.output is None:
            raise TypeError(f"tool {self.name!r}: structured_output needs a structured return type")
        self._set_fn(fn, self.arguments.context_param, self.arguments.validate, run_in_thread)
        definition: dict[str, Any] = {"name": self.name}
        if title:
            definition["title"] = title
        desc = description if description is not None else summary
        if desc:
            definition["description"] = desc
        if icons:
            definition["icons"] = icons
        definition["inputSchema"] = self.arguments.schema
        if self.output is not None:
            definition["outputSchema"] = self.output.schema
        if annotations:
            definition["annotations"] = annotations
        if meta:
            definition["_meta"] = meta
        self.definition = definition
        try:  # TOOL-11, the same strict walk as the client's: publish no tool it would drop
            self.header_rules = tuple(header_rules(definition))
        except InvalidToolHeaders as exc:
            raise InvalidToolHeaders(f"tool {self.name!r}: {exc}") from None

    def failed(self, exc: Exception) -> dict[str, Any]:
        if isinstance(exc, ArgumentError):
            return error_result(f"Invalid arguments for tool {self.name}: {exc}")
        if isinstance(exc, ToolError):
            return error_result(str(exc) or f"Tool {self.name} failed")
        # The model sees that the tool failed and why, so it can adapt (TOOL-08);
        # the traceback goes to the server log only.
        logger.exception("tool %s raised", self.name)
        return error_result(f"Tool {self.name} failed: {type(exc).__name__}: {exc}")

    if TYPE_CHECKING:
        async def call(self, ctx: Context, arguments: dict[str, Any]) -> dict[str, Any]: ...
    else:
        call = Invocable.invoke  # the dispatcher's entry: no extra frame

    def to_result(self, value: Any) -> dict[str, Any]:
        if type(value) is str and self.output is None:  # the common case, built directly
            return {"resultType": "complete", "content": [{"type": "text", "text": value}]}
        if isinstance(value, ToolResult):
            return self._explicit(value)
        if self.output is None:
            return {"resultType": "complete", "content": _as_blocks(value)}
        structured = self.output.dump(value)
        if self.output.wrap:
            structured = {"result": structured}
        return {
            "resultType": "complete",
            "content": [text(orjson.dumps(structured).decode())],  # TOOL-06
            "structuredContent": structured,
        }

    finish = to_result

    def _explicit(self, value: ToolResult) -> dict[str, Any]:
        result: dict[str, Any] = {"resultType": "complete"}
        structured = value.structured
        if structured is not None and self.output is not None and not value.is_error:
            structured = self.output.dump(structured)
        if value.content is None and structured is not None:
            result["content"] = [text(orjson.dumps(structured, default=_json_default).decode())]
        else:
            result["content"] = _as_blocks(value.content)
        if structured is not None:
            result["structuredContent"] = structured
        if value.is_error:
            result["isError"] = True
        if value.meta:
            result["_meta"] = value.meta
        return result
