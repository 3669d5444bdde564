"""The method table: one row per client-to-server method of the stateless revision.

Everything a transport or the dispatcher needs to know about a method without
running it: which server capability gates it, whether its results carry caching
hints, whether it is paginated, whether it may answer `input_required`, and which
param names the HTTP `Mcp-Name` header mirrors.
"""

# No postponed annotations: these are cheap to evaluate, and a postponed NamedTuple
# field costs a ForwardRef (a compile) at import.
from typing import NamedTuple

__all__ = ["METHODS", "NOTIFICATIONS", "REMOVED_METHODS", "MethodSpec"]


class MethodSpec(NamedTuple):
    name: str
    capability: str | None  # server capability that must be advertised; None = always
    cacheable: bool  # complete results carry ttlMs + cacheScope (CACHE-01)
    paginated: bool
    input_required: bool  # may answer resultType "input_required" (RT-04)
    name_param: str | None  # the param mirrored in the HTTP Mcp-Name header


METHODS: dict[str, MethodSpec] = {
    m.name: m
    for m in (
        MethodSpec("server/discover", None, True, False, False, None),
        MethodSpec("tools/list", "tools", True, True, False, None),
        MethodSpec("tools/call", "tools", False, False, True, "name"),
        MethodSpec("resources/list", "resources", True, True, False, None),
        MethodSpec("resources/templates/list", "resources", True, True, False, None),
        MethodSpec("resources/read", "resources", True, False, True, "uri"),
        MethodSpec("prompts/list", "prompts", True, True, False, None),
        MethodSpec("prompts/get", "prompts", False, False, True, "name"),
        MethodSpec("completion/complete", "completions", False, False, False, None),
        MethodSpec("subscriptions/listen", None, False, False, False, None),
        # The tasks extension (io.modelcontextprotocol/tasks); gated on its advertisement.
        MethodSpec("tasks/get", "extensions", False, False, False, "taskId"),
        MethodSpec("tasks/update", "extensions", False, False, False, "taskId"),
        MethodSpec("tasks/cancel", "extensions", False, False, False, "taskId"),
    )
}

# Methods of earlier revisions that the stateless revision removed (answered -32601).
REMOVED_METHODS: frozenset[str] = frozenset(
    {
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "notifications/initialized",
        "notifications/roots/list_changed",
    }
)

# Server-to-client notifications of the stateless revision.
NOTIFICATIONS: frozenset[str] = frozenset(
    {
        "notifications/progress",
        "notifications/message",
        "notifications/cancelled",
        "notifications/subscriptions/acknowledged",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    }
)
