"""The registry: what one server serves, by name or URI.

Its tools, prompts, resources and resource templates (each an entry built once at
registration: schemas, validators, wire definitions), the fallback completer and the
extensions the server declares. `Server` fills it (its decorators, `mount`, a proxy's
mirror); the dispatcher only reads it. Capabilities follow what is registered (DISC-04).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nimblemcp.errors import ResourceNotFound
from nimblemcp.server._prompts import PromptEntry
from nimblemcp.server._resources import ResourceEntry, TemplateEntry
from nimblemcp.server._tools import ToolEntry

__all__ = ["Registry"]


class Registry:
    """The tables of one server; see the module docstring."""

    __slots__ = ("completer", "extensions", "prompts", "resources", "templates", "tools")

    def __init__(self) -> None:
        self.tools: dict[str, ToolEntry] = {}
        self.prompts: dict[str, PromptEntry] = {}
        self.resources: dict[str, ResourceEntry] = {}
        self.templates: dict[str, TemplateEntry] = {}
        # `@server.completion`: fn(ref, argument name, value, context arguments).
        self.completer: Callable[..., Any] | None = None
        self.extensions: dict[str, dict[str, Any]] = {}

    def template_for(self, uri: str) -> tuple[TemplateEntry, dict[str, str]]:
        """The first template matching `uri` and its variables; `ResourceNotFound` when
        none does."""
        for template in self.templates.values():
            values = template.match(uri)
            if values is not None:
                return template, values
        raise ResourceNotFound(uri)

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
