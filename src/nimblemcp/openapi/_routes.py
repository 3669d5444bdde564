"""Route maps: which operations become tools, resources, resource templates, or nothing.

The maps are tried in order; the first that matches an operation decides, and an
operation no map matches becomes a tool. So the default (no maps) serves every
operation as a tool, which every MCP client can call. `GET_AS_RESOURCES` serves GET
operations as resources instead: without path parameters a resource
(`api://store/inventory`), with them a template (`api://pet/{petId}`). A GET that needs
a query parameter stays a tool (a resource URI has no place for it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from nimblemcp.openapi._operations import Route

__all__ = ["GET_AS_RESOURCES", "Kind", "RouteMap", "kind_of"]

Kind = Literal["tool", "resource", "template", "exclude"]
_KINDS = ("tool", "resource", "template", "exclude")


@dataclass(frozen=True, slots=True)
class RouteMap:
    """Match operations and say what they become.

        RouteMap(methods=["GET"], pattern=r"^/admin/", kind="exclude")
        RouteMap(tags={"internal"}, kind="exclude")
        RouteMap(when=lambda route: "deprecated" in route.operation, kind="exclude")

    An operation matches when its method is in `methods` ("*": any), `pattern` (a
    regular expression) is found in its path, it carries every tag of `tags`, and
    `when(route)` (if given) is true. `kind` is "tool", "resource" (a GET without
    path parameters), "template" (a GET with them) or "exclude"; "resource" on an
    operation with path parameters serves it as a template, and either on one that
    is not a GET or that needs a query parameter serves it as a tool."""

    kind: Kind = "tool"
    methods: Sequence[str] | Literal["*"] = "*"
    pattern: str = ""
    tags: frozenset[str] | set[str] = field(default_factory=frozenset)
    when: Callable[[Route], bool] | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"RouteMap kind must be one of {', '.join(_KINDS)}, not {self.kind!r}")
        re.compile(self.pattern)  # a bad pattern fails here, not at the first match

    def matches(self, route: Route) -> bool:
        if self.methods != "*" and route.method not in {m.upper() for m in self.methods}:
            return False
        if self.pattern and re.search(self.pattern, route.path) is None:
            return False
        if not set(self.tags) <= set(route.tags):
            return False
        return self.when is None or bool(self.when(route))


GET_AS_RESOURCES: tuple[RouteMap, ...] = (
    RouteMap(kind="template", methods=["GET"], pattern=r"\{[^}]+\}"),
    RouteMap(kind="resource", methods=["GET"]),
)
"""Route maps serving GET operations as resources: with path parameters a resource
template (`api://pets/{petId}`), without them a resource (`api://store/inventory`).
`routes=[RouteMap(kind="exclude", tags={"admin"}), *GET_AS_RESOURCES]` adds your own first."""


def kind_of(route: Route, maps: Sequence[RouteMap]) -> Kind:
    for route_map in maps:
        if route_map.matches(route):
            return route_map.kind
    return "tool"
