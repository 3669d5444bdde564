"""Optional dependencies: turn a missing one into an error that names the extra.

Used where nimblemcp imports an optional package lazily (uvicorn, httpx, redis,
watchfiles):

    with needs_extra("http", "HTTP serving"):
        import uvicorn

A `ModuleNotFoundError` inside the block becomes `MissingExtraError` (still an
`ImportError`, so existing `except ImportError` handlers keep working) saying
"HTTP serving needs the [http] extra: pip install 'nimblemcp[http]'". The CLI prints
that line without a traceback. Imports only `nimblemcp.errors`, where the error lives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from nimblemcp.errors import MissingExtraError

__all__ = ["MissingExtraError", "needs_extra"]


@contextlib.contextmanager
def needs_extra(extra: str, purpose: str) -> Iterator[None]:
    """Re-raise a `ModuleNotFoundError` from the block as `MissingExtraError`."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise MissingExtraError(extra, purpose, exc.name) from exc
