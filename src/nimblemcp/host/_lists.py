"""What a server's lists must hold before the catalog takes them (issue 37).

A list is data from outside the host: one server answering `{"prompts": ["x"]}` once
made the catalog rebuild raise inside that server's supervisor and stopped the whole
group. `checked(kind, items)` keeps the items with the shape the catalog, the model
adapters and the CLI rely on (an object; a non-empty string `name`, `uri` or
`uriTemplate`; strings, objects and lists where the spec has them) and describes each
item it drops, so the supervisor can say so, naming the server.
Pure data: imports nothing from nimblemcp.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = ["ListKind", "checked"]

ListKind = Literal["tools", "prompts", "resources", "templates"]

_TEXT = ("title", "description")
#: kind -> (the key that names the item, other string keys, object keys, list keys)
_SHAPES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "tools": ("name", _TEXT, ("inputSchema", "outputSchema", "annotations", "_meta"), ("icons",)),
    "prompts": ("name", _TEXT, ("_meta",), ("arguments", "icons")),
    "resources": ("uri", ("name", "mimeType", *_TEXT), ("annotations", "_meta"), ("icons",)),
    "templates": ("uriTemplate", ("name", "mimeType", *_TEXT), ("annotations", "_meta"),
                  ("icons",)),
}
_SHOWN = 60  # characters of a dropped item shown in its description
_PREVIEW = reprlib.Repr()  # (keyword arguments only from Python 3.12)
_PREVIEW.maxlevel, _PREVIEW.maxdict, _PREVIEW.maxlist = 2, 3, 3
_PREVIEW.maxstring = _PREVIEW.maxother = _SHOWN


def checked(kind: ListKind, items: Sequence[Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The well-formed items of a `kind` list, and a description of each one dropped."""
    key, texts, objects, lists = _SHAPES[kind]
    kept: list[dict[str, Any]] = []
    dropped: list[str] = []
    for index, item in enumerate(items):
        problem = _problem(item, key, texts, objects, lists)
        if problem is None and kind == "prompts":
            problem = _arguments_problem(item.get("arguments"))
        if problem is None:
            kept.append(item)
        else:
            dropped.append(f"{kind}[{index}] {problem}: {_preview(item)}")
    return kept, dropped


def _problem(item: Any, key: str, texts: tuple[str, ...], objects: tuple[str, ...],
             lists: tuple[str, ...]) -> str | None:
    if not isinstance(item, dict):
        return "is not an object"
    if not isinstance(item.get(key), str) or not item[key]:
        return f"has no string `{key}`"
    for name in texts:
        if name in item and item[name] is not None and not isinstance(item[name], str):
            return f"has a `{name}` that is not a string"
    for name in objects:
        if name in item and item[name] is not None and not isinstance(item[name], Mapping):
            return f"has a `{name}` that is not an object"
    for name in lists:
        if name in item and item[name] is not None and not isinstance(item[name], list):
            return f"has a `{name}` that is not a list"
    return None


def _arguments_problem(arguments: Any) -> str | None:
    for argument in arguments or ():
        if not isinstance(argument, dict) or not isinstance(argument.get("name"), str):
            return "has an argument without a string `name`"
    return None


def _preview(item: Any) -> str:
    text = _PREVIEW.repr(item)  # never the whole of a huge item
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."
