"""Comparing two JSON Schemas of one tool: what a change does to its callers.

The same change means opposite things on the two sides of a call. In a tool's
`inputSchema` the server *accepts* values: accepting fewer (a type narrowed, an enum
value removed, a bound tightened, an argument made required) breaks callers, accepting
more is compatible. In its `outputSchema` the server *promises* values: promising more
kinds of value (a type widened, `null` allowed, an enum value added) breaks callers that
handled the old set, promising less is compatible, and a field removed or made optional
is breaking while a field added is not. Text the model reads (`description`, `title`,
`examples`) is security-relevant wherever it sits: instructions hidden in an argument's
description are the classic rug pull.

Local `$ref`s (`#/$defs/...`, `#/definitions/...`) are followed on both sides (with a
guard for recursive schemas), so moving a definition changes nothing. Union members
(`anyOf`/`oneOf`) are matched exactly first, then in order when as many remain. At most
5,000 differing subschemas are compared per schema (references can fan out
exponentially); past that one breaking `schema-too-complex` change says so.
Pure data; imports nothing from nimblemcp.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Finding", "compare_schemas", "resolve_ref"]

Severity = Literal["breaking", "security", "compatible"]

_TEXT = ("description", "title", "examples")
# Subschemas compared per tool side at most: references can fan out (a definition used
# twice by one used twice...), and a server chooses its schemas.
_BUDGET = 5000
_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains")
_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains")
_HANDLED = frozenset({
    *_TEXT, *_LOWER, *_UPPER, "type", "nullable", "enum", "const", "pattern", "format",
    "multipleOf", "uniqueItems", "default", "properties", "required", "additionalProperties",
    "items", "prefixItems", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
})


@dataclass(frozen=True, slots=True)
class Finding:
    """One difference between two schemas: how bad, a stable code, where, and what."""

    severity: Severity
    code: str
    path: str
    message: str
    old: Any = None
    new: Any = None


def resolve_ref(schema: Any, root: Any, limit: int = 32) -> tuple[Any, str | None]:
    """`schema` with a local `$ref` followed (its sibling keywords kept on top), and the
    reference it came through; unresolvable references are left as they are."""
    via: str | None = None
    for _ in range(limit):
        if not isinstance(schema, Mapping) or not isinstance(schema.get("$ref"), str):
            break
        ref = schema["$ref"]
        if not ref.startswith("#"):
            break
        target: Any = root
        for part in (p for p in ref[1:].split("/") if p):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, Mapping) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return schema, via
        if not isinstance(target, Mapping):
            break
        via = ref
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**target, **siblings}
    return schema, via


def compare_schemas(old: Any, new: Any, *, output: bool) -> list[Finding]:
    """Every difference between two schemas of one side of a tool (`output=False`:
    its arguments; `output=True`: its structured result), classified."""
    comparer = _Comparer(old, new, output)
    comparer.compare(old, new, [])
    return comparer.found


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True)


def _types(schema: Mapping[str, Any]) -> frozenset[str] | None:
    """The JSON types a schema allows, None when it does not say (any)."""
    raw = schema.get("type")
    if isinstance(raw, str):
        found = {raw}
    elif isinstance(raw, list):
        found = {t for t in raw if isinstance(t, str)}
    else:
        return None
    if schema.get("nullable") is True:
        found.add("null")
    return frozenset(found)


def _covers(types: frozenset[str], one: str) -> bool:
    return one in types or (one == "integer" and "number" in types)


class _Comparer:
    def __init__(self, old_root: Any, new_root: Any, output: bool) -> None:
        self.old_root = old_root
        self.new_root = new_root
        self.output = output
        self.noun = "field" if output else "argument"
        self.found: list[Finding] = []
        self._seen: set[tuple[str | None, str | None]] = set()
        self._budget = _BUDGET
        self._same_definitions = all(
            _mapping(old_root).get(k) == _mapping(new_root).get(k) for k in ("$defs", "definitions"))

    # -- how a kind of change counts on this side ------------------------------------

    def _emit(self, severity: Severity, code: str, path: list[str], message: str,
              old: Any = None, new: Any = None) -> None:
        where = _path(path)
        text = f"{self.noun} {where}: {message}" if where else message
        self.found.append(Finding(severity, code, where, text, old, new))

    def narrowed(self, code: str, path: list[str], message: str, old: Any = None,
                 new: Any = None) -> None:
        """Fewer values allowed: breaking for arguments, compatible for a result."""
        self._emit("compatible" if self.output else "breaking", code, path, message, old, new)

    def widened(self, code: str, path: list[str], message: str, old: Any = None,
                new: Any = None) -> None:
        """More values allowed: compatible for arguments, breaking for a result."""
        self._emit("breaking" if self.output else "compatible", code, path, message, old, new)

    def changed(self, code: str, path: list[str], message: str, old: Any = None,
                new: Any = None) -> None:
        self._emit("breaking", code, path, message, old, new)

    def other(self, code: str, path: list[str], message: str, old: Any = None,
              new: Any = None) -> None:
        self._emit("compatible", code, path, message, old, new)

    # -- the walk --------------------------------------------------------------------

    def compare(self, old: Any, new: Any, path: list[str]) -> None:
        old, old_ref = resolve_ref(old, self.old_root)
        new, new_ref = resolve_ref(new, self.new_root)
        pair = (old_ref, new_ref)
        if old_ref is None and new_ref is None:
            self._compare(old, new, path)
        elif pair not in self._seen:  # else a recursive schema, compared further up
            self._seen.add(pair)
            try:
                self._compare(old, new, path)
            finally:
                self._seen.discard(pair)

    def _compare(self, old: Any, new: Any, path: list[str]) -> None:
        if old == new and (self._same_definitions or not _has_ref(old)):
            return  # equal, and any reference in it leads to equal definitions
        self._budget -= 1
        if self._budget < 0:
            if self._budget == -1:  # said once: a hostile schema may not cost the host its CPU
                self.changed("schema-too-complex", path, f"more than {_BUDGET} subschemas differ; "
                             "not compared further (review the schema by hand)")
            return
        if not isinstance(old, Mapping) or not isinstance(new, Mapping):
            # boolean schemas: true accepts everything, false nothing
            self._booleans(old, new, path)
            return
        for key in _TEXT:
            if old.get(key) != new.get(key):
                what = "added" if key not in old else "removed" if key not in new else "changed"
                self._emit("security", f"{key}-{what}", path, f"{key} {what}", old.get(key),
                           new.get(key))
        if _has_union(old) == _has_union(new):  # else `_unions` compares the lone schema
            self._type(old, new, path)
            self._enum(old, new, path)
        self._bounds(old, new, path)
        self._strings(old, new, path)
        if old.get("default") != new.get("default"):
            message = "default changed"
            if self.output:
                self.other("default-changed", path, message, old.get("default"), new.get("default"))
            else:  # a caller that leaves it out now gets another behaviour
                self.changed("default-changed", path, message, old.get("default"), new.get("default"))
        self._object(old, new, path)
        self._array(old, new, path)
        self._unions(old, new, path)
        for key in sorted((set(old) | set(new)) - _HANDLED):
            if old.get(key) != new.get(key):
                self.other("keyword-changed", path, f"keyword {key} changed", old.get(key), new.get(key))

    def _booleans(self, old: Any, new: Any, path: list[str]) -> None:
        def accepts_all(s: Any) -> bool:
            return s is True or s == {}

        if accepts_all(new) and not accepts_all(old):
            self.widened("schema-widened", path, "now accepts any value", old, new)
        elif accepts_all(old) and not accepts_all(new):
            self.narrowed("schema-narrowed", path, "no longer accepts any value", old, new)
        else:
            self.changed("schema-changed", path, "schema replaced", old, new)

    def _type(self, old: Mapping[str, Any], new: Mapping[str, Any], path: list[str]) -> None:
        before, after = _types(old), _types(new)
        if before == after:
            return
        narrowed = (before is None and after is not None) or (
            before is not None and after is not None and any(not _covers(after, t) for t in before))
        widened = (after is None and before is not None) or (
            before is not None and after is not None and any(not _covers(before, t) for t in after))
        shown_old = sorted(before) if before is not None else "any"
        shown_new = sorted(after) if after is not None else "any"
        message = f"type {_show_types(before)} -> {_show_types(after)}"
        if narrowed and widened:
            self.changed("type-changed", path, f"{message} (changed)", shown_old, shown_new)
        elif narrowed:
            self.narrowed("type-narrowed", path, f"{message} (narrowed)", shown_old, shown_new)
        elif widened:
            self.widened("type-widened", path, f"{message} (widened)", shown_old, shown_new)

    def _enum(self, old: Mapping[str, Any], new: Mapping[str, Any], path: list[str]) -> None:
        def values(s: Mapping[str, Any]) -> dict[str, Any] | None:
            if "const" in s:
                return {_key(s["const"]): s["const"]}
            if isinstance(s.get("enum"), list):
                return {_key(v): v for v in s["enum"]}
            return None

        before, after = values(old), values(new)
        if before == after:
            return
        if before is None and after is not None:
            self.narrowed("enum-added", path, f"now limited to {_values(after)}", None, list(after.values()))
            return
        if after is None and before is not None:
            self.widened("enum-removed", path, f"no longer limited to {_values(before)}",
                         list(before.values()), None)
            return
        assert before is not None and after is not None
        removed = [v for k, v in before.items() if k not in after]
        added = [v for k, v in after.items() if k not in before]
        if removed:
            self.narrowed("enum-value-removed", path, f"value(s) {_shown(removed)} removed", removed, None)
        if added:
            self.widened("enum-value-added", path, f"value(s) {_shown(added)} added", None, added)

    def _bounds(self, old: Mapping[str, Any], new: Mapping[str, Any], path: list[str]) -> None:
        for key, lower in [(k, True) for k in _LOWER] + [(k, False) for k in _UPPER]:
            a, b = old.get(key), new.get(key)
            if a == b or isinstance(a, bool) or isinstance(b, bool):
                continue  # draft-04 boolean exclusive bounds: left to keyword-changed
            if a is None:
                tighter = True
            elif b is None:
                tighter = False
            elif isinstance(a, int | float) and isinstance(b, int | float):
                tighter = b > a if lower else b < a
            else:
                continue
            message = f"{key} {a if a is not None else 'none'} -> {b if b is not None else 'none'}"
            if tighter:
                self.narrowed("constraint-tightened", path, message, a, b)
            else:
                self.widened("constraint-loosened", path, message, a, b)
        if bool(old.get("uniqueItems")) != bool(new.get("uniqueItems")):
            if new.get("uniqueItems"):
                self.narrowed("constraint-tightened", path, "items must now be unique")
            else:
                self.widened("constraint-loosened", path, "items no longer need to be unique")

    def _strings(self, old: Mapping[str, Any], new: Mapping[str, Any], path: list[str]) -> None:
        for key in ("pattern", "format", "multipleOf"):
            a, b = old.get(key), new.get(key)
            if a == b:
                continue
            if a is None:
                self.narrowed("constraint-tightened", path, f"{key} {b!r} added", a, b)
            elif b is None:
                self.widened("constraint-loosened", path, f"{key} {a!r} removed", a, b)
            else:
                self.changed(f"{key}-changed", path, f"{key} {a!r} -> {b!r}", a, b)

    def _object(self, old: Mapping[str, Any], new: Mapping[str, Any], path: list[str]) -> None:
        a_props = _mapping(old.get("properties"))
        b_props = _mapping(new.get("properties"))
        a_req = {r for r in old.get("required") or () if isinstance(r, str)}
        b_req = {r for r in new.get("required") or () if isinstance(r, str)}
        noun = self.noun
        for name in sorted(set(a_props) | set(b_props) | a_req | b_req):
            here = [*path, name]
            if name in a_props and name not in b_props:
                self.changed(f"{noun}-removed", here, "removed")
                continue
            if name in b_props and name not in a_props:
                if self.output:
                    self.other(f"{noun}-added", here, "added")
                elif name in b_req:
                    self.changed(f"{noun}-added-required", here, "added as required")
                else:
                    self.other(f"{noun}-added-optional", here, "added as optional")
                continue
            if name in a_req and name not in b_req:
                if self.output:  # a caller may now go without it
                    self.changed(f"{noun}-made-optional", here, "no longer always present")
                else:
                    self.other(f"{noun}-made-optional", here, "no longer required")
            elif name in b_req and name not in a_req:
                if self.output:
                    self.other(f"{noun}-made-required", here, "now always present")
                else:
                    self.changed(f"{noun}-made-required", here, "now required")
            if name in a_props and name in b_props:
                self.compare(a_props[name], b_props[name], here)
        a_more, b_more = old.get("additionalProperties"), new.get("additionalProperties")
        if a_more != b_more:
            closed_before = a_more is False
            closed_after = b_more is False
            here = [*path, "*"]
            if self.output:
                self.other("additional-properties-changed", path, "additionalProperties changed",
                           a_more, b_more)
            elif closed_after and not closed_before:
                self.narrowed("additional-properties-closed", path,
                              "no longer accepts properties it does not name", a_more, b_more)
            elif closed_before and not closed_after:
                self.widened("additional-properties-opened", path,
                              "now accepts properties it does not name", a_more, b_more)
            elif isinstance(a_more, Mapping) and isinstance(b_more, Mapping):
                self.compare(a_more, b_more, here)
            else:
                self.compare(a_more if a_more is not None else True,
                             b_more if b_more is not None else True, here)

    def _array(self, old: Mapping[str, Any], new: Mapping[str, Any], path: list[str]) -> None:
        a, b = old.get("items"), new.get("items")
        if isinstance(a, list) or isinstance(b, list):  # draft-04 tuples
            self._tuple(a if isinstance(a, list) else [], b if isinstance(b, list) else [], path)
        elif a != b:
            self.compare(a if a is not None else True, b if b is not None else True, [*path, "[]"])
        pa, pb = old.get("prefixItems"), new.get("prefixItems")
        if pa != pb:
            self._tuple(pa if isinstance(pa, list) else [], pb if isinstance(pb, list) else [], path)

    def _tuple(self, a: list[Any], b: list[Any], path: list[str]) -> None:
        for index in range(max(len(a), len(b))):
            here = [*path, f"[{index}]"]
            if index >= len(a):
                self.changed("tuple-item-added", here, "tuple position added")
            elif index >= len(b):
                self.changed("tuple-item-removed", here, "tuple position removed")
            else:
                self.compare(a[index], b[index], here)

    def _unions(self, old: Mapping[str, Any], new: Mapping[str, Any], path: list[str]) -> None:
        for key in ("anyOf", "oneOf", "allOf"):
            a = old.get(key) if isinstance(old.get(key), list) else None
            b = new.get(key) if isinstance(new.get(key), list) else None
            if a == b:
                continue
            if key == "allOf":  # every member must hold: members pair in order
                if a is not None and b is not None and len(a) == len(b):
                    for index, (x, y) in enumerate(zip(a, b, strict=True)):
                        self.compare(x, y, [*path, f"<allOf {index}>"])
                else:
                    self.changed("all-of-changed", path, "allOf changed", a, b)
                continue
            if a is None or b is None:
                # a union appears or goes: the lone schema is one of its members, or not
                if _has_union(old) and _has_union(new):
                    self.changed(f"{_kebab(key)}-changed", path, f"{key} replaced by another union", a, b)
                elif a is None and b is not None and self._member_of(old, self.old_root, b, self.new_root):
                    self.widened("union-widened", path, f"now also accepts other {key} members", None, b)
                elif b is None and a is not None and self._member_of(new, self.new_root, a, self.old_root):
                    self.narrowed("union-narrowed", path, f"now only one of its {key} members", a, None)
                else:
                    self.changed(f"{_kebab(key)}-changed", path,
                                 f"{key} {'added' if a is None else 'removed'}", a, b)
                continue
            left = [(self._canon(x, self.old_root), x) for x in a]
            right = [(self._canon(y, self.new_root), y) for y in b]
            right_keys = [k for k, _ in right]
            left_keys = [k for k, _ in left]
            only_a = [x for k, x in left if k not in right_keys]
            only_b = [y for k, y in right if k not in left_keys]
            if len(only_a) == len(only_b):
                for index, (x, y) in enumerate(zip(only_a, only_b, strict=True)):
                    self.compare(x, y, [*path, f"<{key} {index}>"])
                continue
            for x in only_a:
                self.narrowed("union-member-removed", path, f"{key} member removed", x, None)
            for y in only_b:
                self.widened("union-member-added", path, f"{key} member added", None, y)

    def _member_of(self, lone: Mapping[str, Any], lone_root: Any, members: list[Any],
                   members_root: Any) -> bool:
        """Whether a schema (apart from its text) is one of a union's members."""
        def bare(schema: Any, root: Any) -> str:
            resolved, _ = resolve_ref(schema, root)
            if not isinstance(resolved, Mapping):
                return _key(resolved)
            return _key({k: v for k, v in resolved.items()
                         if k not in (*_TEXT, "default", "anyOf", "oneOf")})

        wanted = bare(lone, lone_root)
        return any(bare(m, members_root) == wanted for m in members)

    def _canon(self, schema: Any, root: Any) -> str:
        resolved, _ = resolve_ref(schema, root)
        return _key(resolved)


def _has_ref(schema: Any) -> bool:
    if isinstance(schema, Mapping):
        return "$ref" in schema or any(_has_ref(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_ref(v) for v in schema)
    return False


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _has_union(schema: Mapping[str, Any]) -> bool:
    return isinstance(schema.get("anyOf"), list) or isinstance(schema.get("oneOf"), list)


def _path(path: list[str]) -> str:
    out = ""
    for part in path:
        if part.startswith("[") or part.startswith("<"):
            out += part
        else:
            out += ("." if out else "") + part
    return out


def _show_types(types: frozenset[str] | None) -> str:
    if types is None:
        return "any"
    return "|".join(sorted(types)) or "none"


def _values(found: Mapping[str, Any]) -> str:
    return _shown(list(found.values()))


def _shown(values: list[Any]) -> str:
    text = ", ".join(json.dumps(v, ensure_ascii=True) for v in values[:8])
    return text + (", ..." if len(values) > 8 else "")


def _kebab(key: str) -> str:
    return "".join("-" + c.lower() if c.isupper() else c for c in key)
