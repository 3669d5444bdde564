"""The operations of an OpenAPI document, each read once into what a tool needs: a
name, a description, one `inputSchema` over its parameters and body, an `outputSchema`
when its success response is a JSON object, and the map from each argument back to
where it goes in the HTTP request.

Arguments: path, query, header and cookie parameters by their names, and the
properties of a JSON (or form) object body by theirs; a body that is not an object with
properties (an array, a string, a `oneOf`) is one argument, `body`. When two locations
use one name, the first in the order path, query, header, cookie, body keeps it and the
others get their location as a suffix: `id` (path) and `id__body`.

Names: the `operationId`, else the method and path (`get_pets_petId`), reduced to the
characters a tool name may hold (`A-Z a-z 0-9 _ - .`, at most 128); `names` renames by
`operationId` (or by that generated name). A name taken twice gets `_2`, `_3`...
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from nimblemcp.errors import SchemaRefused
from nimblemcp.openapi._spec import Document, SchemaSet, is_object_schema

__all__ = ["Argument", "Operation", "Route", "read_operations"]

log = logging.getLogger("nimblemcp.openapi")

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_LOCATIONS = ("path", "query", "header", "cookie")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")
_JSON = re.compile(r"^application/([\w.\-]+\+)?json\b|^\*/\*$")


@dataclass(frozen=True, slots=True)
class Route:
    """One operation of the document, as a route map sees it: `method` in capitals,
    `path` as written (`/pets/{petId}`), its `operation_id`, `tags` and raw
    `operation` object."""

    method: str
    path: str
    operation_id: str | None
    tags: tuple[str, ...]
    operation: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Argument:
    """Where one tool argument goes: `where` is path, query, header, cookie or body;
    `key` is its name there (None: the whole body)."""

    name: str
    where: str
    key: str | None
    style: str | None = None
    explode: bool | None = None


@dataclass(frozen=True, slots=True)
class Operation:
    route: Route
    name: str
    description: str | None
    arguments: tuple[Argument, ...]
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    body_media: str | None  # the request body's content type, None without one


def read_operations(document: Document, names: Mapping[str, str] | None = None) -> Iterator[Operation]:
    """Every operation of the document, in document order. One whose references cannot
    be followed (outside the document, or naming nothing) is left out with a warning."""
    taken: set[str] = set()
    paths = document.doc.get("paths") or {}
    for path, item in paths.items():
        item = document.resolve(item)
        if not isinstance(item, dict):
            continue
        for method in METHODS:
            operation = item.get(method)
            if not isinstance(operation, dict):
                continue
            try:
                yield _operation(document, path, method, item, operation, names or {}, taken)
            except SchemaRefused as exc:
                log.warning("openapi: %s %s left out: %s", method.upper(), path, exc)


def _operation(document: Document, path: str, method: str, item: dict[str, Any], operation: dict[str, Any],
               names: Mapping[str, str], taken: set[str]) -> Operation:
    op_id = operation.get("operationId")
    route = Route(method.upper(), path, op_id if isinstance(op_id, str) else None,
                  tuple(str(t) for t in operation.get("tags") or ()), operation)
    generated = tool_name(route)
    name = names.get(route.operation_id or "") or names.get(generated) or generated
    name = _unique(name, taken)
    inputs = SchemaSet(document)
    properties: dict[str, Any] = {}
    required: list[str] = []
    arguments: list[Argument] = []

    def add(key: str | None, where: str, schema: Any, needed: bool, **how: Any) -> None:
        arg = _free(key or "body", where, properties)
        properties[arg] = schema
        if needed:
            required.append(arg)
        arguments.append(Argument(arg, where, key, **how))

    params = _parameters(document, item, operation)
    for where in _LOCATIONS:
        for param in (p for p in params if p.get("in") == where):
            schema = inputs.convert(_param_schema(param))
            if param.get("description") and isinstance(schema, dict) and "description" not in schema:
                schema = {**schema, "description": param["description"]}
            add(str(param["name"]), where, schema, where == "path" or bool(param.get("required")),
                style=param.get("style"), explode=param.get("explode"))
    body_media = None
    body = document.resolve(operation.get("requestBody"))
    if isinstance(body, dict) and isinstance(body.get("content"), dict) and body["content"]:
        body_media, media = _pick_media(body["content"])
        raw = media.get("schema", {}) if isinstance(media, dict) else {}
        root = document.resolve(raw)
        needed = bool(body.get("required"))
        if _spreadable(root):
            inner = set(root.get("required") or ()) if needed else set()
            for key, schema in root["properties"].items():
                add(str(key), "body", inputs.convert(schema), key in inner)
        else:
            schema = inputs.convert(raw)
            if body.get("description") and isinstance(schema, dict) and "description" not in schema:
                schema = {**schema, "description": body["description"]}
            add(None, "body", schema, needed)
    input_schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        input_schema["required"] = required
    return Operation(route, name, _description(operation), tuple(arguments), inputs.bundle(input_schema),
                     _output_schema(document, operation), body_media)


def tool_name(route: Route) -> str:
    """The operationId, else `method_path`, made a valid tool name."""
    raw = route.operation_id or f"{route.method.lower()}_{route.path.strip('/')}"
    name = _UNSAFE.sub("_", raw).strip("_")[:128]
    return name or route.method.lower()


def _unique(name: str, taken: set[str]) -> str:
    name = _UNSAFE.sub("_", name)[:128] or "operation"
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name[:120]}_{n}"
    taken.add(candidate)
    return candidate


def _free(name: str, where: str, used: Mapping[str, Any]) -> str:
    """`name`, or `name__where` (then numbered) when an earlier location holds it."""
    if name not in used:
        return name
    candidate, n = f"{name}__{where}", 1
    while candidate in used:
        n += 1
        candidate = f"{name}__{where}{n}"
    return candidate


def _parameters(document: Document, item: dict[str, Any], operation: dict[str, Any]) -> list[dict[str, Any]]:
    """The path item's parameters overridden by the operation's (same name and place)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in [*(item.get("parameters") or ()), *(operation.get("parameters") or ())]:
        param = document.resolve(raw)
        if isinstance(param, dict) and isinstance(param.get("name"), str) and param.get("in") in _LOCATIONS:
            found[(param["in"], param["name"])] = param
    return list(found.values())


