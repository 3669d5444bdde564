"""Composition: one server's tools, prompts and resources served by another.

`host.mount(child, namespace="notes")` copies the child's registry entries into the
host under new names: tool and prompt `search` becomes `notes_search`, resource
`notes://a` becomes `notes://notes/a` (the namespace is the URI's first path segment,
right after `scheme://`), and so do templates. Schemas, annotations, validators and
completers are shared, not rebuilt. The copies stay in step with the child: a
registration or removal on the child re-syncs that kind on the host (the host's list
change is published), and `child.notify_resource_updated(uri)` reaches the host's
subscribers under the prefixed URI. A mounted handler runs with `ctx.server` set to
the child, so `ctx.lifespan` is the child's lifespan value; the host starts and stops
the child's lifespan inside its own. The host's middleware wraps the mounted entries
like its own (the child's middleware is not used). The child's `require_scopes` rules
come along under the new names (`rules_in_force`), also those declared after the mount
or on names the child registers later (a proxy's mirror), through nested mounts; a
rule the host declares on the same name adds to them. A mount that would close a
cycle is refused.

Must not import transports.
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any

from nimblemcp.server._invoke import Invocable
from nimblemcp.server._resources import compile_template
from nimblemcp.server._tools import ToolEntry

if TYPE_CHECKING:
    from nimblemcp.server._context import Context
    from nimblemcp.server._server import Server

__all__ = ["mount", "prefix_uri", "rules_in_force"]

_Rules = dict[tuple[str, str], frozenset[str]]

_NAMESPACE = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


def prefix_uri(uri: str, namespace: str | None) -> str:
    """`scheme://rest` -> `scheme://namespace/rest`; `scheme:rest` -> `scheme:namespace/rest`."""
    if not namespace:
        return uri
    scheme, sep, rest = uri.partition("://")
    if sep:
        return f"{scheme}://{namespace}/{rest}"
    scheme, _, rest = uri.partition(":")
    return f"{scheme}:{namespace}/{rest}"


def unprefix_uri(uri: str, namespace: str | None) -> str | None:
    """The child's URI for a host URI, or None when it is not under the namespace."""
    if not namespace:
        return uri
    scheme, sep, rest = uri.partition("://")
    if not sep:
        scheme, sep, rest = uri.partition(":")
    head = namespace + "/"
    if not sep or not rest.startswith(head):
        return None
    return f"{scheme}{sep}{rest[len(head):]}"


_homed: dict[tuple[type, int], type] = {}


def _homed_class(cls: type[Invocable], owner: Server) -> type[Invocable]:
    """A subclass of `cls` whose calls run with `ctx.server` set to `owner` (one per mount)."""
    key = (cls, id(owner))
    made = _homed.get(key)
    if made is None:
        base_invoke = cls.invoke  # a mounted server's own mounts keep their owner

        async def invoke(self: Invocable, ctx: Context, arguments: Any) -> Any:
            home = ctx.server
            ctx.server = owner
            try:
                return await base_invoke(self, ctx, arguments)
            finally:
                ctx.server = home

        namespace: dict[str, Any] = {"__slots__": (), "invoke": invoke, "owner": owner}
        if issubclass(cls, ToolEntry):
            namespace["call"] = invoke  # ToolEntry.call is bound to Invocable.invoke itself
        made = _homed[key] = type(f"Mounted{cls.__name__}", (cls,), namespace)
    return made


def _copy(entry: Any, owner: Server, **changes: Any) -> Any:
    new = copy.copy(entry)
    for attr, value in changes.items():
        setattr(new, attr, value)
    new.__class__ = _homed_class(type(entry), owner)
    return new


