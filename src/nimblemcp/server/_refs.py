"""Inline local `$ref`s so hosts get a self-contained schema (no `$defs` to chase)."""

from __future__ import annotations

from typing import Any


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
