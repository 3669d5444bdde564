"""`x-mcp-header` rules and the HTTP header value codec, for client and server alike.

The rules (TOOL-11): `header_rules(tool)` walks one tool definition's `inputSchema`
strictly and returns the `HeaderRule`s to mirror as `Mcp-Param-*` headers, or raises
`InvalidToolHeaders` naming the reason. The server runs it once when a tool is
registered (and refuses an invalid tool); the client runs it once per listed tool (and
drops an invalid one, TOOL-12). Both sides therefore agree on every tool.

The values (HTTP-13..16): `value_at` reads the argument at a rule's path;
`param_headers` gives the client the values to send, `encode_header_value` spells one
on the wire (plain, or `=?base64?...?=`); the server's `decode_header_value` reverses
it and `header_matches` compares it with the body. The same codec serves `Mcp-Name`.

Pure functions over plain dicts and bytes: imports only `nimblemcp.errors`; no I/O,
no server, transport or client imports.
"""

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

from nimblemcp.errors import HeaderMismatch, InvalidToolHeaders
from nimblemcp.types._http import PARAM_HEADER_PREFIX

__all__ = [
    "PARAM_HEADER_PREFIX",
    "HeaderRule",
    "InvalidToolHeaders",
    "decode_header_value",
    "encode_header_value",
    "header_matches",
    "header_rules",
    "param_headers",
    "value_at",
]

KEY: Final = "x-mcp-header"
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_MAX_SAFE = 2**53 - 1
_SENTINEL_START: Final = "=?base64?"
_SENTINEL_END: Final = "?="
_B_SENTINEL_START: Final = _SENTINEL_START.encode()
_B_SENTINEL_END: Final = _SENTINEL_END.encode()
# RFC 9110 field-value characters (HTTP-13); deleting them leaves what is not allowed.
_FIELD_VALUE_BYTES = b"\t" + bytes(range(0x20, 0x7F))


class HeaderRule(NamedTuple):
    """One annotated property: the `Mcp-Param-{name}` suffix and its `properties` path."""

    name: str
    path: tuple[str, ...]


# --- the rules (TOOL-11) -------------------------------------------------------------


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
    value = schema[KEY]
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
    if KEY in node:
        if not via_properties:
            raise InvalidToolHeaders(
                f"{'.'.join(path) or '<root>'}: x-mcp-header is only allowed on a property "
                "reached through `properties` keys alone"
            )
        found.append(HeaderRule(_check_annotation(node, path), path))
    for key, child in node.items():
        if key == "properties" and isinstance(child, dict) and via_properties:
            for prop, sub in child.items():
                _walk(sub, (*path, str(prop)), True, found)
        elif key in ("properties", "patternProperties", "$defs", "definitions",
                     "dependentSchemas") and isinstance(child, dict):
            for sub in child.values():
                _walk(sub, path, False, found)
        elif key in ("const", "enum", "default", "examples", "required"):
            continue
        elif isinstance(child, dict | list):
            _walk(child, path, False, found)


def header_rules(tool: Mapping[str, Any]) -> list[HeaderRule]:
    """The `Mcp-Param-*` rules of one tool definition; raises InvalidToolHeaders (TOOL-11)."""
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


# --- the values (HTTP-13..16) --------------------------------------------------------


def value_at(arguments: Any, path: Sequence[str]) -> Any:
    """The argument at one exact `properties` path; None when absent (or null)."""
    node = arguments
    for step in path:
        if not isinstance(node, dict):
            return None
        node = node.get(step)
    return node


def param_headers(rules: Sequence[HeaderRule], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Client side: the values to mirror for one call, by header name suffix.

    Absent or null values send no header (HTTP-15); integers outside ±(2^53-1) raise
    ValueError (TOOL-11); an integral float goes as an integer.
    """
    out: dict[str, Any] = {}
    for name, path in rules:
        node = value_at(arguments, path)
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


def encode_header_value(value: str | int | bool) -> str:
    """HTTP-13: booleans as true/false, integers in decimal, strings as-is when they are
    plain printable ASCII without edge whitespace, else `=?base64?<utf-8 b64>?=`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    plain = (
        all(0x20 <= ord(ch) <= 0x7E for ch in value)
        and value == value.strip(" ")
        and not (value.startswith(_SENTINEL_START) and value.endswith(_SENTINEL_END))
    )
    if plain:
        return value
    return _SENTINEL_START + base64.b64encode(value.encode("utf-8")).decode("ascii") + _SENTINEL_END


def decode_header_value(raw: bytes, label: str) -> str:
    """Server side: a received value as text, plain visible ASCII or the base64 sentinel
    (HTTP-13/14); anything else raises HeaderMismatch naming the header `label`."""
    if raw.translate(None, _FIELD_VALUE_BYTES):
        raise HeaderMismatch(f"Header mismatch: {label} header contains invalid characters")
    if raw.startswith(_B_SENTINEL_START) and raw.endswith(_B_SENTINEL_END) and len(raw) >= 11:
        try:
            return base64.b64decode(raw[9:-2], validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise HeaderMismatch(
                f"Header mismatch: {label} header has malformed base64 encoding"
            ) from None
    return raw.decode("ascii")


def header_matches(text: str, value: Any) -> bool:
    """Server side: does a decoded header equal the body's value (HTTP-16: 42 == 42.0)?"""
    if value is True:
        return text == "true"
    if value is False:
        return text == "false"
    if isinstance(value, str):
        return text == value
    if isinstance(value, int | float):
        try:
            return int(text) == value
        except ValueError:
            try:
                return float(text) == value
            except ValueError:
                return False
    return False
