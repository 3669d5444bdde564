"""`x-mcp-header` rules on tool input schemas (TOOL-11/12, HTTP-15).

`header_rules(tool)` checks every annotation of one tool definition and returns the
property paths to mirror as `Mcp-Param-*` headers, or raises `InvalidToolHeaders`
naming the reason; `param_headers(rules, arguments)` reads the values for one call.
Pure functions over plain dicts: must not import transports, httpx or the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["HeaderRule", "InvalidToolHeaders", "header_rules", "param_headers"]

HeaderRule = tuple[str, tuple[str, ...]]  # (header name suffix, property path)

_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_MAX_SAFE = 2**53 - 1
_KEY = "x-mcp-header"


class InvalidToolHeaders(ValueError):
    """A tool definition whose `x-mcp-header` annotations break TOOL-11."""


def _types_of(schema: Mapping[str, Any]) -> set[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    found: set[str] = set()
    for key in ("anyOf", "oneOf"):  # `T | None` spelled as a union of simple types
        for member in schema.get(key) or []:
            if isinstance(member, dict):
                found |= _types_of(member) or {"?"}
    return found


def _check_annotation(schema: Mapping[str, Any], path: tuple[str, ...]) -> str:
    value = schema[_KEY]
    where = ".".join(path) or "<root>"
    if not isinstance(value, str) or not value:
        raise InvalidToolHeaders(f"{where}: x-mcp-header must be a non-empty string")
    if any(ch not in _TCHAR for ch in value):
        raise InvalidToolHeaders(f"{where}: x-mcp-header {value!r} is not an HTTP token")
    if not path:
        raise InvalidToolHeaders("x-mcp-header on the schema root")
    types = _types_of(schema) - {"null"}
    if not types or not types <= {"string", "integer", "boolean"}:
        raise InvalidToolHeaders(
            f"{where}: x-mcp-header only applies to string, integer or boolean properties"
        )
    return value


def _walk(node: Any, path: tuple[str, ...], via_properties: bool, found: list[HeaderRule]) -> None:
    """Visit every subschema; annotations count only where reached via `properties`."""
    if isinstance(node, list):
        for item in node:
            _walk(item, path, False, found)
        return
    if not isinstance(node, dict):
        return
    if _KEY in node:
        if not via_properties:
            raise InvalidToolHeaders(
                f"{'.'.join(path) or '<root>'}: x-mcp-header is only allowed on a property "
                "reached through `properties` keys alone"
            )
        found.append((_check_annotation(node, path), path))
    for key, child in node.items():
        if key == "properties" and isinstance(child, dict) and via_properties:
            for prop, sub in child.items():
                _walk(sub, (*path, prop), True, found)
        elif key in ("properties", "patternProperties", "$defs", "definitions",
                     "dependentSchemas") and isinstance(child, dict):
            for sub in child.values():
                _walk(sub, path, False, found)
        elif key in ("const", "enum", "default", "examples", "required"):
            continue
        elif isinstance(child, dict | list):
            _walk(child, path, False, found)


def header_rules(tool: Mapping[str, Any]) -> list[HeaderRule]:
    """The `Mcp-Param-*` rules of one tool; raises InvalidToolHeaders (TOOL-11)."""
    schema = tool.get("inputSchema")
    if not isinstance(schema, dict):
        return []
    found: list[HeaderRule] = []
    _walk(schema, (), True, found)
    seen: set[str] = set()
    for name, path in found:
        folded = name.lower()
        if folded in seen:
            raise InvalidToolHeaders(f"{'.'.join(path)}: duplicate x-mcp-header {name!r}")
        seen.add(folded)
    return found


def param_headers(rules: list[HeaderRule], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Values to mirror for one call; absent or null values send no header (HTTP-15)."""
    out: dict[str, Any] = {}
    for name, path in rules:
        node: Any = arguments
        for step in path:
            node = node.get(step) if isinstance(node, dict) else None
            if node is None:
                break
        if node is None:
            continue
        if isinstance(node, bool | str):
            out[name] = node
        elif isinstance(node, int):
            if abs(node) > _MAX_SAFE:
                raise ValueError(f"{'.'.join(path)}: integer out of the header-safe range")
            out[name] = node
        elif isinstance(node, float) and node.is_integer() and abs(node) <= _MAX_SAFE:
            out[name] = int(node)
    return out
