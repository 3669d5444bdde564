"""`small_reads(transport)`: cap how much asyncio's Unix transports read at a time.

asyncio's socket and pipe transports read up to 256 KiB per call (`max_size`, an
attribute of their classes). glibc serves a buffer that size with mmap, shrinks it to
the bytes read with mremap and frees it with munmap: three system calls and a page
fault for every message read, however small (issue 18). 64 KiB comes from the heap; a
bigger message simply takes several reads. uvloop's transports and asyncio's TLS and
Windows transports have no such attribute and keep their own buffers.
"""

from __future__ import annotations

import asyncio

READ_SIZE = 64 * 1024  # below glibc's default mmap threshold (128 KiB)


def small_reads(transport: asyncio.BaseTransport | None) -> None:
    """Lower `transport`'s read size to `READ_SIZE` where it has one above that."""
    size = getattr(transport, "max_size", None)
    if isinstance(size, int) and size > READ_SIZE:
        transport.max_size = READ_SIZE  # type: ignore[union-attr]
