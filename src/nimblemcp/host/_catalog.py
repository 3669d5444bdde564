"""One catalog over many servers: collision-free names and the routing table behind them.

A `Catalog` is an immutable snapshot built from each connected server's lists (tools,
prompts, resources, resource templates). Tools and prompts get a *qualified* name that
is unique in the catalog and safe for model APIs (`^[A-Za-z0-9_-]{1,64}$` by default);
`resolve()` maps it back to `(server, original name)`. Resources keep their URIs; a
URI is routed to the server that listed it, or to the one server whose template matches.

Naming is a `NameScheme`: `always=True` (default) prefixes every name with its server
(`docs__read_doc`), `always=False` keeps a bare name while it is unique and prefixes
only the colliding ones. `qualify=` replaces the formatting entirely. Whatever the
scheme returns is sanitised, cut to `max_length`, and de-duplicated with a `_2`, `_3`
suffix, so two servers can never end up sharing a name. A server's namespace is its
own: a bare name that looks qualified (`notes__delete` from any server but `notes`)
is qualified too, and qualified names are given out before bare ones, so no server
can take another's name (issue 37). Items that are not objects with the naming key
are skipped, never raised on.
Pure data: no I/O; imports nothing from nimblemcp.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Catalog", "CatalogItem", "ItemKind", "NameScheme", "ServerLists", "match_template"]

ItemKind = Literal["tool", "prompt", "resource", "template"]


@dataclass(frozen=True, slots=True)
class CatalogItem:
    """One tool, prompt, resource or template of one server.

    `name` is the catalog-wide name (qualified for tools and prompts, the URI or URI
    template for the others), `original` the server's own name (or URI), `definition`
    the server's wire object, untouched."""

    name: str
    server: str
    original: str
    kind: ItemKind
    definition: Mapping[str, Any] = field(repr=False)

    def as_definition(self) -> dict[str, Any]:
        """The wire definition under its catalog name (what a model is shown)."""
        if self.kind in ("tool", "prompt"):
            return {**self.definition, "name": self.name}
        return dict(self.definition)

    @property
    def annotations(self) -> Mapping[str, Any]:
        found = self.definition.get("annotations")
        return found if isinstance(found, Mapping) else {}


@dataclass(frozen=True, slots=True)
class ServerLists:
    """What one server listed (each may be empty: the server lacks the capability)."""

    tools: Sequence[Mapping[str, Any]] = ()
    prompts: Sequence[Mapping[str, Any]] = ()
    resources: Sequence[Mapping[str, Any]] = ()
    templates: Sequence[Mapping[str, Any]] = ()


class NameScheme:
    """How a server's tool or prompt name becomes a catalog name.

    `separator` joins server and name; `always` says whether unique names are prefixed
    too; `qualify(server, name)` overrides the formatting; `max_length` and `pattern`
    (the characters *not* allowed, replaced by `_`) keep names valid for model APIs."""

    def __init__(
        self, separator: str = "__", *, always: bool = True,
        qualify: Callable[[str, str], str] | None = None, max_length: int = 64,
        pattern: str = r"[^A-Za-z0-9_-]",
    ) -> None:
        if max_length < 8:
            raise ValueError("max_length must be at least 8")
        self.separator = separator
        self.always = always
        self.qualify = qualify
        self.max_length = max_length
        self._bad = re.compile(pattern)

    def format(self, server: str, name: str) -> str:
        if self.qualify is not None:
            return self.qualify(server, name)
        return f"{server}{self.separator}{name}"

    def clean(self, name: str) -> str:
        return self._bad.sub("_", name)[: self.max_length] or "_"

    def assign(self, pairs: Sequence[tuple[str, str]], servers: Iterable[str] = ()) -> list[str]:
        """Unique catalog names for `(server, name)` pairs, in order (deterministic).

        `servers` are the group's servers (connected or not) whose namespaces are
        reserved: with `always=False` a bare name inside one of them is qualified."""
        counts: dict[str, int] = {}
        for _, name in pairs:
            counts[name] = counts.get(name, 0) + 1
        bare = [False] * len(pairs)
        if not self.always:
            owners = {*servers, *(server for server, _ in pairs)}
            # the namespaces `server__*` (the default format; a custom `qualify` reserves
            # the names it gives the listed items)
            prefixes = tuple(self.clean(self.format(s, "")) for s in owners
                             ) if self.qualify is None else ()
            qualified = {self.clean(self.format(server, name)) for server, name in pairs}
            bare = [counts[name] == 1 and self.clean(name) not in qualified
                    and not self.clean(name).startswith(prefixes) for _, name in pairs]
        taken: set[str] = set()
        names = [""] * len(pairs)
        # qualified names first: on a clash, a server's own namespace wins over a bare name
        for index in sorted(range(len(pairs)), key=lambda i: bare[i]):
            server, name = pairs[index]
            wanted = self.clean(name if bare[index] else self.format(server, name))
            candidate = wanted
            number = 1
            while candidate in taken:
                number += 1
                suffix = f"_{number}"
                candidate = wanted[: self.max_length - len(suffix)] + suffix
            taken.add(candidate)
            names[index] = candidate
        return names


