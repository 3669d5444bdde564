"""Optional dependencies: turn a missing one into an error that names the extra.

Used where nimblemcp imports an optional package lazily (uvicorn, httpx, redis,
watchfiles):

    with needs_extra("http", "HTTP serving"):
        import uvicorn

A `ModuleNotFoundError` inside the block becomes `MissingExtraError` (still an
`ImportError`, so existing `except ImportError` handlers keep working) saying
"HTTP serving needs the [http] extra: pip install 'nimblemcp[http]'". The CLI prints
that line without a traceback. Imports only the standard library.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["MissingExtraError", "needs_extra"]


class MissingExtraError(ImportError):
    """An optional dependency is not installed; `extra` names what to install."""

    def __init__(self, extra: str, purpose: str, missing: str | None) -> None:
        self.extra = extra
        self.purpose = purpose
        self.missing = missing
        text = f"{purpose} needs the [{extra}] extra: pip install 'nimblemcp[{extra}]'"
        if missing:
            text += f" (module {missing!r} is missing)"
        super().__init__(text, name=missing)


@contextlib.contextmanager
def needs_extra(extra: str, purpose: str) -> Iterator[None]:
    """Re-raise a `ModuleNotFoundError` from the block as `MissingExtraError`."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise MissingExtraError(extra, purpose, exc.name) from exc
