"""An OpenAPI 3.0/3.1 document: read from a dict, a file or a URL, its references
followed inside the document only, its schemas turned into JSON Schema 2020-12.

A `$ref` that points outside the document (another file, a URL) is refused with
`SchemaRefused`, never fetched: a document is data, and following its links would let
it make this server fetch anything. Recursive schemas stay recursive (a `$ref` into
`$defs`); everything else is inlined, as MCP hosts prefer (`server._refs.inline_refs`).

OpenAPI 3.0's own schema dialect differs from JSON Schema in a few words, translated
here: `nullable: true` adds `"null"` to the type, boolean `exclusiveMinimum`/
`exclusiveMaximum` become the numbers they qualify, `example` becomes `examples`, and the
OpenAPI-only annotations (`xml`, `discriminator`, `externalDocs`, `x-*`) are dropped.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from nimblemcp.errors import SchemaRefused
from nimblemcp.server._refs import inline_refs

__all__ = ["Document", "SchemaSet", "is_object_schema", "load"]

# Keywords whose value is one schema, a list of schemas, or a map of name -> schema.
_ONE = frozenset({"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then",
                  "else", "unevaluatedItems", "unevaluatedProperties", "additionalItems"})
_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_DROP = frozenset({"xml", "discriminator", "externalDocs", "nullable", "example"})
_DEF_NAME = re.compile(r"[^A-Za-z0-9_.\-]+")


def load(spec: Mapping[str, Any] | str | os.PathLike[str]) -> tuple[dict[str, Any], str | None]:
    """The document, and where it came from (a URL or a path; None for a dict): JSON, or
    YAML when PyYAML is installed (the `[openapi]` extra)."""
    if isinstance(spec, Mapping):
        return dict(spec), None
    where = os.fspath(spec)
    if where.startswith(("http://", "https://")):
        from nimblemcp._extras import needs_extra

        with needs_extra("openapi", "reading an OpenAPI document from a URL"):
            import httpx
        response = httpx.get(where, follow_redirects=True, timeout=30.0)
        if response.status_code >= 400:
            raise ValueError(f"cannot read the OpenAPI document at {where}: HTTP {response.status_code}")
        text = response.text
    else:
        with open(where, encoding="utf-8") as f:
            text = f.read()
    return parse(text, where), where


def parse(text: str, where: str) -> dict[str, Any]:
    """A document's text as data: JSON first, else YAML."""
    try:
        doc = json.loads(text)
    except ValueError:
        from nimblemcp._extras import needs_extra

        with needs_extra("openapi", "reading a YAML OpenAPI document"):
            import yaml  # type: ignore[import-untyped]
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"{where} is neither JSON nor YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{where} is not an OpenAPI document (not an object)")
    return doc


def is_object_schema(schema: Any) -> bool:
    """Whether a converted schema describes a JSON object and nothing else (what MCP
    requires of an `outputSchema`)."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind is None:
        return "properties" in schema and not any(k in schema for k in _LIST)
    return bool(kind == "object" or kind == ["object"])


class Document:
    """One OpenAPI document and its reference look-ups."""

    def __init__(self, doc: dict[str, Any]) -> None:
        version = doc.get("openapi")
        if not isinstance(version, str) or not version.startswith("3."):
            found = f"swagger {doc['swagger']}" if "swagger" in doc else f"openapi {version!r}"
            raise ValueError(f"not an OpenAPI 3.x document ({found}); convert Swagger 2.0 to OpenAPI 3 first")
        self.doc = doc
        self.version = version

    def pointer(self, ref: str) -> Any:
        """The node a local `$ref` (`#/components/schemas/Pet`) names."""
        if not ref.startswith("#"):
            raise SchemaRefused(f"$ref {ref!r} points outside the document; nimblemcp never fetches it")
        node: Any = self.doc
        for raw in ref[1:].split("/")[1:]:
            part = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                raise SchemaRefused(f"$ref {ref!r} names nothing in the document")
        return node

    def resolve(self, node: Any) -> Any:
        """`node` with its `$ref` chain followed (parameters, bodies, responses, a
        schema's root)."""
        seen: set[str] = set()
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if ref in seen:
                raise SchemaRefused(f"$ref {ref!r} refers to itself")
            seen.add(ref)
            node = self.pointer(ref)
        return node


class SchemaSet:
    """Converts the schemas of one tool's input or output, gathering the definitions
    they reference; `bundle` makes the self-contained schema."""

    def __init__(self, document: Document) -> None:
        self.document = document
        self.dialect_30 = document.version.startswith("3.0")
        self.defs: dict[str, Any] = {}
        self._names: dict[str, str] = {}  # ref -> its name in $defs

    def convert(self, node: Any) -> Any:
        if not isinstance(node, dict):
            return node  # `true`/`false` schemas (3.1)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                out["$ref"] = self._ref(value)
            elif key in _DROP or key.startswith("x-"):
                continue
            elif key in _MAP and isinstance(value, dict):
                out[key] = {k: self.convert(v) for k, v in value.items()}
            elif key in _LIST and isinstance(value, list):
                out[key] = [self.convert(v) for v in value]
            elif key in _ONE or (key == "items" and isinstance(value, list)):
                out[key] = [self.convert(v) for v in value] if isinstance(value, list) else self.convert(value)
            else:
                out[key] = value
        if "example" in node and "examples" not in node:
            out["examples"] = [node["example"]]
        if self.dialect_30:
            for word, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
                if isinstance(node.get(word), bool):
                    if node[word] and bound in node:
                        out[word] = out.pop(bound)
                    else:
                        out.pop(word)
            if node.get("nullable") is True:
                return _nullable(out)
        return out

    def _ref(self, ref: str) -> str:
        name = self._names.get(ref)
        if name is None:
            target = self.document.pointer(ref)  # refused first if not local
            self.document.resolve(target)  # and a chain of refs that ends in itself
            base = _DEF_NAME.sub("_", ref.rsplit("/", 1)[-1]) or "schema"
            name, n = base, 1
            while name in self.defs:
                n += 1
                name = f"{base}_{n}"
            self._names[ref] = name
            self.defs[name] = {}  # claimed before converting: a recursive schema meets itself
            self.defs[name] = self.convert(target)
        return f"#/$defs/{name}"

    def bundle(self, schema: dict[str, Any]) -> dict[str, Any]:
        """`schema` made self-contained: references inlined, recursive ones kept in `$defs`."""
        if not self.defs:
            return schema
        return inline_refs({**schema, "$defs": {**self.defs, **schema.get("$defs", {})}})


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, str):
        schema["type"] = [kind, "null"]
    elif isinstance(kind, list):
        if "null" not in kind:
            schema["type"] = [*kind, "null"]
    else:
        return {"anyOf": [schema, {"type": "null"}]}
    enum = schema.get("enum")
    if isinstance(enum, list) and None not in enum:
        schema["enum"] = [*enum, None]
    return schema