class _Mount:
    """One mounted child: which host names came from it, and how to re-sync them."""

    def __init__(self, host: Server, child: Server, namespace: str | None) -> None:
        self.host = host
        self.child = child
        self.namespace = namespace
        self.names: dict[str, list[str]] = {"tools": [], "prompts": [], "resources": [], "templates": []}

    def name(self, name: str) -> str:
        return f"{self.namespace}_{name}" if self.namespace else name

    def sync(self, kind: str) -> None:
        """Replace the host's copies of one kind ("tools", "prompts", "resources")."""
        host, child = self.host, self.child
        if kind == "tools":
            self._replace("tools", host.tools, {
                self.name(n): _copy(e, child, name=self.name(n),
                                    definition={**e.definition, "name": self.name(n)})
                for n, e in child.tools.items()})
        elif kind == "prompts":
            self._replace("prompts", host.prompts, {
                self.name(n): _copy(e, child, name=self.name(n),
                                    definition={**e.definition, "name": self.name(n)})
                for n, e in child.prompts.items()})
        elif kind == "resources":
            self._replace("resources", host.resources, {
                prefix_uri(u, self.namespace): _copy(
                    e, child, uri=prefix_uri(u, self.namespace),
                    definition={**e.definition, "uri": prefix_uri(u, self.namespace)})
                for u, e in child.resources.items()})
            templates: dict[str, Any] = {}
            for u, e in child.templates.items():
                moved = prefix_uri(u, self.namespace)
                pattern, variables = compile_template(moved)
                templates[moved] = _copy(e, child, uri_template=moved, pattern=pattern, variables=variables,
                                         definition={**e.definition, "uriTemplate": moved})
            self._replace("templates", host.templates, templates)

    def _replace(self, key: str, table: dict[str, Any], fresh: dict[str, Any]) -> None:
        for old in self.names[key]:
            table.pop(old, None)
        clash = [n for n in fresh if n in table]
        if clash:
            raise ValueError(f"mounting {self.child.name!r}: {key} {clash} already registered on "
                             f"{self.host.name!r} (choose another namespace)")
        table.update(fresh)
        self.names[key] = list(fresh)

    def rules(self) -> _Rules:
        """The child's rules in force, under the host's names (a template rule's key is
        its URI template, renamed like the template)."""
        renamed: _Rules = {}
        for (method, target), scopes in self.child.scope_rules.items():
            moved = prefix_uri(target, self.namespace) if method == "resources/read" else self.name(target)
            renamed[(method, moved)] = scopes
        return renamed

    def on_child_change(self, kind: str) -> None:
        self.sync(kind)
        self.host._changed(kind)

    def on_child_update(self, uri: str) -> None:
        self.host.notify_resource_updated(prefix_uri(uri, self.namespace))


def rules_in_force(server: Server) -> _Rules:
    """`server`'s own scope rules joined with those of every server mounted in it, by
    host name; where both name one target, a token needs the scopes of both."""
    rules = dict(server._own_scope_rules)
    for link in server._mount_links:
        for key, scopes in link.rules().items():
            rules[key] = rules.get(key, frozenset()) | scopes
    return rules


def _mounts_below(server: Server) -> set[int]:
    """Ids of `server` and every server mounted in it, however deep."""
    seen: set[int] = set()
    pending = [server]
    while pending:
        current = pending.pop()
        if id(current) not in seen:
            seen.add(id(current))
            pending.extend(current.mounted)
    return seen


def mount(host: Server, child: Server, namespace: str | None) -> None:
    """Serve `child`'s registry from `host` (see the module docstring)."""
    if child is host:
        raise ValueError("a server cannot mount itself")
    if id(host) in _mounts_below(child):
        raise ValueError(f"server {child.name!r} already serves {host.name!r} (a mount cycle)")
    if child in host.mounted:
        raise ValueError(f"server {child.name!r} is already mounted on {host.name!r}")
    if namespace is not None and not _NAMESPACE.match(namespace):
        raise ValueError(f"namespace {namespace!r} must be 1-64 characters of A-Z a-z 0-9 _ -")
    link = _Mount(host, child, namespace)
    for kind in ("tools", "prompts", "resources"):
        link.sync(kind)
    for ext, value in child.extensions.items():
        host.extensions.setdefault(ext, value)
    host.mounted.append(child)
    host._mount_links.append(link)
    child.change_listeners.append(link.on_child_change)
    child.update_listeners.append(link.on_child_update)
    for kind in ("tools", "prompts", "resources"):
        host._changed(kind)