class Catalog:
    """A snapshot of every connected server's tools, prompts, resources and templates."""

    def __init__(
        self, lists: Mapping[str, ServerLists] | None = None, scheme: NameScheme | None = None,
        *, servers: Iterable[str] = (),
    ) -> None:
        """`servers`: every server of the group, connected or not (their namespaces
        are reserved, see `NameScheme.assign`)."""
        self.scheme = scheme or NameScheme()
        lists = lists or {}
        self._servers = {*servers, *lists}
        self.tools: list[CatalogItem] = self._named("tool", [
            (server, tool) for server, got in lists.items() for tool in got.tools
        ])
        self.prompts: list[CatalogItem] = self._named("prompt", [
            (server, prompt) for server, got in lists.items() for prompt in got.prompts
        ])
        self.resources: list[CatalogItem] = [
            CatalogItem(r["uri"], server, r["uri"], "resource", r)
            for server, got in lists.items() for r in got.resources if _keyed(r, "uri")
        ]
        self.templates: list[CatalogItem] = [
            CatalogItem(t["uriTemplate"], server, t["uriTemplate"], "template", t)
            for server, got in lists.items() for t in got.templates if _keyed(t, "uriTemplate")
        ]
        self._by_name = {item.name: item for item in [*self.tools, *self.prompts]}
        self._tools = {item.name: item for item in self.tools}
        self._prompts = {item.name: item for item in self.prompts}
        self._uris: dict[str, list[CatalogItem]] = {}
        for item in self.resources:
            self._uris.setdefault(item.name, []).append(item)

    def _named(self, kind: ItemKind, found: list[tuple[str, Mapping[str, Any]]]) -> list[CatalogItem]:
        valid = [(server, d) for server, d in found if _keyed(d, "name")]
        names = self.scheme.assign([(server, str(d["name"])) for server, d in valid],
                                   self._servers)
        return [CatalogItem(qualified, server, str(d["name"]), kind, d)
                for qualified, (server, d) in zip(names, valid, strict=True)]

    def tool(self, name: str) -> CatalogItem | None:
        """The tool with this catalog name (or `SERVER.TOOL` / `SERVER/TOOL`)."""
        return self._tools.get(name) or self._by_pair(self.tools, name)

    def prompt(self, name: str) -> CatalogItem | None:
        return self._prompts.get(name) or self._by_pair(self.prompts, name)

    @staticmethod
    def _by_pair(items: Iterable[CatalogItem], name: str) -> CatalogItem | None:
        for sep in (".", "/"):
            server, found, original = name.partition(sep)
            if found:
                for item in items:
                    if item.server == server and item.original == original:
                        return item
        return None

    def resolve(self, name: str) -> tuple[str, str] | None:
        """`(server, original name)` for a catalog tool or prompt name."""
        item = self._by_name.get(name)
        return (item.server, item.original) if item is not None else None

    def servers_for_uri(self, uri: str) -> list[str]:
        """The servers that can read `uri`: those that list it, else those whose
        template matches it (each server once, in catalog order)."""
        listed = [item.server for item in self._uris.get(uri, [])]
        if listed:
            return list(dict.fromkeys(listed))
        matched = [t.server for t in self.templates if match_template(t.name, uri) is not None]
        return list(dict.fromkeys(matched))

    def by_server(self, server: str) -> ServerLists:
        def defs(items: list[CatalogItem]) -> list[Mapping[str, Any]]:
            return [i.definition for i in items if i.server == server]

        return ServerLists(defs(self.tools), defs(self.prompts), defs(self.resources),
                           defs(self.templates))

    def __len__(self) -> int:
        return len(self.tools) + len(self.prompts) + len(self.resources) + len(self.templates)


def _keyed(item: Any, key: str) -> bool:
    return isinstance(item, Mapping) and isinstance(item.get(key), str)


_EXPRESSION = re.compile(r"\{([+#./;?&]?)([^}]*)\}")


def match_template(template: str, uri: str) -> dict[str, str] | None:
    """The variables of `uri` under an RFC 6570 template, or None when it does not match.

    Simple (`{x}`: no `/`) and reserved (`{+x}`, `{#x}`: anything) expansions are matched;
    query-style expressions (`{?x}`, `{&x}`) match an optional query string."""
    parts: list[str] = []
    names: list[str] = []
    last = 0
    for expression in _EXPRESSION.finditer(template):
        parts.append(re.escape(template[last:expression.start()]))
        operator, variables = expression.group(1), expression.group(2)
        if operator in ("?", "&"):
            parts.append(r"(?:[?&][^#]*)?")
        else:
            for index, variable in enumerate(v.strip().rstrip("*") for v in variables.split(",")):
                key = re.sub(r"\W", "_", variable) or f"v{len(names)}"
                names.append(key)
                if index:
                    parts.append(",")
                parts.append(f"(?P<{key}_{len(names)}>.*?)" if operator in ("+", "#")
                             else f"(?P<{key}_{len(names)}>[^/?#]*?)")
        last = expression.end()
    parts.append(re.escape(template[last:]))
    found = re.fullmatch("".join(parts), uri)
    if found is None:
        return None
    return {name: found.group(f"{name}_{i}") for i, name in enumerate(names, 1)}
