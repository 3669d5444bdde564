"""The client transports' size and hop limits, defined once: the Client's `Limits`
option group and the transports' own keyword defaults both read them here. Pure
constants; imports nothing.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_CONNECTIONS", "MAX_LIST_ITEMS", "MAX_LIST_PAGES", "MAX_MESSAGE_BYTES", "MAX_REDIRECTS"]

#: The largest message a client reads from a server: a JSON body, one SSE event, one
#: stdio line. Above it the read stops with `MessageTooLarge`.
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
#: Same-origin 307/308 redirects followed for one HTTP request.
MAX_REDIRECTS: Final = 5
#: Connections an HTTP client transport opens to its server at once (httpx's default);
#: more concurrent requests wait in line for one.
MAX_CONNECTIONS: Final = 100
#: Pages and items of one paged list (tools, prompts, resources, templates) a client
#: collects before it gives up with `MessageTooLarge` (issue 37: a server handing out
#: endless pages grew a host by 550 MB in 6 s).
MAX_LIST_PAGES: Final = 100
MAX_LIST_ITEMS: Final = 10_000
