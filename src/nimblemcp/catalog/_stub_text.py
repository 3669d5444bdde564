"""Turning what a server wrote into safe Python source: identifiers, literals, docstrings.

Every name, description and value in a catalog is untrusted text. Generated code
holds it in exactly three forms, none of which it can leave:
- identifiers: ASCII letters, digits and `_` only, never a keyword, a builtin type
  name or a name the module already uses (`identifier`, `class_name`, `Names`);
- literals: `ascii()` of the value, a Python literal by construction (`literal`);
- docstrings: backslashes escaped, a `"` escaped wherever a second one follows it or it
  ends the text, every character that is not printable escaped, so nothing can close the
  string early and nothing can become code (`docstring`).
Text never goes into a comment. Pure functions; imports nothing from nimblemcp.
"""

from __future__ import annotations

import ast
import keyword
import re
from collections.abc import Iterable

__all__ = ["Names", "class_name", "docstring", "identifier", "literal"]

# Names that a method, parameter or field must not shadow inside the generated class:
# the builtins its annotations use, and what the module imports.
SHADOWED = frozenset({
    "str", "int", "float", "bool", "list", "dict", "tuple", "set", "bytes", "object", "type",
    "None", "Any", "Literal", "NotRequired", "TypedDict", "cast", "annotations", "client",
    "NOT_GIVEN", "NotGiven", "CallToolResult", "ReadResourceResult", "GetPromptResult",
    "ServerStub", "CATALOG_DIGEST", "self", "cls",
})


def _words(text: str) -> list[str]:
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", text)
    return [w for w in re.split(r"[^0-9A-Za-z]+", text) if w]


def identifier(text: str, fallback: str = "item") -> str:
    """A snake_case Python identifier for a name (`get-sum` -> `get_sum`,
    `messageType` -> `message_type`), ASCII only."""
    name = "_".join(w.lower() for w in _words(text)) or fallback
    if name[0].isdigit():
        name = f"{fallback}_{name}"
    if keyword.iskeyword(name) or name in SHADOWED:
        name += "_"
    return name


def class_name(text: str, fallback: str = "Item") -> str:
    """A CamelCase class name for a name (`mcp-servers/everything` -> `McpServersEverything`)."""
    name = "".join(w[:1].upper() + w[1:] for w in _words(text)) or fallback
    if name[0].isdigit():
        name = f"{fallback}{name}"
    if keyword.iskeyword(name) or name in SHADOWED:
        name += "_"
    return name


class Names:
    """Hands out names that are unique within one scope, in the order asked for: a
    second `get_sum` becomes `get_sum_2`."""

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self.taken = set(taken)

    def claim(self, wanted: str) -> str:
        name, number = wanted, 1
        while name in self.taken:
            number += 1
            name = f"{wanted}_{number}"
        self.taken.add(name)
        return name


def literal(value: object) -> str:
    """A Python literal for a JSON scalar (str, int, bool, None), ASCII only."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return ascii(value)
    raise TypeError(f"not a literal type: {type(value).__name__}")


def docstring(text: str, indent: str) -> str:
    """A triple-quoted docstring (with its quotes) holding `text`, indented for a body at
    `indent`; a multi-line text ends with its closing quotes on a line of their own."""
    raw = [line.rstrip() for line in
           text.replace("\r\n", "\n").replace("\r", "\n").strip("\n").split("\n")]
    while len(raw) > 1 and not raw[-1]:
        raw.pop()
    lines = [_escape(line, last=index == len(raw) - 1) for index, line in enumerate(raw)]
    if len(lines) == 1:
        source = f'"""{lines[0]}"""'
    else:
        body = "\n".join((indent + line) if line else "" for line in lines[1:])
        source = f'"""{lines[0]}\n{body}\n{indent}"""'
    # the construction above cannot fail; this proves it for every text we are given
    node = ast.parse(source, mode="eval").body
    if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
        raise AssertionError("a docstring did not compile to a string")
    return source


def _escape(line: str, *, last: bool) -> str:
    """Backslashes doubled; a `"` escaped when another `"` follows it or it ends the
    text (so no run of three can form, nor one touch the closing quotes); characters
    that are not printable (controls, bidi marks, zero-width ones) escaped."""
    out: list[str] = []
    for index, ch in enumerate(line):
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            following = line[index + 1:index + 2]
            out.append('\\"' if following == '"' or (last and not following) else '"')
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)
