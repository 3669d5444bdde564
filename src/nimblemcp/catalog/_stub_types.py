"""JSON Schema to Python type expressions, for the stubs: `TypeWriter`.

    string -> str, integer -> int, number -> float, boolean -> bool, null -> None
    enum / const of str, int, bool, null -> Literal[...]      (else the base type)
    array -> list[ITEM]              object with properties -> a TypedDict
    object without properties -> dict[str, VALUE] (additionalProperties) or dict[str, Any]
    anyOf / oneOf / a list of types -> A | B          nullable: true -> ... | None
    allOf of objects -> one TypedDict with every member's properties; other allOf -> Any
    local $ref -> the TypedDict of the definition (recursive ones included)

A TypedDict is written once per place and schema, named after where it was met
(`SearchDocsResult`, `PlaceOrderShipTo`) or after its `$defs` key (`Address`, shared); required properties are plain fields, the others
`NotRequired`. Keys that are not identifiers use the functional syntax. Anything else
(a remote `$ref`, `not`, conditionals) is `Any`. Pure functions and one class; imports
nothing from nimblemcp but its siblings.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Mapping
from typing import Any

from ._schema_diff import resolve_ref
from ._stub_text import SHADOWED, Names, class_name, docstring, literal

__all__ = ["TypeWriter", "split_union"]

_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}


class TypeWriter:
    """Builds type expressions for the schemas of one module, and the TypedDicts they
    need (`definitions`, in dependency order)."""

    def __init__(self, names: Names) -> None:
        self.names = names
        self.definitions: list[str] = []
        self.uses: set[str] = set()  # names to import from typing
        self._by_schema: dict[str, str] = {}  # canonical schema -> TypedDict name
        self._written: set[str] = set()

    def type_of(self, schema: Any, root: Any, hint: str) -> str:
        """A type expression for `schema` (inside the document `root`); `hint` names a
        TypedDict it may need."""
        schema, via = resolve_ref(schema, root)
        if via is not None and via.rsplit("/", 1)[-1]:
            hint = class_name(via.rsplit("/", 1)[-1])
        if schema is True or not isinstance(schema, Mapping) or not schema:
            return self._any()
        if isinstance(schema.get("$ref"), str):  # not a local reference we could follow
            return self._any()
        found = self._literal(schema)
        if found is None:
            found = self._shape(schema, root, hint)
        if schema.get("nullable") is True and found != "Any" and "None" not in split_union(found):
            found += " | None"
        return found

    def _any(self) -> str:
        self.uses.add("Any")
        return "Any"

    def _literal(self, schema: Mapping[str, Any]) -> str | None:
        if "const" in schema:
            values = [schema["const"]]
        elif isinstance(schema.get("enum"), list) and schema["enum"]:
            values = list(schema["enum"])
        else:
            return None
        if not all(v is None or isinstance(v, str | int | bool) for v in values):
            return None  # floats, objects: not Literal-able; the base type says enough
        unique = list(dict.fromkeys(json.dumps(v) for v in values))
        self.uses.add("Literal")
        return "Literal[" + ", ".join(literal(json.loads(v)) for v in unique) + "]"

    def _shape(self, schema: Mapping[str, Any], root: Any, hint: str) -> str:
        for key in ("anyOf", "oneOf"):
            members = schema.get(key)
            if isinstance(members, list) and members:
                base = {k: v for k, v in schema.items() if k not in (key, "description", "title")}
                return self._union([self.type_of({**base, **m} if isinstance(m, Mapping) and base
                                                 and "$ref" not in m else m, root, hint)
                                    for m in members])
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and all_of:
            merged = self._merge(schema, all_of, root)
            return self.type_of(merged, root, hint) if merged is not None else self._any()
        raw = schema.get("type")
        if isinstance(raw, list):
            return self._union([self.type_of({**schema, "type": t}, root, hint) for t in raw])
        kind = raw if isinstance(raw, str) else (
            "object" if "properties" in schema else "array" if "items" in schema else None)
        if kind in _SCALARS:
            return _SCALARS[kind]
        if kind == "array":
            items = schema.get("items")
            if isinstance(items, Mapping | bool) and "prefixItems" not in schema:
                return f"list[{self.type_of(items, root, hint + 'Item')}]"
            return f"list[{self._any()}]"
        if kind == "object":
            return self._object(schema, root, hint)
        return self._any()

    def _union(self, members: list[str]) -> str:
        if "Any" in members:
            return "Any"
        parts: list[str] = []
        for member in members:
            for part in split_union(member):
                if part not in parts:
                    parts.append(part)
        if "None" in parts:  # None last, as people write it
            parts = [p for p in parts if p != "None"] + ["None"]
        return " | ".join(parts)

    def _merge(self, schema: Mapping[str, Any], members: list[Any], root: Any) -> dict[str, Any] | None:
        """allOf of object schemas as one object schema, or None when it is not that."""
        properties: dict[str, Any] = {}
        required: list[str] = []
        for member in [{k: v for k, v in schema.items() if k != "allOf"}, *members]:
            member, _ = resolve_ref(member, root)
            if not isinstance(member, Mapping):
                return None
            if member.get("type", "object") != "object" or any(
                    k in member for k in ("anyOf", "oneOf", "allOf", "$ref")):
                return None
            properties.update(member.get("properties") or {})
            required += [r for r in member.get("required") or () if isinstance(r, str)]
        return {"type": "object", "properties": properties, "required": required,
                **({"description": schema["description"]} if "description" in schema else {})}

    def _object(self, schema: Mapping[str, Any], root: Any, hint: str) -> str:
        properties = schema.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            extra = schema.get("additionalProperties")
            if isinstance(extra, Mapping) and extra:
                return f"dict[str, {self.type_of(extra, root, hint + 'Value')}]"
            return f"dict[str, {self._any()}]"
        # one TypedDict per place (a tool's result, an argument) or per `$defs` name
        # with the same schema: `search_docs` gets its own result type even when it
        # looks like `list_docs`'s, two tools that share a definition share its type
        key = hint + "\n" + json.dumps(schema, sort_keys=True)
        if key in self._by_schema:
            return self._by_schema[key]
        name = self.names.claim(hint)
        self._by_schema[key] = name  # before the fields: a recursive schema refers to it
        required = {r for r in schema.get("required") or () if isinstance(r, str)}
        fields: list[tuple[str, str, bool]] = []
        for field, sub in properties.items():
            fields.append((field, self.type_of(sub, root, name + class_name(field)), field in required))
            if field not in required:
                self.uses.add("NotRequired")
        self.uses.add("TypedDict")
        self.definitions.append(self._typed_dict(name, schema, fields))
        self._written.add(name)
        return name

    def _typed_dict(self, name: str, schema: Mapping[str, Any],
                    fields: list[tuple[str, str, bool]]) -> str:
        doc = _describe(schema)
        plain = all(f.isidentifier() and f.isascii() and not keyword.iskeyword(f)
                    and f not in SHADOWED and f not in self.names.taken for f, _, _ in fields)
        if plain:  # annotations are strings (`from __future__ import annotations`)
            lines = [f"class {name}(TypedDict):"]
            if doc:
                lines.append(f"    {docstring(doc, '    ')}")
                lines.append("")
            lines += [f"    {field}: {kind if required else f'NotRequired[{kind}]'}"
                      for field, kind, required in fields]
            return "\n".join(lines)
        # keys that cannot be attribute names: the functional syntax, whose types are
        # evaluated at import, so one naming a TypedDict not yet written is a string
        pending = {n for n in self._by_schema.values() if n not in self._written}
        rows: list[str] = []
        for field, kind, required in fields:
            if any(part in pending for part in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", kind)):
                kind = literal(kind)
            rows.append(f"        {literal(field)}: {kind if required else f'NotRequired[{kind}]'},")
        return f"{name} = TypedDict(\n    {literal(name)},\n    {{\n" + "\n".join(rows) + "\n    },\n)"


def split_union(expr: str) -> list[str]:
    """The members of a type expression's top-level `|` (not inside brackets or quotes)."""
    parts: list[str] = []
    depth, quote, start, i = 0, "", 0, 0
    while i < len(expr):
        ch = expr[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif depth == 0 and expr.startswith(" | ", i):
            parts.append(expr[start:i])
            start = i + 3
            i += 2
        i += 1
    parts.append(expr[start:])
    return parts


def _describe(schema: Mapping[str, Any]) -> str:
    """A TypedDict's docstring: the schema's description (titles are mostly generated
    names, `addOutput`, `Address`, and say nothing)."""
    text = schema.get("description")
    return text.strip() if isinstance(text, str) else ""
