"""Frozen, slotted records (the option groups) built without `exec`.

`dataclass(frozen=True, slots=True)` (or `slots=True` alone) here gives a class what
the standard decorator gives it: an `__init__` taking the fields in order (positional or keyword, with their
defaults, then `__post_init__`), `__repr__`, `__eq__`, `__hash__`, `__match_args__`,
`__slots__`, when frozen immutability (`dataclasses.FrozenInstanceError`) and pickling
(unfrozen: no `__hash__`, as the standard decorator does), and
`__dataclass_fields__`, so `dataclasses.fields`, `replace`, `asdict` and `is_dataclass`
work on it. It builds them from closures instead of generating source and compiling
it: the standard decorator costs ~4.6M instructions a class on CPython 3.11, which made
the module holding six option groups the most expensive one a server imports.

It lives in `types`, the layer every other one (the port included) may import; it
imports no other part of nimblemcp. Type checkers see the standard decorator; a
module writes

    if TYPE_CHECKING:
        from dataclasses import dataclass
    else:
        from nimblemcp.types._records import dataclass

Only what the option groups use is supported: own fields (no dataclass base class) with
a plain default or none, or `field(default=..., repr=..., compare=..., hash=...)` (no
`default_factory`), and no zero-argument `super()` in methods.
Imports only the standard library (`dataclasses` is loaded by orjson, `inspect` by asyncio).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

__all__ = ["dataclass"]

_T = TypeVar("_T", bound=type)
_NO_DEFAULT: Any = dataclasses.MISSING
_FIELD_KIND = getattr(dataclasses, "_FIELD")  # what `dataclasses.fields()` keeps  # noqa: B009


def dataclass(*, slots: bool, frozen: bool = False) -> Any:
    """`@dataclass(slots=True[, frozen=True])` without `exec` (see the module docstring)."""
    if not slots:
        raise TypeError("nimblemcp.types._records.dataclass makes slotted records only")
    return lambda cls: _build(cls, frozen)


def _build(cls: _T, frozen: bool) -> _T:
    own = inspect.get_annotations(cls)  # strings (postponed annotations): never evaluated
    names = tuple(n for n, hint in own.items() if not str(hint).startswith(("ClassVar", "typing.ClassVar")))
    if any(hasattr(base, "__dataclass_fields__") for base in cls.__mro__[1:]):
        raise TypeError(f"{cls.__qualname__}: a dataclass base class is not supported here")
    given = [cls.__dict__.get(n, _NO_DEFAULT) for n in names]
    specs: list[dataclasses.Field[Any]] = [g if isinstance(g, dataclasses.Field) else dataclasses.field(default=g) for g in given]
    for name, f in zip(names, specs, strict=True):
        if f.default_factory is not _NO_DEFAULT or not f.init or f.kw_only is True:
            raise TypeError(f"{cls.__qualname__}.{name}: only field(default=..., repr=..., compare=..., hash=...) "
                            "is supported here")
    defaults = tuple(f.default for f in specs)
    seen_default = False
    for name, default in zip(names, defaults, strict=True):
        if default is _NO_DEFAULT and seen_default:
            raise TypeError(f"non-default argument {name!r} follows default argument")
        seen_default = seen_default or default is not _NO_DEFAULT

    fields: dict[str, dataclasses.Field[Any]] = {}
    for name, f in zip(names, specs, strict=True):
        f.name, f.type, f.kw_only = name, own[name], False
        f._field_type = _FIELD_KIND  # type: ignore[attr-defined]
        fields[name] = f
    shown = tuple(f.name for f in specs if f.repr)
    compared = tuple(f.name for f in specs if f.compare)
    hashed = tuple(f.name for f in specs if (f.compare if f.hash is None else f.hash))
    # Everything goes into the namespace before the class is made: one `type()` call,
    # no `setattr` on the new class afterwards (each one updates the type's slots).
    namespace = {k: v for k, v in cls.__dict__.items() if k not in names and k not in ("__dict__", "__weakref__")}
    namespace["__slots__"] = names
    namespace["__match_args__"] = names
    namespace["__qualname__"] = cls.__qualname__
    namespace["__dataclass_fields__"] = fields
    made: list[Any] = []  # the new class, for `__setattr__`/`__delattr__` (filled below)
    post_init = getattr(cls, "__post_init__", None)
    for method in _methods(cls.__qualname__, made, post_init, names, defaults, shown, compared, hashed, frozen):
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
        namespace[method.__name__] = method
    if not frozen:  # eq without frozen: unhashable, as dataclass makes it
        namespace["__hash__"] = None
    namespace["__signature__"] = _LazySignature(names, defaults, own)
    new: Any = type(cls)(cls.__name__, cls.__bases__, namespace)
    made.append(new)
    return new  # type: ignore[no-any-return]


def _methods(qualname: str, made: list[Any], post_init: Any, names: tuple[str, ...], defaults: tuple[Any, ...],
             shown: tuple[str, ...], compared: tuple[str, ...], hashed: tuple[str, ...], frozen: bool) -> list[Any]:
    count = len(names)
    index = {name: i for i, name in enumerate(names)}
    setter = object.__setattr__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > count:
            raise TypeError(f"{qualname}.__init__() takes from 1 to {count + 1} positional "
                            f"arguments but {len(args) + 1} were given")
        values = list(defaults)
        values[:len(args)] = args
        for key, value in kwargs.items():
            i = index.get(key)
            if i is None:
                raise TypeError(f"{qualname}.__init__() got an unexpected keyword argument {key!r}")
            if i < len(args):
                raise TypeError(f"{qualname}.__init__() got multiple values for argument {key!r}")
            values[i] = value
        missing = [repr(n) for n, v in zip(names, values, strict=True) if v is _NO_DEFAULT]
        if missing:  # worded as CPython words it
            listed = missing[0] if len(missing) == 1 else (
                " and ".join(missing) if len(missing) == 2 else ", ".join(missing[:-1]) + ", and " + missing[-1])
            plural = "argument" if len(missing) == 1 else "arguments"
            raise TypeError(f"{qualname}.__init__() missing {len(missing)} required positional {plural}: {listed}")
        for name, value in zip(names, values, strict=True):
            setter(self, name, value)
        if post_init is not None:
            self.__post_init__()

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in shown)
        return f"{type(self).__qualname__}({inner})"

    def _values(self: Any, which: tuple[str, ...] = names) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in which)

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            return _values(self, compared) == _values(other, compared)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(_values(self, hashed))

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is made[0] or name in index:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        setter(self, name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is made[0] or name in index:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        object.__delattr__(self, name)

    def __getstate__(self: Any) -> list[Any]:
        return list(_values(self))

    def __setstate__(self: Any, state: list[Any]) -> None:
        for name, value in zip(names, state, strict=True):
            setter(self, name, value)

    if not frozen:
        return [__init__, __repr__, __eq__]
    return [__init__, __repr__, __eq__, __hash__, __setattr__, __delattr__, __getstate__, __setstate__]


class _LazySignature:
    """`inspect.signature(cls)`: built when asked (help(), IDEs), not at import."""

    __slots__ = ("_args", "_sig")

    def __init__(self, names: tuple[str, ...], defaults: tuple[Any, ...], hints: dict[str, Any]) -> None:
        self._args = (names, defaults, hints)
        self._sig: Any = None

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if self._sig is None:
            names, defaults, hints = self._args
            kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
            self._sig = inspect.Signature(
                [inspect.Parameter(n, kind, default=(inspect.Parameter.empty if d is _NO_DEFAULT else d),
                                   annotation=hints[n]) for n, d in zip(names, defaults, strict=True)],
                return_annotation=None)
        return self._sig
