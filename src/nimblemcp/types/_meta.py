"""Reserved `_meta` keys and the per-request `_meta` check (CHECKLIST section 2).

No postponed annotations: they are cheap to evaluate, and a NamedTuple with postponed
ones compiles a `ForwardRef` per field when the class is made (start-up, issue 18).
"""

from typing import Any, NamedTuple

from nimblemcp.errors import InvalidParams
from nimblemcp.types._versions import LATEST_VERSION

PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL = "io.modelcontextprotocol/logLevel"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
PROGRESS_TOKEN = "progressToken"
# The tasks extension's key in `capabilities.extensions` (SEP-2663, TASK-01).
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# nimblemcp's own `_meta` keys and notification for moving a listen at a rolling restart
# (make-before-break; see `server/_subscriptions.py`). Other peers ignore them.
HANDOVER = "com.github.nimblemcp/handover"
LISTEN_AGAIN = "com.github.nimblemcp/listenAgain"
MOVING = "notifications/com.github.nimblemcp/moving"

# RFC 5424 order, least severe first (LOG-04).
LOG_LEVELS: tuple[str, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
_LOG_RANK = {name: i for i, name in enumerate(LOG_LEVELS)}

# Appended to the `_meta` errors: someone typing JSON-RPC into a server by hand sees
# what a request must carry.
META_HINT = (f'; every request carries it, e.g. "params": {{"_meta": {{"{PROTOCOL_VERSION}": '
             f'"{LATEST_VERSION}", "{CLIENT_CAPABILITIES}": {{}}}}}} '
             "(a 2025-11-25 client sends initialize first instead)")

_EMPTY: dict[str, Any] = {}


class RequestMeta(NamedTuple):
    """What one request says about itself; nothing is inferred from earlier requests."""

    version: str
    client_capabilities: dict[str, Any]
    client_info: dict[str, Any] | None
    log_level: int | None  # rank in LOG_LEVELS, None = no logging for this request
    progress_token: str | int | None
    raw: dict[str, Any]


def parse_request_meta(params: Any) -> RequestMeta:
    """Check `params._meta` (META-01/02, LOG-05, PROG-01) and return its parts.

    The version is returned as sent; whether it is supported is the caller's call.
    """
    if not isinstance(params, dict):
        raise InvalidParams("params must be an object carrying _meta" + META_HINT)
    meta = params.get("_meta")  # type: ignore[union-attr]
    if not isinstance(meta, dict):
        raise InvalidParams("params._meta is required" + META_HINT)
    version = meta.get(PROTOCOL_VERSION)  # type: ignore[union-attr]
    if not isinstance(version, str):
        raise InvalidParams(f"params._meta is missing {PROTOCOL_VERSION}" + META_HINT)
    caps = meta.get(CLIENT_CAPABILITIES, None)  # type: ignore[union-attr]
    if not isinstance(caps, dict):
        raise InvalidParams(f"params._meta is missing {CLIENT_CAPABILITIES}" + META_HINT)
    info = meta.get(CLIENT_INFO)  # type: ignore[union-attr]
    rank: int | None = None
    if LOG_LEVEL in meta:  # present but null is as unrecognized as a typo (LOG-05)
        level = meta[LOG_LEVEL]  # type: ignore[index]
        rank = _LOG_RANK.get(level) if isinstance(level, str) else None
        if rank is None:
            raise InvalidParams(f"unknown log level in {LOG_LEVEL}: {level!r}")
    token = meta.get(PROGRESS_TOKEN)  # type: ignore[union-attr]
    if token is not None and (not isinstance(token, str | int) or isinstance(token, bool)):
        raise InvalidParams("progressToken must be a string or an integer")
    return RequestMeta(version, caps, info if isinstance(info, dict) else None, rank, token, meta)


def log_rank(level: str) -> int:
    """Rank of a level name in LOG_LEVELS; unknown names raise ValueError."""
    try:
        return _LOG_RANK[level]
    except KeyError:
        raise ValueError(f"unknown log level {level!r}") from None


EMPTY_META = _EMPTY