def _param_schema(param: dict[str, Any]) -> Any:
    if "schema" in param:
        return param["schema"]
    content = param.get("content")
    if isinstance(content, dict) and content:
        media = next(iter(content.values()))
        if isinstance(media, dict):
            return media.get("schema", {})
    return {"type": "string"}


def _pick_media(content: dict[str, Any]) -> tuple[str, Any]:
    """The body content type to send: JSON first, then forms, then the first listed."""
    for test in (lambda m: bool(_JSON.match(m)), lambda m: m == "application/x-www-form-urlencoded",
                 lambda m: m == "multipart/form-data"):
        for media, value in content.items():
            if test(media):
                return media, value
    media = next(iter(content))
    return media, content[media]


def _spreadable(schema: Any) -> bool:
    """A body whose properties can be arguments of their own: an object with properties,
    not composed from other schemas."""
    return (isinstance(schema, dict) and isinstance(schema.get("properties"), dict)
            and bool(schema["properties"]) and schema.get("type", "object") == "object"
            and not any(k in schema for k in ("allOf", "anyOf", "oneOf", "$ref")))


def _description(operation: dict[str, Any]) -> str | None:
    parts = [str(operation[k]).strip() for k in ("summary", "description") if operation.get(k)]
    if len(parts) == 2 and parts[1].startswith(parts[0].rstrip(".")):
        parts = parts[1:]  # the summary repeated as the description's first words
    return "\n\n".join(parts) or None


def success_response(operation: dict[str, Any]) -> Any:
    """The first 2xx response (200 before 201...), else None."""
    responses = operation.get("responses") or {}
    codes = sorted(str(c) for c in responses if str(c).startswith("2"))
    return responses[codes[0]] if codes else None


def _output_schema(document: Document, operation: dict[str, Any]) -> dict[str, Any] | None:
    """The success response's JSON schema when it is an object (MCP's rule for an
    `outputSchema`); None otherwise."""
    response = document.resolve(success_response(operation) or {})
    content = response.get("content") if isinstance(response, dict) else None
    if not isinstance(content, dict):
        return None
    for media, value in content.items():
        if _JSON.match(media) and isinstance(value, dict) and "schema" in value:
            outputs = SchemaSet(document)
            root = outputs.convert(document.resolve(value["schema"]))
            return outputs.bundle(root) if is_object_schema(root) else None
    return None
