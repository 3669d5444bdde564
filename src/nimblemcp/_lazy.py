"""Names a package loads on first use (PEP 562), for its `__init__`.

A package lists `name -> module` and takes its `__getattr__` and `__dir__` from
`lazy_names`: a name loads its module when first asked for, then stays in the
package's namespace, so a stdio server or a client imports only what it uses
(issue 18). `collector_paused` is how the root's `_load` imports a name, and how
`serving` starts a transport: with the cyclic collector paused. Imports nothing of ours;
the lowest layer."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
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


class collector_paused:
    """`with collector_paused():` runs a stretch of imports with the cyclic garbage
    collector paused, then sets it back as it was (left off if it was off).

    An import allocates thousands of objects that live as long as the process, none of
    them garbage; the collections they trigger meanwhile walk every object the process
    holds (asyncio's too) over and over (issue 18). Paused, the collector still counts
    the allocations, so its first young collection afterwards would walk every object
    made meanwhile: when one is due, every tracked object is promoted to the oldest
    generation at once instead (`promote_if_due`)."""

    __slots__ = ("_collecting",)

    def __enter__(self) -> None:
        import gc

        self._collecting = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._collecting:
            import gc

            promote_if_due(gc)
            gc.enable()


def promote_if_due(gc: ModuleType) -> None:
    """Move every tracked object to the oldest generation when a young collection is due
    (`gc.freeze()` then `gc.unfreeze()`: two list splices; nothing stays frozen). Not
    done when anything is frozen already (an HTTP server's `freeze_gc`; CPython 3.12.1
    starts with objects of its own frozen), which `unfreeze` would release: there the
    young collection runs as usual."""
    if gc.get_count()[0] > gc.get_threshold()[0] and not gc.get_freeze_count():
        gc.freeze()
        gc.unfreeze()
