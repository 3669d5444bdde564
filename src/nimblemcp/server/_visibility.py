"""Which registered components a server serves: tags, and switches flipped at run time.

A tool, prompt, resource or template may carry tags (`@server.tool(tags={"admin"})`).
`Server(include_tags=..., exclude_tags=...)` is the deployment's choice, fixed for the
server's life: with `include_tags`, only components carrying one of them are served;
a component carrying one of `exclude_tags` never is. Within that, `server.disable(...)`
and `server.enable(...)` switch components off and on while serving, by name (URI for
resources and templates) or by tag; a switch by name outranks one by tag, so
`disable(tags={"beta"})` then `enable(tool="search")` serves `search` alone of the beta
components.

A component that is not served is as if it were not registered: absent from lists,
and calling, reading or completing it gets the error an unknown name gets. Its
registration stays: switching it on again serves the same entry.

`Visibility` holds the rules and decides; `Switches` is the part that changes at run
time, versioned so that instances sharing a bus apply the newest one (see
`Server._share_switches`). No I/O here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["KINDS", "Switches", "Visibility", "switch_keys", "tag_set"]

# Registry table -> the singular word the API uses (`disable(tool=...)`).
KINDS = {"tools": "tool", "prompts": "prompt", "resources": "resource", "templates": "template"}

NO_TAGS: frozenset[str] = frozenset()


def tag_set(tags: Iterable[str] | None) -> frozenset[str]:
    """`tags` checked: strings, not one string (whose letters would each be a tag)."""
    if tags is None:
        return NO_TAGS
    if isinstance(tags, str):
        raise TypeError(f"tags must be a collection of strings, e.g. {{{tags!r}}}, not one string")
    found = frozenset(tags)
    for tag in found:
        if not isinstance(tag, str) or not tag:
            raise TypeError(f"a tag must be a non-empty string, not {tag!r}")
    return found


@dataclass(frozen=True)
class Switches:
    """The run-time switches: `names` maps (table, name or URI) to on/off, `tags` maps a
    tag to on/off. `version` orders them across instances (newest wins)."""

    names: Mapping[tuple[str, str], bool] = field(default_factory=dict)
    tags: Mapping[str, bool] = field(default_factory=dict)
    version: int = 0

    def with_names(self, keys: Iterable[tuple[str, str]], on: bool) -> Switches:
        return Switches({**self.names, **dict.fromkeys(keys, on)}, self.tags, _next(self.version))

    def with_tags(self, tags: Iterable[str], on: bool) -> Switches:
        return Switches(self.names, {**self.tags, **dict.fromkeys(tags, on)}, _next(self.version))

    def encode(self) -> str:
        return orjson.dumps({
            "v": self.version,
            "n": [[table, key, on] for (table, key), on in sorted(self.names.items())],
            "t": sorted(self.tags.items()),
        }).decode()

    @classmethod
    def decode(cls, text: str | bytes) -> Switches | None:
        """The switches `encode` wrote; None for anything else (another writer's bytes)."""
        try:
            data = orjson.loads(text)
            names = {(str(t), str(k)): bool(on) for t, k, on in data["n"] if t in KINDS}
            tags = {str(tag): bool(on) for tag, on in data["t"]}
            version = int(data["v"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None
        return cls(names, tags, version)


def _next(version: int) -> int:
    """A version above `version` and, across instances, above older changes (a clock)."""
    return max(version + 1, time.time_ns())


class Visibility:
    """The rules of one server; `serves` is asked once per component on each change,
    never per request."""

    __slots__ = ("exclude", "include", "switches")

    def __init__(self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None) -> None:
        self.include = None if include is None else tag_set(include)
        self.exclude = tag_set(exclude)
        self.switches = Switches()

    @property
    def filters(self) -> bool:
        """Whether any rule is set (otherwise everything registered is served)."""
        s = self.switches
        return self.include is not None or bool(self.exclude) or bool(s.names) or bool(s.tags)

    def serves(self, table: str, key: str, entry: Any) -> bool:
        tags: frozenset[str] = getattr(entry, "tags", NO_TAGS)
        if self.include is not None and not tags & self.include:
            return False
        if tags & self.exclude:
            return False
        by_name = self.switches.names.get((table, key))
        if by_name is not None:
            return by_name
        return all(self.switches.tags.get(tag, True) for tag in tags)


def switch_keys(tables: Any, *, tool: str | Iterable[str] | None, prompt: str | Iterable[str] | None,
                resource: str | Iterable[str] | None) -> list[tuple[str, str]]:
    """The (table, key) pairs `enable`/`disable` name; KeyError for one not registered
    (a typo would otherwise switch nothing, silently). `resource` is a resource's URI
    or a template's URI template."""
    keys: list[tuple[str, str]] = []
    for given, tables_to_search, word in ((tool, ("tools",), "tool"), (prompt, ("prompts",), "prompt"),
                                          (resource, ("resources", "templates"), "resource")):
        for name in _names(given):
            table = next((t for t in tables_to_search if name in getattr(tables, t)), None)
            if table is None:
                raise KeyError(f"no {word} {name!r} is registered")
            keys.append((table, name))
    return keys


def _names(given: str | Iterable[str] | None) -> list[str]:
    if given is None:
        return []
    return [given] if isinstance(given, str) else list(given)
