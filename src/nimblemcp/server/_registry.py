"""The registry: what one server serves, by name or URI.

Its tools, prompts, resources and resource templates (each an entry built once at
registration: schemas, validators, wire definitions), the fallback completer and the
extensions the server declares. `Server` fills it (its decorators, `mount`, a proxy's
mirror); the dispatcher only reads it, and only `served`: the tables of what is served
now (`_visibility`: tags and switches), the registry's own tables themselves when no rule
is set. Capabilities follow what is registered (DISC-04), served or not, so that a
component switched on later is announced through the same capability.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nimblemcp.errors import ResourceNotFound
from nimblemcp.server._prompts import PromptEntry
from nimblemcp.server._resources import ResourceEntry, TemplateEntry
from nimblemcp.server._tools import ToolEntry
from nimblemcp.server._visibility import Visibility

__all__ = ["Registry", "Tables"]


class Tables:
    """Tools, prompts, resources and templates by name or URI."""

    __slots__ = ("prompts", "resources", "templates", "tools")

    def __init__(self) -> None:
        self.tools: dict[str, ToolEntry] = {}
        self.prompts: dict[str, PromptEntry] = {}
        self.resources: dict[str, ResourceEntry] = {}
        self.templates: dict[str, TemplateEntry] = {}

    def template_for(self, uri: str) -> tuple[TemplateEntry, dict[str, str]]:
        """The first template matching `uri` and its variables; `ResourceNotFound` when
        none does."""
        for template in self.templates.values():
            values = template.match(uri)
            if values is not None:
                return template, values
        raise ResourceNotFound(uri)


class Registry(Tables):
    """The tables of one server; see the module docstring."""

    __slots__ = ("completer", "extensions", "replaced", "served", "withheld")

    def __init__(self) -> None:
        super().__init__()
        # `@server.completion`: fn(ref, argument name, value, context arguments).
        self.completer: Callable[..., Any] | None = None
        self.extensions: dict[str, dict[str, Any]] = {}
        self.served: Tables = self
        # (table, key) of mounted copies whose own server does not serve them (`_mount`).
        self.withheld: set[tuple[str, str]] = set()
        # (table, key) of sources a derived tool replaces (`derive_tool(hide_source=True)`).
        self.replaced: set[tuple[str, str]] = set()

    def refresh(self, visibility: Visibility) -> None:
        """Recompute `served` after a registration or a rule changed."""
        withheld = self.withheld | self.replaced
        if not visibility.filters and not withheld:
            self.served = self
            return
        served = Tables()
        for table in ("tools", "prompts", "resources", "templates"):
            getattr(served, table).update(
                (key, entry) for key, entry in getattr(self, table).items()
                if (table, key) not in withheld and visibility.serves(table, key, entry))
        self.served = served

    def capabilities(self, *, subscriptions: bool, logging: bool) -> dict[str, Any]:
        """The capabilities matching what is registered (DISC-04)."""
        caps: dict[str, Any] = {}
        live = {"listChanged": True} if subscriptions else {}
        if self.tools:
            caps["tools"] = dict(live)
        if self.resources or self.templates:
            caps["resources"] = {"subscribe": True, **live} if subscriptions else {}
        if self.prompts:
            caps["prompts"] = dict(live)
        if self.prompts or self.templates or self.completer is not None:
            caps["completions"] = {}
        if logging:
            caps["logging"] = {}
        if self.extensions:
            caps["extensions"] = dict(self.extensions)
        return caps
