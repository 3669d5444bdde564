"""Backends for the little shared state a stateless server needs.

Every backend implements a small Protocol from `_store`; the in-memory ones are the
default for a single process. Redis/SQLite implementations are imported only when
chosen by name (`from_url("redis://...")` or `NIMBLEMCP_REDIS_URL`), so their client
libraries stay optional.
"""

from nimblemcp.backends._select import from_env, from_url
from nimblemcp.backends._store import KeyValueStore
from nimblemcp.backends.memory import MemoryStore

__all__ = ["KeyValueStore", "MemoryStore", "from_env", "from_url"]
