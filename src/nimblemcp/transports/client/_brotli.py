"""The `br` content decoder for the HTTP/1.1 wire, when `brotli` or `brotlicffi` is
installed (the packages httpx decodes br with); `brotli_decoder` is None otherwise, and
`Accept-Encoding` does not name br.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["brotli_decoder"]


def _find() -> Any:
    for name in ("brotlicffi", "brotli"):  # httpx's order
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


_brotli = _find()


class _Brotli:
    """One body's brotli stream (`brotli`'s `process` or `brotlicffi`'s `decompress`)."""

    __slots__ = ("_done", "_more", "_seen", "_state")

    def __init__(self) -> None:
        self._state = _brotli.Decompressor()
        self._more = getattr(self._state, "process", None) or self._state.decompress
        self._done = getattr(self._state, "is_finished", None)
        self._seen = False

    def decode(self, data: bytes) -> Iterator[bytes]:
        self._seen = True
        yield self._more(data)

    def flush(self) -> bytes:
        if not self._seen:
            return b""
        if self._done is not None and not self._done():
            raise ValueError("the compressed data ends early")
        finish = getattr(self._state, "finish", None)  # brotlicffi checks the end itself
        if finish is not None:
            finish()
        return b""


brotli_decoder: Callable[[], _Brotli] | None = _Brotli if _brotli is not None else None
