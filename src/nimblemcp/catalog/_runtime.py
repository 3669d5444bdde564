"""What a module written by `nimblemcp stubs` stands on: `ServerStub` and the result types.

    from my_server_stubs import ProjectDocs          # generated
    async with Client("http://127.0.0.1:8000/mcp") as client:
        docs = ProjectDocs(client)
        text = await docs.read_doc(name="brief.md")

A generated class subclasses `ServerStub`; its methods only name the tool, prompt or
resource and hand over the arguments, so what a call does lives here, once: optional
arguments left at `NOT_GIVEN` are not sent (the server applies its own default); a tool
with an `outputSchema` returns its `structuredContent` (the Client has validated it)
and raises `ToolError` with the tool's text when the result is an error; a tool without
one returns the whole `CallToolResult`. URI templates are expanded here (RFC 6570,
levels 1 to 3). Imports only the client's public names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict
from urllib.parse import quote

from nimblemcp.errors import ToolError

if TYPE_CHECKING:
    from nimblemcp.client import Client

__all__ = [
    "NOT_GIVEN",
    "CallToolResult",
    "GetPromptResult",
    "NotGiven",
    "ReadResourceResult",
    "ServerStub",
    "expand_template",
]


class NotGiven:
    """The type of `NOT_GIVEN`: an optional argument the caller left out."""

    __slots__ = ()

    def __bool__(self) -> Literal[False]:
        return False

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN = NotGiven()


class CallToolResult(TypedDict):
    """A `tools/call` result: content blocks, maybe structured content, maybe an error."""

    content: list[dict[str, Any]]
    structuredContent: NotRequired[Any]
    isError: NotRequired[bool]
    _meta: NotRequired[dict[str, Any]]


class ReadResourceResult(TypedDict):
    """A `resources/read` result: the contents (text or base64 blob) of one or more URIs."""

    contents: list[dict[str, Any]]
    _meta: NotRequired[dict[str, Any]]


class GetPromptResult(TypedDict):
    """A `prompts/get` result: the messages, and maybe a description."""

    messages: list[dict[str, Any]]
    description: NotRequired[str]
    _meta: NotRequired[dict[str, Any]]


def _given(arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in arguments.items() if not isinstance(v, NotGiven)}


class ServerStub:
    """The base of a generated stub: one server behind an open `Client`."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def _call_tool(self, name: str, arguments: Mapping[str, Any]) -> CallToolResult:
        result: Any = await self.client.call_tool(name, _given(arguments))
        return result  # type: ignore[no-any-return]

    async def _call_tool_structured(self, name: str, arguments: Mapping[str, Any]) -> Any:
        result = await self.client.call_tool(name, _given(arguments))
        if result.get("isError"):
            texts = [str(b.get("text")) for b in result.get("content") or []
                     if isinstance(b, dict) and b.get("type") == "text"]
            raise ToolError("\n".join(texts) or f"the tool {name!r} failed")
        return result.get("structuredContent")

    async def _read_resource(self, uri: str) -> ReadResourceResult:
        result: Any = await self.client.read_resource(uri)
        return result  # type: ignore[no-any-return]

    async def _read_template(self, template: str, values: Mapping[str, Any]) -> ReadResourceResult:
        return await self._read_resource(expand_template(template, _given(values)))

    async def _get_prompt(self, name: str, arguments: Mapping[str, Any]) -> GetPromptResult:
        result: Any = await self.client.get_prompt(name, _given(arguments))
        return result  # type: ignore[no-any-return]


# RFC 6570 operators: (first, separator, named, allow reserved characters)
_OPERATORS: dict[str, tuple[str, str, bool, bool]] = {
    "": ("", ",", False, False),
    "+": ("", ",", False, True),
    "#": ("#", ",", False, True),
    ".": (".", ".", False, False),
    "/": ("/", "/", False, False),
    ";": (";", ";", True, False),
    "?": ("?", "&", True, False),
    "&": ("&", "&", True, False),
}
_RESERVED = ":/?#[]@!$&'()*+,;="


def expand_template(template: str, values: Mapping[str, Any]) -> str:
    """Expand an RFC 6570 URI template (levels 1-3, and the `:n` prefix modifier);
    variables missing from `values` expand to nothing, as the RFC says."""
    out: list[str] = []
    i = 0
    while i < len(template):
        start = template.find("{", i)
        if start < 0:
            out.append(template[i:])
            break
        end = template.find("}", start)
        if end < 0:
            out.append(template[i:])
            break
        out.append(template[i:start])
        body = template[start + 1:end]
        op = body[:1] if body[:1] and body[:1] in _OPERATORS else ""
        first, sep, named, reserved = _OPERATORS[op]
        parts: list[str] = []
        for spec in (body[len(op):]).split(","):
            name, _, prefix = spec.strip().rstrip("*").partition(":")
            if name not in values or values[name] is None:
                continue
            text = str(values[name]).lower() if isinstance(values[name], bool) else str(values[name])
            if prefix.isdigit():
                text = text[:int(prefix)]
            encoded = quote(text, safe=_RESERVED if reserved else "")
            if named:
                parts.append(f"{name}={encoded}" if encoded or op != ";" else name)
            else:
                parts.append(encoded)
        if parts:
            out.append(first + sep.join(parts))
        i = end + 1
    return "".join(out)
