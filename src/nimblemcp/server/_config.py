"""The frozen configuration the request path reads: one `ServerConfig` per server.

`Server.__init__` resolves its keyword arguments and option groups into one record;
the dispatcher reads it for every request and never the `Server` itself. A setting that
changes later (`server.instructions = ...`) makes a new record (`_replace`), which the
server hands to its dispatcher: a record is never changed in place. Imports only the
option groups. No postponed annotations: a NamedTuple with postponed ones compiles a
`ForwardRef` per field when the class is made.
"""

from collections.abc import Mapping
from typing import Any, NamedTuple

from nimblemcp.server._options import ListenOptions

__all__ = ["DEFAULT_CACHE_HINTS", "ServerConfig"]

# Caching hints sent when nothing more specific is configured (CACHE-01). The
# capabilities of a server rarely change; lists may change at runtime, so they stay
# fresh for a minute; resource contents default to "always refetch".
DEFAULT_CACHE_HINTS: dict[str, tuple[int, str]] = {
    "server/discover": (3_600_000, "public"),
    "tools/list": (60_000, "public"),
    "prompts/list": (60_000, "public"),
    "resources/list": (60_000, "public"),
    "resources/templates/list": (60_000, "public"),
    "resources/read": (0, "public"),
}


class ServerConfig(NamedTuple):
    """What the request path needs to know of a server's settings.

    `info`: the `serverInfo` sent in every result's `_meta`. `cache_hints`: method ->
    (ttlMs, cacheScope), the defaults merged with the server's own; `explicit_hints`:
    the methods whose hints the server set itself (kept as given for authenticated
    callers). `logging`: advertise `logging`. `forward_logs`: Python logging inside
    handlers becomes `notifications/message`. `max_inflight`: above this many running
    handlers, MRTR methods shed load. `listen`: `subscriptions/listen` and list-change
    notifications. `one_time_state` / `state_ttl`: every requestState is single-use /
    how long the replay guard remembers one."""

    info: dict[str, Any]
    cache_hints: Mapping[str, tuple[int, str]]
    instructions: str | None
    page_size: int | None
    explicit_hints: frozenset[str]
    logging: bool
    forward_logs: bool
    max_inflight: int | None
    listen: ListenOptions
    one_time_state: bool
    state_ttl: float
