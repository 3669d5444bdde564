"""JSON Schemas and argument validators built from type hints, once, at registration.

Plain hints (str, int, float, bool, None, list/dict/tuple of those, Optional, Union,
Literal, Enum, Any) get a small hand-built schema and validator, so a server made of
such tools never imports pydantic and starts fast. Pydantic models, TypedDicts,
dataclasses and `Annotated[..., Field(...)]` go through pydantic (imported lazily).
Must not import transports, the client or the server registry.
"""

from __future__ import annotations

import enum
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

from nimblemcp.server._context import is_context, type_hints
from nimblemcp.server._depends import injected_params
from nimblemcp.server._docstrings import parse_docstring
from nimblemcp.server._hints import (
    ArgumentError,
    NoneType,
    Validator,
    is_simple,
    simple_schema,
    simple_validator,
)

__all__ = [
    "ArgumentError",
    "ArgumentSpec",
    "OutputSpec",
    "build_arguments",
    "build_output",
    "parse_docstring",
    "verbatim_arguments",
]

# --- whole signatures -------------------------------------------------------------

# Hints whose validator returns a value of exactly that type as it is (see `_hints`).
_EXACT = (str, bool, int, float)
_ABSENT: Any = object()  # an argument the call did not send
_REQUIRED: Any = object()  # the default of a parameter without one


class ArgumentSpec:
    """Input schema + validator for one function, built once."""

    __slots__ = ("context_param", "names", "schema", "validate")

    def __init__(
        self,
        schema: dict[str, Any],
        validate: Callable[[dict[str, Any]], dict[str, Any]],
        names: tuple[str, ...],
        context_param: str | None,
    ) -> None:
        self.schema = schema
        self.validate = validate
        self.names = names
        self.context_param = context_param


