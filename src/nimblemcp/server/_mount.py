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

A `Mount` works on the two registries; `Server.mount` checks the servers and keeps the
copies in step. Must not import transports or the Server.
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any

from nimblemcp.server._resources import compile_template

if TYPE_CHECKING:
    from nimblemcp.server._context import Context
    from nimblemcp.server._invoke import Runner
    from nimblemcp.server._registry import Registry

__all__ = ["Mount", "check_namespace", "mounts_below", "prefix_uri", "rules_in_force"]

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


def check_namespace(namespace: str | None) -> None:
    if namespace is not None and not _NAMESPACE.match(namespace):
        raise ValueError(f"namespace {namespace!r} must be 1-64 characters of A-Z a-z 0-9 _ -")


def _at_home(run: Runner, owner: Any) -> Runner:
    """`run` with `ctx.server` set to `owner` while the function runs."""

    async def run_at_home(ctx: Context, kwargs: dict[str, Any]) -> Any:
        home = ctx.server
        ctx.server = owner
        try:
            return await run(ctx, kwargs)
        finally:
            ctx.server = home

    return run_at_home


def _copy(entry: Any, owner: Any, **changes: Any) -> Any:
    """A copy of `entry` under its new names, whose function runs at `owner`'s."""
    new = copy.copy(entry)
    for attr, value in changes.items():
        setattr(new, attr, value)
    new.run = _at_home(entry.run, owner)
    return new


class Mount:
    """One child registry served from a host registry under `namespace`: which host
    names came from it, and how to re-sync them. `owner` is the child's server (what
    its handlers see as `ctx.server`); `host_name` and `child_name` name both in errors."""

    def __init__(
        self, host: Registry, child: Registry, namespace: str | None, owner: Any,
        host_name: str, child_name: str,
    ) -> None:
        self.host = host
        self.child = child
        self.namespace = namespace
        self.owner = owner
        self.host_name = host_name
        self.child_name = child_name
        self.names: dict[str, list[str]] = {"tools": [], "prompts": [], "resources": [], "templates": []}

    def name(self, name: str) -> str:
        return f"{self.namespace}_{name}" if self.namespace else name

    def sync(self, kind: str) -> None:
        """Replace the host's copies of one kind ("tools", "prompts", "resources"). What
        the child registers but does not serve (`_visibility`) is copied withheld: the
        host serves it once the child does (its capabilities stay those of the copies)."""
        host, child, owner = self.host, self.child, self.owner
        if kind == "tools":
            self._replace("tools", host.tools, {
                self.name(n): _copy(e, owner, name=self.name(n),
                                    definition={**e.definition, "name": self.name(n)})
                for n, e in child.tools.items()})
        elif kind == "prompts":
            self._replace("prompts", host.prompts, {
                self.name(n): _copy(e, owner, name=self.name(n),
                                    definition={**e.definition, "name": self.name(n)})
                for n, e in child.prompts.items()})
        elif kind == "resources":
            self._replace("resources", host.resources, {
                prefix_uri(u, self.namespace): _copy(
                    e, owner, uri=prefix_uri(u, self.namespace),
                    definition={**e.definition, "uri": prefix_uri(u, self.namespace)})
                for u, e in child.resources.items()})
            templates: dict[str, Any] = {}
            for u, e in child.templates.items():
                moved = prefix_uri(u, self.namespace)
                pattern, variables = compile_template(moved)
                templates[moved] = _copy(e, owner, uri_template=moved, pattern=pattern, variables=variables,
                                         definition={**e.definition, "uriTemplate": moved})
            self._replace("templates", host.templates, templates)

    def _replace(self, key: str, table: dict[str, Any], fresh: dict[str, Any]) -> None:
        for old in self.names[key]:
            table.pop(old, None)
            self.host.withheld.discard((key, old))
        clash = [n for n in fresh if n in table]
        if clash:
            raise ValueError(f"mounting {self.child_name!r}: {key} {clash} already registered on "
                             f"{self.host_name!r} (choose another namespace)")
        table.update(fresh)
        self.names[key] = list(fresh)
        served = getattr(self.child.served, key)
        mine = getattr(self.child, key)
        for child_key, host_key in zip(mine, fresh, strict=True):
            if child_key not in served:
                self.host.withheld.add((key, host_key))

    def rules(self) -> _Rules:
        """The child's rules in force, under the host's names (a template rule's key is
        its URI template, renamed like the template)."""
        renamed: _Rules = {}
        for (method, target), scopes in self.owner.scope_rules.items():
            moved = prefix_uri(target, self.namespace) if method == "resources/read" else self.name(target)
            renamed[(method, moved)] = scopes
        return renamed


def rules_in_force(server: Any) -> _Rules:
    """`server`'s own scope rules joined with those of every server mounted in it, by
    host name; where both name one target, a token needs the scopes of both. A derived
    tool (`_transform`) needs its source's scopes too."""
    rules = dict(server._own_scope_rules)
    for link in server._mount_links:
        for key, scopes in link.rules().items():
            rules[key] = rules.get(key, frozenset()) | scopes
    for name, derivation in server._derivations.items():  # a derived tool needs its source's
        source = rules.get(("tools/call", derivation.source))
        if source:
            rules[("tools/call", name)] = rules.get(("tools/call", name), frozenset()) | source
    return rules


def mounts_below(server: Any) -> set[int]:
    """Ids of `server` and every server mounted in it, however deep."""
    seen: set[int] = set()
    pending = [server]
    while pending:
        current = pending.pop()
        if id(current) not in seen:
            seen.add(id(current))
            pending.extend(current.mounted)
    return seen
