"""Header-versus-body validation for Streamable HTTP POSTs (HTTP-12..19).

`RequestHeaders` is filled by one pass over the ASGI header list (names arrive
lowercased, so HTTP-12 name matching is exact byte comparison; values stay
case-sensitive). `check_standard` compares `MCP-Protocol-Version`, `Mcp-Method`
and `Mcp-Name` with the body; `ParamRules` checks `Mcp-Param-*` against the arguments with
each tool's `x-mcp-header` rules, which the tool computed once at registration (the
rules and the value codec live in `types._tool_headers`, shared with the client).
Every failure is a `HeaderMismatch` (-32020). Must not import asyncio, the ASGI app or
the server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from nimblemcp.errors import HeaderMismatch
from nimblemcp.types._http import (
    HEADER_METHOD,
    HEADER_NAME,
    HEADER_PROTOCOL_VERSION,
    HEADER_SESSION_ID,
    PARAM_HEADER_PREFIX,
    header_key,
)
from nimblemcp.types._tool_headers import (
    HeaderRule,
    decode_header_value,
    header_matches,
    value_at,
)
from nimblemcp.types._versions import SUPPORTED_VERSIONS
from nimblemcp.types.methods import METHODS

__all__ = ["ParamRules", "RequestHeaders", "check_standard"]

# Indexes into RequestHeaders.values.
CONTENT_TYPE: Final = 0
ACCEPT: Final = 1
VERSION: Final = 2
METHOD: Final = 3
NAME: Final = 4
SESSION: Final = 5
_LABEL = {VERSION: HEADER_PROTOCOL_VERSION, METHOD: HEADER_METHOD, NAME: HEADER_NAME}
WANTED: Final[dict[bytes, int]] = {
    b"content-type": CONTENT_TYPE,
    b"accept": ACCEPT,
    **{header_key(label): idx for idx, label in _LABEL.items()},
    header_key(HEADER_SESSION_ID): SESSION,
}
_ROUTING = (VERSION, METHOD, NAME)
_NAMES_BY_INDEX: Final = tuple(sorted(WANTED, key=WANTED.__getitem__))
_VERSION_KEY: Final = header_key(HEADER_PROTOCOL_VERSION)
_METHOD_KEY: Final = header_key(HEADER_METHOD)
_NAME_KEY: Final = header_key(HEADER_NAME)
_SESSION_KEY: Final = header_key(HEADER_SESSION_ID)
_PARAM_PREFIX: Final = header_key(PARAM_HEADER_PREFIX)
_DUP: Final = b"\x00dup"
_NUMBER: Final = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?", re.ASCII)


class RequestHeaders:
    """The headers one POST carries that the transport cares about.

    `found` maps lowercased names to values as sent (surrounding whitespace kept: a
    check strips only a value that is not already what it expects). `values[i]` is
    the value of header `i` (CONTENT_TYPE...SESSION, stripped) or None, built when
    asked. `params` maps lowercased names to values for the `Mcp-Param-*` check
    (unstripped, `_DUP` for a name sent twice; it may hold other headers too); `dup`
    is the index of a routing header sent twice, else -1.

    `found` may be handed in by whoever already built it (the security middleware):
    a dict of the whole header list in which no name repeats."""

    __slots__ = ("dup", "found", "params")

    found: dict[bytes, bytes]
    params: dict[bytes, bytes] | None
    dup: int

    def __init__(self, raw: Sequence[tuple[bytes, bytes]], found: dict[bytes, bytes] | None = None) -> None:
        # The common request names no header twice: one C-level dict build, then
        # lookups. A repeated name (or headers not in a list) takes the full scan.
        if found is None:
            try:
                found = dict(raw) if type(raw) is list else None
            except TypeError:  # names that are not bytes (unhashable)
                found = None
            if found is None or len(found) != len(raw):
                self._scan(raw)
                return
        self.found = self.params = found
        self.dup = -1

    def _scan(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        found: dict[bytes, bytes] = {}
        params: dict[bytes, bytes] | None = None
        dup = -1
        wanted = WANTED
        for key, value in raw:
            idx = wanted.get(key)
            if idx is not None:
                if idx in _ROUTING and key in found:
                    dup = idx  # first-copy and last-copy readers would disagree (HTTP-19)
                found[key] = value
            elif key.startswith(_PARAM_PREFIX):
                if params is None:
                    params = {}
                params[key] = _DUP if key in params else value
        self.found = found
        self.params = params
        self.dup = dup

    @classmethod
    def of(cls, found: dict[bytes, bytes]) -> RequestHeaders:
        """From a dict of a whole header list in which no name repeats (built by the
        caller already): nothing is read again."""
        return cls((), found)

    @property
    def values(self) -> list[bytes | None]:
        """The wanted headers by index, stripped (RFC 9110: surrounding whitespace is
        not content)."""
        get = self.found.get
        out: list[bytes | None] = []
        for key in _NAMES_BY_INDEX:
            value = get(key)
            out.append(None if value is None else value.strip(b" \t"))
        return out


# The header form of every version and method name this module knows (ASCII: the
# encoding is the name's bytes), so the comparisons encode nothing per request.
_ENCODED: Final[dict[str, bytes]] = {v: v.encode() for v in (*METHODS, *SUPPORTED_VERSIONS)}

# The body parameter `Mcp-Name` mirrors, per method that has one.
_NAME_PARAM: Final[dict[str, str]] = {m: spec.name_param for m, spec in METHODS.items() if spec.name_param}

# Mcp-Name values (as sent) already decoded (decode_value is pure): a client names the same few
# tools over and over, so the check costs one dict lookup.
_NAMES: dict[bytes, str] = {}

# The agreeing request, looked up instead of checked. Over a header dict in which no
# routing header repeats, when
#     version header == ENCODED[body version]
#     and Mcp-Method header == ROUTES[method][0]
#     and (ROUTES[method][1] is None or NAME_TEXT[Mcp-Name header] == params[ROUTES[method][1]])
# holds, `check_standard` passes: each entry is what it compares with, as sent (nothing
# stripped; the name as it decoded it before). Any other request (a look-up misses,
# a value differs) is `check_standard`'s, which gives the verdict and the error in its
# own order.
ENCODED: Final = _ENCODED
ROUTES: Final[dict[str, tuple[bytes, str | None]]] = {m: (_ENCODED[m], _NAME_PARAM.get(m)) for m in METHODS}
NAME_TEXT: Final = _NAMES


def _mismatch(label: str, header: str, body: Any) -> HeaderMismatch:
    return HeaderMismatch(
        f"Header mismatch: {label} header value {header!r} does not match body value {body!r}"
    )


def check_standard(h: RequestHeaders, method: str, params: dict[str, Any], version: str) -> None:
    """MCP-Protocol-Version, Mcp-Method and Mcp-Name against the body (HTTP-17)."""
    if h.dup >= 0:
        raise HeaderMismatch(f"Header mismatch: {_LABEL[h.dup]} header appears more than once")
    get = h.found.get
    raw = get(_VERSION_KEY)
    if raw is None:
        raise HeaderMismatch(f"Header mismatch: missing required header {HEADER_PROTOCOL_VERSION}")
    expected = _ENCODED.get(version) or version.encode()
    if raw != expected:
        raw = raw.strip(b" \t")  # RFC 9110 optional whitespace (SEP-2243)
        if raw != expected:
            raise _mismatch(
                HEADER_PROTOCOL_VERSION, decode_header_value(raw, HEADER_PROTOCOL_VERSION), version)
    raw = get(_METHOD_KEY)
    if raw is None:
        raise HeaderMismatch(f"Header mismatch: missing required header {HEADER_METHOD}")
    expected = _ENCODED.get(method) or method.encode()
    if raw != expected:
        raw = raw.strip(b" \t")
        if raw != expected:
            raise _mismatch(HEADER_METHOD, decode_header_value(raw, HEADER_METHOD), method)
    name_param = _NAME_PARAM.get(method)
    if name_param is None:
        return
    body = params.get(name_param)
    if type(body) is not str and not isinstance(body, str):
        return  # the handler answers the malformed body with -32602
    raw = get(_NAME_KEY)
    if raw is None:
        raise HeaderMismatch(f"Header mismatch: missing required header {HEADER_NAME}")
    text = _NAMES.get(raw)
    if text is None:
        text = decode_header_value(raw.strip(b" \t"), HEADER_NAME)
        if len(_NAMES) >= 256:  # bounded: the values come from clients
            _NAMES.clear()
        _NAMES[raw] = text
    if text != body:
        raise _mismatch(HEADER_NAME, text, body)


Rule = tuple[bytes, str, tuple[str, ...]]  # lowercased header name, display name, path


class ParamRules:
    """Per-tool `Mcp-Param-*` checks (HTTP-15/16) over the rules the tool computed once
    at registration; `lookup(name)` gives a tool's rules, `()` for an unknown tool."""

    __slots__ = ("_cache", "_lookup")

    def __init__(self, lookup: Callable[[str], Sequence[HeaderRule]]) -> None:
        self._lookup = lookup
        # name -> (the rules seen, their wire form); rebuilt when a tool is replaced.
        self._cache: dict[str, tuple[Sequence[HeaderRule], tuple[Rule, ...]]] = {}

    def rules_for(self, name: str) -> tuple[Rule, ...]:
        rules = self._lookup(name)
        if not rules:
            return ()
        hit = self._cache.get(name)
        if hit is not None and hit[0] is rules:
            return hit[1]
        wire = tuple(
            (_PARAM_PREFIX + rule.name.lower().encode(), PARAM_HEADER_PREFIX + rule.name, rule.path)
            for rule in rules
        )
        self._cache[name] = (rules, wire)
        return wire

    def check(self, h: RequestHeaders, params: dict[str, Any]) -> None:
        name = params.get("name")
        if not isinstance(name, str) or not self._lookup(name):
            return  # most tools have no rules: one look-up
        rules = self.rules_for(name)
        arguments = params.get("arguments")
        sent = h.params or {}
        for key, label, path in rules:
            value = value_at(arguments, path)
            if value is None:
                continue  # absent or null: the header is not expected (HTTP-16)
            raw = sent.get(key)
            if raw is None:
                raise HeaderMismatch(f"Header mismatch: missing required header {label}")
            if raw is _DUP:
                raise HeaderMismatch(f"Header mismatch: {label} header appears more than once")
            raw = raw.strip(b" \t")
            text = decode_header_value(raw, label)
            if type(value) is not str and type(value) is not bool and not _NUMBER.fullmatch(text):
                # int()/float() also read `4_2`, `٤٢`, ` 42`, `inf`: a number is ASCII (HTTP-13).
                raise _mismatch(label, text, value)
            if not header_matches(text, value):
                raise _mismatch(label, text, value)
