"""Resource-template variables converted to what the read function's annotations say.

`notes://{id}` with `def note(id: int)` gets `id` as an int; a value that does not
convert answers -32602 (InvalidParams) naming the variable. Built once at registration:
`str`, `Any` and unannotated variables pass through; `int`, `float`, `bool`, `UUID`,
enums and `Literal` of strings convert by hand; `Annotated[...]` with constraints and
any other type go through a pydantic `TypeAdapter` (imported only for such templates).
A template whose variables are all strings keeps the plain `dict` binder: no cost.
A type that cannot come from a URI segment is refused at registration.
Must not import transports or the registry.
"""

from __future__ import annotations

import enum
import inspect
import typing
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from nimblemcp.errors import InvalidParams

__all__ = ["uri_binder"]

Convert = Callable[[str], Any]

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _to_int(text: str) -> int:
    return int(text, 10)


def _to_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("not a finite number")
    return value


def _to_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("not a boolean (true/false, 1/0, yes/no, on/off)")


def _enum_converter(tp: type[enum.Enum]) -> Convert:
    by_text = {str(m.value): m for m in tp}

    def convert(text: str) -> Any:
        try:
            return by_text[text]
        except KeyError:
            raise ValueError(f"not one of {sorted(by_text)}") from None

    return convert


def _literal_converter(options: tuple[Any, ...]) -> Convert:
    by_text = {str(o): o for o in options}

    def convert(text: str) -> Any:
        try:
            return by_text[text]
        except KeyError:
            raise ValueError(f"not one of {sorted(by_text)}") from None

    return convert


_EXPECTED = {int: "an integer", float: "a number", bool: "a boolean", uuid.UUID: "a UUID"}
_SIMPLE: dict[Any, Convert] = {int: _to_int, float: _to_float, bool: _to_bool, uuid.UUID: uuid.UUID}


def _converter(fn_name: str, name: str, hint: Any) -> Convert | None:
    """How to turn the text of variable `name` into `hint` (None: keep the text)."""
    if hint in (str, Any, inspect.Parameter.empty, object):
        return None
    simple = _SIMPLE.get(hint)
    if simple is not None:
        return simple
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_converter(hint)
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return _literal_converter(typing.get_args(hint))
    if origin is typing.Annotated and all(isinstance(a, str) for a in hint.__metadata__):
        return _converter(fn_name, name, typing.get_args(hint)[0])  # descriptions only
    try:
        from pydantic import TypeAdapter

        adapter = TypeAdapter(hint)
    except Exception as exc:
        raise TypeError(
            f"{fn_name}: template variable {name!r} is annotated {hint!r}, which cannot be built from "
            f"a URI segment ({exc}); use str, int, float, bool, UUID, an Enum, a Literal or Annotated[...]"
        ) from None
    return adapter.validate_strings


def uri_binder(
    fn: Callable[..., Any], variables: Iterable[str], hints: dict[str, Any],
) -> Callable[[Any], dict[str, Any]]:
    """The binder of a template's read function (`hints`: its type hints): `dict` when
    nothing converts."""
    name_of = getattr(fn, "__name__", repr(fn))
    converters: list[tuple[str, Convert, str]] = []
    for var in variables:
        convert = _converter(name_of, var, hints.get(var, inspect.Parameter.empty))
        if convert is not None:
            hint = hints[var]
            expected = _EXPECTED.get(hint) or f"a valid {getattr(hint, '__name__', hint)}"
            converters.append((var, convert, expected))
    if not converters:
        return dict
    table = tuple(converters)

    def bind(values: Any) -> dict[str, Any]:
        out = dict(values)
        for var, convert, expected in table:
            try:
                out[var] = convert(out[var])
            except Exception as exc:  # ValueError, pydantic's ValidationError
                detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise InvalidParams(
                    f"template variable {var!r}: expected {expected}, got {out[var]!r} ({detail})"
                ) from None
        return out

    return bind
