"""Tools: a registered function, its precomputed `Tool` definition, and the call path.

Schemas, validators and the wire definition are built once at registration. A call
validates arguments, runs the function by the policy of `_invoke` (async on the
loop, sync in a worker thread) and turns what it returned into a `CallToolResult`.
Failures inside the tool become `isError: true` results (TOOL-08); protocol problems
are raised to the dispatcher.

Hardening (issue 12): an unexpected exception is masked by default: the traceback is
logged with a short reference id and the model sees only that id (`ToolError`
messages pass through; `ToolOptions(mask_errors=False)` shows details in
development). `structuredContent` is checked against the tool's own `outputSchema`
(a check built once at registration: the simple validators for plain hints, a
confined jsonschema validator otherwise) and a mismatch answers `isError` saying why.
"""

from __future__ import annotations

import logging
import os
import re
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import orjson

from nimblemcp.content import block_from_model, is_content_block, text
from nimblemcp.errors import InvalidToolHeaders, ToolError
from nimblemcp.server._context import type_hints
from nimblemcp.server._hints import is_simple, simple_validator
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
from nimblemcp.server._visibility import tag_set
from nimblemcp.types._tool_headers import header_rules

if TYPE_CHECKING:
    from nimblemcp.server._options import ToolOptions

# (the raw return value, its structuredContent) -> None when it fits the outputSchema,
# else why not.
OutputCheck = Callable[[Any, Any], "str | None"]

logger = logging.getLogger("nimblemcp.server")

_dumps = orjson.dumps
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
    # Content-block models (the official SDK's TextContent, ImageContent, ...) are content
    # too, not data to serialise: a tool ported from another SDK keeps its meaning.
    items: Any = value if isinstance(value, list | tuple) else (value,)
    blocks = [_one_block(v) for v in items]
    if blocks and all(b is not None for b in blocks):
        return blocks
    return [text(orjson.dumps(value, default=_json_default).decode())]


def _block_list(value: Any) -> list[Any] | None:
    """A non-empty list (or tuple) whose every item is a content block, as wire blocks;
    None for anything else (data, or a mix of blocks and data)."""
    if type(value) not in (list, tuple) or not value:
        return None
    blocks = [v if is_content_block(v) else block_from_model(v) for v in value]
    return blocks if all(b is not None for b in blocks) else None


def _one_block(value: Any) -> Any:
    if isinstance(value, str):
        return text(value)
    if is_content_block(value):
        return value
    return block_from_model(value)


def _json_default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)  # type: ignore[arg-type]
    return str(value)


def error_result(message: str) -> dict[str, Any]:
    return {"resultType": "complete", "content": [text(message)], "isError": True}


def output_check(fn: Callable[..., Any], output: OutputSpec, name: str) -> OutputCheck:
    """The check of a tool's structuredContent against its own outputSchema, built once."""
    tp = type_hints(fn).get("return")
    if typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    built: list[Any] = []

    def exact(structured: Any) -> str | None:
        if not built:
            from nimblemcp.server._refs import build_validator

            built.append(build_validator(output.schema, f"tool {name!r}: outputSchema"))
        return _first_error(built[0], structured)

    if is_simple(tp):
        check = simple_validator(tp)
        wrap = output.wrap

        def simple(value: Any, structured: Any) -> str | None:
            try:
                check(structured["result"] if wrap else structured, "structuredContent")
            except ArgumentError:
                # The quick check is strict about Python types (an Enum member where
                # its value is expected): the exact schema on the JSON form decides.
                return exact(orjson.loads(orjson.dumps(structured, default=_json_default)))
            return None

        return simple

    def general(value: Any, structured: Any) -> str | None:
        if type(value) is tp:  # a model instance: pydantic already holds it to its schema
            return None
        return exact(structured)

    return general


def _first_error(validator: Any, instance: Any) -> str | None:
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return None
    where = ".".join(str(x) for x in error.absolute_path) or "structuredContent"
    return f"{where}: {error.message}"


