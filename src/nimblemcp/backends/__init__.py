"""Backends for the little shared state a stateless server needs.

Every backend implements a small Protocol from `_store`; the in-memory ones are the
default for a single process. Redis/SQLite implementations are imported only when
chosen by name (`from_url("redis://...")` or `NIMBLEMCP_REDIS_URL`), so their client
libraries stay optional.

The names below load on first use (PEP 562): a server imports `backends.bus` and
`backends.memory` without the URL selection (`_select`) or the store Protocol
(`_store`), which it needs only for a Redis URL or a type check (issue 18).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nimblemcp._lazy import lazy_names

if TYPE_CHECKING:
    from nimblemcp.backends._select import from_env, from_url
    from nimblemcp.backends._store import KeyValueStore
    from nimblemcp.backends.memory import MemoryStore

__all__ = ["KeyValueStore", "MemoryStore", "from_env", "from_url"]

_WHERE = {
    "KeyValueStore": "nimblemcp.backends._store",
    "MemoryStore": "nimblemcp.backends.memory",
    "from_env": "nimblemcp.backends._select",
    "from_url": "nimblemcp.backends._select",
}


__getattr__, __dir__ = lazy_names(__name__, globals(), _WHERE)
