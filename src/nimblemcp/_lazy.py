"""Names a package loads on first use (PEP 562), for its `__init__`.

A package lists `name -> module` and takes its `__getattr__` and `__dir__` from
`lazy_names`: a name loads its module when first asked for, then stays in the
package's namespace, so a stdio server or a client imports only what it uses
(issue 18). Imports nothing of ours; the lowest layer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def lazy_names(
    package: str, namespace: dict[str, Any], where: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package` (its `globals()` is `namespace`)."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *namespace.get("__all__", ())})

    return __getattr__, __dir__