class ToolEntry(Invocable):
    """One registered tool."""

    __slots__ = (
        "arguments",
        "check_output",
        "defer_task",
        "definition",
        "header_rules",
        "mask_errors",
        "name",
        "one_time",
        "output",
        "scalar",
        "schema_validator",
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
        tags: Iterable[str] | None = None,
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
        self.output: OutputSpec | None = None if structured_output is False else build_output(fn, (ToolResult,))
        if structured_output and self.output is None:
            raise TypeError(f"tool {self.name!r}: structured_output needs a structured return type")
        self.check_output: OutputCheck | None = (
            None if self.output is None else output_check(fn, self.output, self.name))
        self.mask_errors = True
        self.schema_validator: Any = None
        self._set_fn(fn, self.arguments.context_param, self.arguments.validate, run_in_thread)
        self.tags = tag_set(tags)
        # A plain `int`, `float` or `bool` return: a value of exactly that type is its
        # own structured form and always fits the schema (`to_result` skips both steps).
        self.scalar: type | None = None
        if self.output is not None and self.output.wrap:
            hint = type_hints(fn).get("return")
            if hint is int or hint is float or hint is bool:
                self.scalar = hint
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
        # The model sees that the tool failed (TOOL-08); what went wrong may hold
        # secrets or server paths, so it goes to the log under a reference id only.
        ref = os.urandom(4).hex()
        logger.error("tool %s raised [ref %s]", self.name, ref, exc_info=exc)
        if self.mask_errors:
            return error_result(
                f"Tool {self.name} failed with an unexpected error (reference {ref}); "
                "the details are in the server log.")
        return error_result(f"Tool {self.name} failed: {type(exc).__name__}: {exc} (reference {ref})")

    def configure(self, options: ToolOptions) -> None:
        """Apply the server's tool options (called when the tool is registered)."""
        self.mask_errors = options.mask_errors
        if not options.validate_output:
            self.check_output = None

    def _mismatch(self, why: str) -> dict[str, Any]:
        logger.error("tool %s returned structuredContent that breaks its outputSchema: %s", self.name, why)
        return error_result(f"Tool {self.name} returned a result that does not match its outputSchema: {why}")

    def to_result(self, value: Any) -> dict[str, Any]:
        if type(value) is str and self.output is None:  # the common case, built directly
            return {"resultType": "complete", "content": [{"type": "text", "text": value}]}
        if type(value) is self.scalar:
            structured = {"result": value}
            return {
                "resultType": "complete",
                "content": [{"type": "text", "text": _dumps(structured).decode()}],  # TOOL-06
                "structuredContent": structured,
            }
        if isinstance(value, ToolResult):
            return self._explicit(value)
        if self.output is None:
            return {"resultType": "complete", "content": _as_blocks(value)}
        structured = self.output.dump(value)
        if self.output.wrap:
            structured = {"result": structured}
        if self.check_output is not None:
            why = self.check_output(value, structured)
            if why is not None:
                return self._mismatch(why)
        blocks = _block_list(value) if self.output.wrap else None
        return {
            "resultType": "complete",
            # TOOL-06: the structured result's text, unless it is a list of content blocks
            # (`-> list`): those are what the model should see, as the peers send them.
            "content": blocks if blocks is not None else [text(orjson.dumps(structured).decode())],
            "structuredContent": structured,
        }

    finish = to_result

    def _general_validator(self) -> Any:
        if self.schema_validator is None:
            from nimblemcp.server._refs import build_validator

            assert self.output is not None
            self.schema_validator = build_validator(self.output.schema, f"tool {self.name!r}: outputSchema")
        return self.schema_validator

    def _explicit(self, value: ToolResult) -> dict[str, Any]:
        result: dict[str, Any] = {"resultType": "complete"}
        structured = value.structured
        if structured is not None and self.output is not None and not value.is_error:
            structured = self.output.dump(structured)
            if self.check_output is not None:  # the rare explicit path: the full schema
                why = _first_error(self._general_validator(), structured)
                if why is not None:
                    return self._mismatch(why)
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
