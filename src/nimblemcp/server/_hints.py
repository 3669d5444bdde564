"""JSON Schemas and validators for plain type hints, built without pydantic.

str, int, float, bool, None, list/dict/tuple/set of those, Optional, Union, Literal,
Enum, Any and TypedDicts of those get a hand-built schema and a small validator, so a
server made of such tools never imports pydantic and starts fast. Used by `_schema`;
must not import transports, the registry or pydantic.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

Validator = Callable[[Any, str], Any]


class ArgumentError(ValueError):
    """An argument did not match the tool's input schema (a tool execution error)."""


NoneType = type(None)


def is_simple(tp: Any) -> bool:
    if tp in (str, int, float, bool, NoneType, None, Any, object):
        return True
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return all(isinstance(m.value, str | int) for m in tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Literal:
        return all(isinstance(a, str | int | bool) for a in args)
    if origin in (typing.Union, types.UnionType):
        return all(is_simple(a) for a in args)
    if origin in (list, set, frozenset, tuple) or origin is typing.Sequence:
        return all(is_simple(a) for a in args if a is not Ellipsis)
    if origin in (dict, Mapping):
        return len(args) != 2 or (args[0] is str and is_simple(args[1]))
    if tp in (list, dict, tuple):
        return True
    if typing.is_typeddict(tp):
        # Handled here rather than by pydantic, which refuses `typing.TypedDict`
        # before Python 3.12; also keeps such servers free of the pydantic import.
        return all(is_simple(_strip_required(h)) for h in _typeddict_hints(tp).values())
    if origin is typing.Annotated:
        return is_simple(args[0]) and all(isinstance(a, str) for a in args[1:])
    return False


def _typeddict_hints(tp: Any) -> dict[str, Any]:
    return typing.get_type_hints(tp, include_extras=True)


def _required_keys(tp: Any, hints: dict[str, Any]) -> list[str]:
    """Required keys, trusting the hints too: under `from __future__ import annotations`
    Python 3.11 cannot see `NotRequired[...]` when it builds `__required_keys__`."""
    out: list[str] = []
    for key, hint in hints.items():
        origin = typing.get_origin(hint)
        if origin is typing.Required or (origin is not typing.NotRequired and key in tp.__required_keys__):
            out.append(key)
    return out


def _strip_required(tp: Any) -> Any:
    """`Required[X]` / `NotRequired[X]` -> X (key presence comes from the TypedDict)."""
    while typing.get_origin(tp) in (typing.Required, typing.NotRequired):
        tp = typing.get_args(tp)[0]
    return tp


def simple_schema(tp: Any) -> dict[str, Any]:
    """JSON Schema for a hint accepted by `is_simple`."""
    if tp is str:
        return {"type": "string"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is None or tp is NoneType:
        return {"type": "null"}
    if tp is Any or tp is object:
        return {}
    if tp is list or tp is tuple:
        return {"type": "array"}
    if tp is dict:
        return {"type": "object"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    if typing.is_typeddict(tp):
        hints = _typeddict_hints(tp)
        td_schema: dict[str, Any] = {
            "type": "object",
            "properties": {k: simple_schema(_strip_required(h)) for k, h in hints.items()},
        }
        required = _required_keys(tp, hints)
        if required:
            td_schema["required"] = required
        return td_schema
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        inner = simple_schema(args[0])
        text = " ".join(a for a in args[1:] if isinstance(a, str))
        if text:
            inner = {**inner, "description": text}
        return inner
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not NoneType]
        parts = [simple_schema(a) for a in non_null]
        if len(non_null) < len(args):
            if len(parts) == 1 and "type" in parts[0] and isinstance(parts[0]["type"], str):
                return {**parts[0], "type": [parts[0]["type"], "null"]}
            parts.append({"type": "null"})
        return parts[0] if len(parts) == 1 else {"anyOf": parts}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": simple_schema(args[0])}
        return {
            "type": "array",
            "prefixItems": [simple_schema(a) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if origin in (list, set, frozenset) or origin is typing.Sequence:
        schema: dict[str, Any] = {"type": "array"}
        if args:
            schema["items"] = simple_schema(args[0])
        if origin in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    if origin in (dict, Mapping):
        schema = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            schema["additionalProperties"] = simple_schema(args[1])
        return schema
    raise TypeError(f"unsupported type hint {tp!r}")


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def simple_validator(tp: Any) -> Validator:
    """A function (value, path) -> converted value that raises ArgumentError."""

    def fail(expected: str, value: Any, path: str) -> ArgumentError:
        return ArgumentError(f"{path}: expected {expected}, got {_type_name(value)}")

    if tp is str:

        def v_str(value: Any, path: str) -> Any:
            if type(value) is str:
                return value
            raise fail("a string", value, path)

        return v_str
    if tp is bool:

        def v_bool(value: Any, path: str) -> Any:
            if type(value) is bool:
                return value
            raise fail("a boolean", value, path)

        return v_bool
    if tp is int:

        def v_int(value: Any, path: str) -> Any:
            if type(value) is int:
                return value
            if type(value) is float and value.is_integer():
                return int(value)
            raise fail("an integer", value, path)

        return v_int
    if tp is float:

        def v_float(value: Any, path: str) -> Any:
            if type(value) is float or type(value) is int:
                return float(value)
            raise fail("a number", value, path)

        return v_float
    if tp is None or tp is NoneType:

        def v_none(value: Any, path: str) -> Any:
            if value is None:
                return None
            raise fail("null", value, path)

        return v_none
    if tp is Any or tp is object:
        return lambda value, path: value
    if tp is list or tp is tuple or tp is dict:
        json_type = list if tp is not dict else dict
        kind = "an array" if json_type is list else "an object"

        def v_container(value: Any, path: str) -> Any:
            if isinstance(value, json_type):
                return tuple(value) if tp is tuple else value
            raise fail(kind, value, path)

        return v_container
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        by_value = {m.value: m for m in tp}

        def v_enum(value: Any, path: str) -> Any:
            try:
                return by_value[value]
            except (KeyError, TypeError):
                raise ArgumentError(f"{path}: must be one of {list(by_value)}") from None

        return v_enum
    if typing.is_typeddict(tp):
        td_hints = _typeddict_hints(tp)
        fields = {k: simple_validator(_strip_required(h)) for k, h in td_hints.items()}
        required_keys = frozenset(_required_keys(tp, td_hints))

        def v_typeddict(value: Any, path: str) -> Any:
            if not isinstance(value, dict):
                raise fail("an object", value, path)
            out = dict(value)  # type: ignore[arg-type]
            for key in required_keys - out.keys():
                raise ArgumentError(f"{path}.{key}: missing required field")
            for key, check in fields.items():
                if key in out:
                    out[key] = check(out[key], f"{path}.{key}")
            return out

        return v_typeddict
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return simple_validator(args[0])
    if origin is typing.Literal:
        allowed = list(args)

        def v_literal(value: Any, path: str) -> Any:
            for a in allowed:
                if value == a and type(value) is type(a):
                    return a
            raise ArgumentError(f"{path}: must be one of {allowed}")

        return v_literal
    if origin in (typing.Union, types.UnionType):
        inner = [simple_validator(a) for a in args]

        def v_union(value: Any, path: str) -> Any:
            for check in inner:
                try:
                    return check(value, path)
                except ArgumentError:
                    continue
            raise ArgumentError(f"{path}: {_type_name(value)} matches none of the allowed types")

        return v_union
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        items = [simple_validator(a) for a in args]

        def v_tuple(value: Any, path: str) -> Any:
            if not isinstance(value, list) or len(value) != len(items):  # type: ignore[arg-type]
                raise fail(f"an array of {len(items)} items", value, path)
            return tuple(check(x, f"{path}[{i}]") for i, (check, x) in enumerate(zip(items, value, strict=True)))  # type: ignore[arg-type]

        return v_tuple
    if origin in (list, set, frozenset, tuple) or origin is typing.Sequence:
        item = simple_validator(args[0]) if args else simple_validator(Any)
        build: Callable[[Any], Any] = origin if origin in (set, frozenset, tuple) else list  # type: ignore[assignment]

        def v_list(value: Any, path: str) -> Any:
            if not isinstance(value, list):
                raise fail("an array", value, path)
            return build(item(x, f"{path}[{i}]") for i, x in enumerate(value))  # type: ignore[arg-type]

        return v_list
    if origin in (dict, Mapping):
        val = simple_validator(args[1]) if len(args) == 2 else simple_validator(Any)

        def v_dict(value: Any, path: str) -> Any:
            if not isinstance(value, dict):
                raise fail("an object", value, path)
            return {k: val(x, f"{path}.{k}") for k, x in value.items()}  # type: ignore[union-attr]

        return v_dict
    raise TypeError(f"unsupported type hint {tp!r}")


