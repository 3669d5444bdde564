"""The host's consent hook before every tool call: allow, deny, or ask the user.

    group = ClientGroup(config, policy=AnnotationPolicy(trusted={"docs"}), confirm=ask_user)

A policy is any callable `(ToolCall) -> "allow" | "deny" | "ask"` (sync or async).
"ask" goes to the group's `confirm(ToolCall) -> bool` callback (the consent UI); with
no `confirm`, "ask" means no. A refused call raises `ToolCallDenied` and never reaches
the server.

`AnnotationPolicy` (the default) reads the tool's annotations with the spec's defaults:
an unannotated tool is *not* read-only, *is* destructive and *is* open-world, so it
asks. Read-only tools that declare `openWorldHint: false` run without asking; so do
tools of servers (or qualified tool names) in `trusted`, and `deny` always refuses.
Annotations are hints from the server, not guarantees: trust only servers you trust.
Imports only `nimblemcp.errors`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from nimblemcp.errors import ToolCallDenied

__all__ = [
    "AnnotationPolicy",
    "Confirm",
    "Decision",
    "ToolCall",
    "ToolCallDenied",
    "ToolPolicy",
    "allow_all",
    "decide",
    "is_risky",
]

Decision = Literal["allow", "deny", "ask"]
"""What a tool policy answers: run it, refuse it, or ask the user (`confirm`)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call about to be made: what a policy and a consent UI see."""

    server: str
    tool: str
    name: str
    arguments: Mapping[str, Any]
    definition: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def annotations(self) -> Mapping[str, Any]:
        found = self.definition.get("annotations")
        return found if isinstance(found, Mapping) else {}

    @property
    def title(self) -> str:
        ann = self.annotations
        title = self.definition.get("title") or ann.get("title")
        return str(title) if title else self.tool


ToolPolicy = Callable[[ToolCall], "Decision | Awaitable[Decision]"]
Confirm = Callable[[ToolCall], "bool | Awaitable[bool]"]


def is_risky(annotations: Mapping[str, Any]) -> bool:
    """True when a tool may change or reach outside its world, by the spec's defaults
    (readOnlyHint false, destructiveHint true, openWorldHint true)."""
    read_only = annotations.get("readOnlyHint") is True
    destructive = not read_only and annotations.get("destructiveHint") is not False
    open_world = annotations.get("openWorldHint") is not False
    return destructive or open_world


class AnnotationPolicy:
    """Ask before risky tools (see `is_risky`), allow the rest.

    `trusted` holds server names or catalog tool names that never ask; `deny` holds
    server names or catalog tool names that are always refused."""

    def __init__(self, *, trusted: Collection[str] = (), deny: Collection[str] = ()) -> None:
        self.trusted = frozenset(trusted)
        self.denied = frozenset(deny)

    def __call__(self, call: ToolCall) -> Decision:
        if call.server in self.denied or call.name in self.denied:
            return "deny"
        if call.server in self.trusted or call.name in self.trusted:
            return "allow"
        return "ask" if is_risky(call.annotations) else "allow"


def allow_all(call: ToolCall) -> Decision:
    """A policy that never asks (tests, trusted automation)."""
    return "allow"


async def decide(call: ToolCall, policy: ToolPolicy, confirm: Confirm | None) -> None:
    """Run the policy (and the user's confirmation); raise ToolCallDenied on no."""
    decision = policy(call)
    if inspect.isawaitable(decision):
        decision = await decision
    if decision == "allow":
        return
    if decision == "deny":
        raise ToolCallDenied(call, "denied by the host's policy")
    if decision != "ask":
        raise ValueError(f"a tool policy returned {decision!r}, not allow/deny/ask")
    if confirm is None:
        raise ToolCallDenied(call, "needs the user's confirmation and no confirm callback is set")
    answer = confirm(call)
    if inspect.isawaitable(answer):
        answer = await answer
    if not answer:
        raise ToolCallDenied(call, "the user declined")
