"""Schema references: inline local `$ref`s so hosts get a self-contained schema (no
`$defs` to chase), and refuse what a hand-written schema must not do: an unknown
`$schema` dialect (SCHEMA-01) or a reference outside the schema itself, which could
make the server fetch a URL (SCHEMA-02). Imports only errors (jsonschema lazily).
"""

from __future__ import annotations

from typing import Any

from nimblemcp.errors import SchemaRefused


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace `#/$defs/X` (and `#/definitions/X`) refs with copies of their targets.

    Recursive definitions cannot be inlined; those refs stay and only the `$defs`
    they need are kept.
    """
    defs: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        section = schema.get(key)
        if isinstance(section, dict):
            for name, target in section.items():  # type: ignore[union-attr]
                defs[f"#/{key}/{name}"] = target
    if not defs:
        return schema
    kept: dict[str, Any] = {}

    def walk(node: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")  # type: ignore[union-attr]
            if isinstance(ref, str) and ref in defs:
                if ref in stack:  # recursion: keep the ref and its definition
                    kept[ref] = defs[ref]
                    return node  # type: ignore[return-value]
                target = walk(defs[ref], (*stack, ref))
                extra = {k: walk(v, stack) for k, v in node.items() if k != "$ref"}  # type: ignore[union-attr]
                return {**target, **extra} if extra else target
            return {
                k: walk(v, stack)
                for k, v in node.items()  # type: ignore[union-attr]
                if not (not stack and k in ("$defs", "definitions") and node is schema)
            }
        if isinstance(node, list):
            return [walk(v, stack) for v in node]  # type: ignore[union-attr]
        return node

    out: dict[str, Any] = walk(schema, ())
    if kept:
        # Recursive definitions survive; walk them once more so their own
        # non-recursive refs are inlined too.
        kept_defs: dict[str, Any] = {}
        for ref, target in kept.items():
            name = ref.rsplit("/", 1)[1]
            kept_defs[name] = walk(target, (ref,))
        out["$defs"] = kept_defs
    return out


# --- dialects and references of hand-written schemas (SCHEMA-01/02) -------------------

# `$schema` URIs this server validates with (SCHEMA-01: 2020-12 is the default; the
# others are what `jsonschema` implements). Compared without a trailing "#".
DIALECTS: dict[str, str] = {
    "https://json-schema.org/draft/2020-12/schema": "Draft202012Validator",
    "https://json-schema.org/draft/2019-09/schema": "Draft201909Validator",
    "http://json-schema.org/draft-07/schema": "Draft7Validator",
    "http://json-schema.org/draft-06/schema": "Draft6Validator",
    "http://json-schema.org/draft-04/schema": "Draft4Validator",
}
_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")


def dialect_of(schema: dict[str, Any], where: str) -> str:
    """The validator class name for the schema's `$schema` (default 2020-12); an
    unknown dialect is refused with an error that names it."""
    declared = schema.get("$schema")
    if declared is None:
        return "Draft202012Validator"
    if not isinstance(declared, str) or declared.rstrip("#") not in DIALECTS:
        raise SchemaRefused(
            f"{where}: unsupported JSON Schema dialect {declared!r} "
            f"(supported: {', '.join(DIALECTS)})"
        )
    return DIALECTS[declared.rstrip("#")]


def check_refs(schema: Any, where: str) -> None:
    """Refuse every reference that does not point inside the schema itself: network
    (and any other external) `$ref`s are never dereferenced (SCHEMA-02), so a schema
    that needs one is rejected when it is registered, not trusted as permissive."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in _REF_KEYS:
                ref = node.get(key)  # type: ignore[union-attr]
                if ref is not None and not (isinstance(ref, str) and ref.startswith("#")):
                    raise SchemaRefused(
                        f"{where}: {key} {ref!r} points outside the schema; external and network "
                        "references are never fetched (inline the definition under $defs)"
                    )
            stack.extend(node.values())  # type: ignore[union-attr]
        elif isinstance(node, list):
            stack.extend(node)  # type: ignore[arg-type]


def _no_retrieval(uri: str) -> Any:
    raise SchemaRefused(f"reference {uri!r} is outside the schema and is never fetched")


def confined_validator(schema: dict[str, Any], where: str) -> Any:
    """A validator for an already checked schema (dialect and references), without
    re-checking the schema itself: for schemas made per request (elicitation)."""
    import jsonschema
    import referencing

    cls = getattr(jsonschema, dialect_of(schema, where))
    return cls(schema, registry=referencing.Registry(retrieve=_no_retrieval))  # type: ignore[call-arg]


def build_validator(schema: dict[str, Any], where: str) -> Any:
    """A jsonschema validator for a hand-written schema, built once: its dialect
    checked, its references confined to itself, and a registry that retrieves
    nothing (defence in depth: even a `$id` trick cannot make it fetch a URL)."""
    name = dialect_of(schema, where)
    check_refs(schema, where)
    import jsonschema
    import referencing

    cls = getattr(jsonschema, name)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise SchemaRefused(f"{where}: not a valid schema: {exc.message}") from None
    return cls(schema, registry=referencing.Registry(retrieve=_no_retrieval))  # type: ignore[call-arg]
