"""The host's exceptions, all `ClientError`s (failures on our side, never from a peer).

    ClientError
    ├── ToolCallDenied      the policy or the user refused a tool call; `call`, `reason`
    ├── UnknownName         no tool, prompt or resource by that name in the catalog
    └── ServerUnavailable   the server that owns it is not connected; `server`, `state`

Imports only `nimblemcp.errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nimblemcp.errors import ClientError

if TYPE_CHECKING:
    from ._policy import ToolCall

__all__ = ["ServerUnavailable", "ToolCallDenied", "UnknownName"]


class ToolCallDenied(ClientError):
    """The host's policy (or the user) refused a tool call; it was never sent."""

    def __init__(self, call: ToolCall, reason: str) -> None:
        super().__init__(f"tool call {call.name!r} refused: {reason}")
        self.call = call
        self.reason = reason


class UnknownName(ClientError, LookupError):
    """No tool, prompt or resource of that name in the catalog (or more than one server
    could serve it: then pass `server=`)."""


class ServerUnavailable(ClientError):
    """The server that owns a name is not connected right now (`state` says why)."""

    def __init__(self, server: str, state: Any) -> None:
        error = getattr(state, "error", None)
        status = getattr(state, "status", "unknown")
        super().__init__(f"server {server!r} is {status}" + (f": {error}" if error else ""))
        self.server = server
        self.state = state