def build_arguments(fn: Callable[..., Any], arg_docs: Mapping[str, str]) -> ArgumentSpec:
    """Inspect `fn` and build its `inputSchema` and argument validator."""
    sig = inspect.signature(fn)
    hints = type_hints(fn)
    injected = injected_params(fn)
    context_param: str | None = None
    fields: list[tuple[str, Any, Any]] = []  # name, hint, default (inspect.Parameter.empty)
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{fn.__name__}: *args/**kwargs cannot be tool arguments")
        hint = hints.get(p.name, Any)
        if is_context(hint):
            context_param = p.name
            continue
        if p.name in injected:  # resolved by a provider (`_depends`): not an argument
            continue
        fields.append((p.name, hint, p.default))
    names = tuple(f[0] for f in fields)
    if all(is_simple(h) for _, h, _ in fields):
        return _simple_arguments(fields, arg_docs, names, context_param)
    return _pydantic_arguments(fn, fields, arg_docs, names, context_param)


def verbatim_arguments(fn: Callable[..., Any], schema: dict[str, Any]) -> ArgumentSpec:
    """Use a hand-written `inputSchema` as given (any JSON Schema 2020-12, TOOL-03;
    the other dialects of `_refs.DIALECTS` when `$schema` names one).

    Arguments are validated against it with jsonschema (validator built once) and
    passed by name: to the function's matching parameters, or all of them when it
    takes `**kwargs`.
    """
    if not isinstance(schema, dict) or schema.get("type") != "object":  # type: ignore[redundant-expr]
        raise TypeError("input_schema must be a JSON Schema object with type 'object'")
    import jsonschema

    from nimblemcp.server._refs import build_validator

    # Dialect named and supported, no reference outside the schema (SCHEMA-01/02).
    checker = build_validator(schema, f"{getattr(fn, '__name__', 'tool')}: input_schema")
    context_param: str | None = None
    takes_all = False
    names: list[str] = []
    hints = type_hints(fn)
    injected = injected_params(fn)
    for p in inspect.signature(fn).parameters.values():
        if is_context(hints.get(p.name, Any)):
            context_param = p.name
        elif p.name in injected:
            continue
        elif p.kind is p.VAR_KEYWORD:
            takes_all = True
        elif p.kind is not p.VAR_POSITIONAL:
            names.append(p.name)

    def validate(arguments: dict[str, Any]) -> dict[str, Any]:
        error = jsonschema.exceptions.best_match(checker.iter_errors(arguments))
        if error is not None:
            where = ".".join(str(x) for x in error.absolute_path) or "arguments"
            raise ArgumentError(f"{where}: {error.message}")
        if takes_all:
            return dict(arguments)
        return {k: v for k, v in arguments.items() if k in names}

    return ArgumentSpec(schema, validate, tuple(names), context_param)


def _simple_arguments(
    fields: list[tuple[str, Any, Any]],
    arg_docs: Mapping[str, str],
    names: tuple[str, ...],
    context_param: str | None,
) -> ArgumentSpec:
    empty = inspect.Parameter.empty
    props: dict[str, Any] = {}
    required: list[str] = []
    checks: list[tuple[str, type | None, Validator, Any]] = []
    for name, hint, default in fields:
        schema = dict(simple_schema(hint))
        if name in arg_docs and "description" not in schema:
            schema["description"] = arg_docs[name]
        if default is empty:
            required.append(name)
        elif default is None or isinstance(default, str | int | float | bool):
            schema["default"] = default
        props[name] = schema
        # A value of exactly this type passes its check unchanged (str, bool, int,
        # float): tested inline, the validator is called only for anything else.
        exact = hint if hint in _EXACT else None
        checks.append((name, exact, simple_validator(hint), _REQUIRED if default is empty else default))
    root: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        root["required"] = required

    def validate(arguments: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, exact, check, default in checks:
            value = arguments.get(name, _ABSENT)
            if type(value) is exact:
                out[name] = value
            elif value is not _ABSENT:
                out[name] = check(value, name)
            elif default is _REQUIRED:
                raise ArgumentError(f"{name}: missing required argument")
            else:
                out[name] = default
        return out

    return ArgumentSpec(root, validate, names, context_param)


def _pydantic_arguments(
    fn: Callable[..., Any],
    fields: list[tuple[str, Any, Any]],
    arg_docs: Mapping[str, str],
    names: tuple[str, ...],
    context_param: str | None,
) -> ArgumentSpec:
    import pydantic

    empty = inspect.Parameter.empty
    definitions: dict[str, Any] = {}
    for name, hint, default in fields:
        field_kwargs: dict[str, Any] = {}
        if name in arg_docs:
            field_kwargs["description"] = arg_docs[name]
        if default is not empty:
            field_kwargs["default"] = default
        definitions[name] = (hint, pydantic.Field(**field_kwargs))
    try:
        model = pydantic.create_model(  # type: ignore[call-overload]
            f"{fn.__name__}_arguments",
            __config__=pydantic.ConfigDict(arbitrary_types_allowed=False),
            **definitions,
        )
        from nimblemcp.server._refs import inline_refs  # only for pydantic (start-up, issue 18)

        schema = inline_refs(model.model_json_schema())
    except pydantic.PydanticUserError as exc:
        raise _unsupported_parameter(fn, fields) from exc
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)  # type: ignore[union-attr]
    validator = model.__pydantic_validator__

    def validate(arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            instance = validator.validate_python(arguments)
        except pydantic.ValidationError as exc:
            parts = [
                f"{'.'.join(str(x) for x in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            ]
            raise ArgumentError("; ".join(parts)) from None
        return {n: getattr(instance, n) for n in names}

    return ArgumentSpec(schema, validate, names, context_param)


# --- return types -------------------------------------------------------------------


class OutputSpec:
    """How a function's return value becomes `structuredContent`, if it does."""

    __slots__ = ("dump", "schema", "wrap")

    def __init__(
        self, schema: dict[str, Any], dump: Callable[[Any], Any], wrap: bool
    ) -> None:
        self.schema = schema
        self.dump = dump
        self.wrap = wrap  # non-object values travel as {"result": value}


def _hint_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__qualname__ if tp.__module__ == "builtins" else f"{tp.__module__}.{tp.__qualname__}"
    return repr(tp).replace("typing.", "")


def _unsupported_parameter(fn: Callable[..., Any], fields: list[tuple[str, Any, Any]]) -> TypeError:
    """Which parameter has no JSON Schema, and what to write instead (at registration)."""
    import pydantic

    culprit = ", ".join(f"{name}: {_hint_name(hint)}" for name, hint, _ in fields) or "?"
    for name, hint, _ in fields:
        try:
            pydantic.TypeAdapter(hint).json_schema()
        except pydantic.PydanticUserError:
            culprit = f"{name}: {_hint_name(hint)}"
            break
    return TypeError(
        f"{fn.__qualname__}: parameter `{culprit}` has no JSON form, so no client can send it."
        " Use a JSON type (str, int, float, bool, list/dict of those, a Literal, an enum, a"
        " TypedDict, dataclass or pydantic model); if the server supplies the value (a"
        " connection, a client, a lock), inject it instead:"
        " `Annotated[T, Depends(provider)]`, or reach it through `ctx.lifespan`"
    )


def _unstructured(tp: Any, plain: tuple[type, ...]) -> bool:
    from nimblemcp.content import is_content_hint

    if tp in (inspect.Signature.empty, Any, object, None, NoneType, str) or tp in plain:
        return True
    return is_content_hint(tp)


def build_output(fn: Callable[..., Any], plain: tuple[type, ...] = ()) -> OutputSpec | None:
    """An output schema from the return annotation, or None for unstructured tools
    (`plain`: return types of the caller's own that are never structured)."""
    hints = type_hints(fn)
    tp = hints.get("return", inspect.Signature.empty)
    if _unstructured(tp, plain):
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        tp = typing.get_args(tp)[0]
        origin = typing.get_origin(tp)
    if is_simple(tp):
        schema = simple_schema(tp)
        is_object = schema.get("type") == "object"
        if is_object:
            return OutputSpec(schema, lambda v: v, False)
        return OutputSpec(
            {"type": "object", "properties": {"result": schema}, "required": ["result"]},
            _plain_dump,
            True,
        )
    import pydantic

    from nimblemcp.server._refs import inline_refs  # only for pydantic (start-up, issue 18)

    try:
        adapter: Any = pydantic.TypeAdapter(tp)
        schema = inline_refs(adapter.json_schema(mode="serialization"))
    except pydantic.PydanticUserError as exc:
        raise TypeError(
            f"{fn.__qualname__}: the return type {_hint_name(tp)} has no JSON form, so it cannot"
            " be the tool's structured output. Return JSON-able data (str, int, float, bool,"
            " list/dict of those, a TypedDict, dataclass or pydantic model), content blocks"
            " (-> list[ContentBlock]), or a ToolResult; or register it with"
            " structured_output=False and return text"
        ) from exc
    schema.pop("title", None)

    def dump(value: Any) -> Any:
        # No serializer warnings: the tool's result is checked against its outputSchema
        # afterwards (`_tools.output_check`), and a mismatch is answered as an error.
        return adapter.dump_python(value, mode="json", warnings=False)

    if schema.get("type") == "object":
        return OutputSpec(schema, dump, False)
    return OutputSpec(
        {"type": "object", "properties": {"result": schema}, "required": ["result"]},
        dump,
        True,
    )


def _plain_dump(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | set | frozenset):
        return [_plain_dump(v) for v in value]  # type: ignore[misc]
    return value
