"""Content blocks for tool results, prompt messages and embedded resources.

Blocks are plain JSON-ready dicts (typed as TypedDicts), so returning them costs
nothing. The helpers take care of base64 and of leaving out empty optional fields.
"""

from __future__ import annotations

import base64
import collections.abc
import types
import typing
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, cast

if TYPE_CHECKING:  # pathlib and mimetypes only when a file is read: off the start-up path
    from pathlib import Path

__all__ = [
    "Annotations",
    "AudioContent",
    "ContentBlock",
    "EmbeddedResource",
    "ImageContent",
    "ResourceLink",
    "TextContent",
    "audio",
    "blob_resource",
    "embedded",
    "image",
    "resource_link",
    "text",
    "text_resource",
]


class Annotations(TypedDict, total=False):
    """Hints on a content block: who it is for, how much it matters, when it changed."""

    audience: list[Literal["user", "assistant"]]
    priority: float
    lastModified: str


class TextContent(TypedDict):
    """A text block: `{"type": "text", "text": "..."}` (build one with `text("...")`)."""

    type: Literal["text"]
    text: str
    annotations: NotRequired[Annotations]
    _meta: NotRequired[dict[str, Any]]


class ImageContent(TypedDict):
    """An image, base64 in `data` (build one with `image(png_bytes, "image/png")`)."""

    type: Literal["image"]
    data: str
    mimeType: str
    annotations: NotRequired[Annotations]
    _meta: NotRequired[dict[str, Any]]


class AudioContent(TypedDict):
    """Audio, base64 in `data` (build one with `audio(wav_bytes, "audio/wav")`)."""

    type: Literal["audio"]
    data: str
    mimeType: str
    annotations: NotRequired[Annotations]
    _meta: NotRequired[dict[str, Any]]


class ResourceLink(TypedDict):
    """A link to a resource the client may read (build one with `resource_link(uri, name)`)."""

    type: Literal["resource_link"]
    uri: str
    name: str
    title: NotRequired[str]
    description: NotRequired[str]
    mimeType: NotRequired[str]
    size: NotRequired[int]
    annotations: NotRequired[Annotations]
    _meta: NotRequired[dict[str, Any]]


class EmbeddedResource(TypedDict):
    """A resource's contents inside a result (build one with `embedded(text_resource(...))`)."""

    type: Literal["resource"]
    resource: dict[str, Any]
    annotations: NotRequired[Annotations]
    _meta: NotRequired[dict[str, Any]]


ContentBlock = TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource

# The classes `is_content_hint` recognises as content in a return annotation.
BLOCK_CLASSES: tuple[Any, ...] = (TextContent, ImageContent, AudioContent, ResourceLink, EmbeddedResource)


CONTENT_TYPES = frozenset({"text", "image", "audio", "resource_link", "resource"})


def _extras(
    block: dict[str, Any], annotations: Annotations | None, meta: dict[str, Any] | None
) -> dict[str, Any]:
    if annotations:
        block["annotations"] = annotations
    if meta:
        block["_meta"] = meta
    return block


def text(
    value: str, *, annotations: Annotations | None = None, meta: dict[str, Any] | None = None
) -> TextContent:
    """A text block."""
    return cast("TextContent", _extras({"type": "text", "text": value}, annotations, meta))


def _b64(data: bytes | str) -> str:
    return data if isinstance(data, str) else base64.b64encode(data).decode("ascii")


def _read(path: str | Path, mime_type: str | None) -> tuple[bytes, str]:
    import mimetypes
    from pathlib import Path

    p = Path(path)
    guessed = mime_type or mimetypes.guess_type(p.name)[0] or "application/octet-stream"
    return p.read_bytes(), guessed


def image(
    data: bytes | str | None = None,
    mime_type: str | None = None,
    *,
    path: str | Path | None = None,
    annotations: Annotations | None = None,
    meta: dict[str, Any] | None = None,
) -> ImageContent:
    """An image block from raw bytes, a base64 string, or a file (`path=`)."""
    if path is not None:
        data, mime_type = _read(path, mime_type)
    if data is None or mime_type is None:
        raise ValueError("image() needs data and mime_type, or path")
    return cast("ImageContent", _extras({"type": "image", "data": _b64(data), "mimeType": mime_type}, annotations, meta))


def audio(
    data: bytes | str | None = None,
    mime_type: str | None = None,
    *,
    path: str | Path | None = None,
    annotations: Annotations | None = None,
    meta: dict[str, Any] | None = None,
) -> AudioContent:
    """An audio block from raw bytes, a base64 string, or a file (`path=`)."""
    if path is not None:
        data, mime_type = _read(path, mime_type)
    if data is None or mime_type is None:
        raise ValueError("audio() needs data and mime_type, or path")
    return cast("AudioContent", _extras({"type": "audio", "data": _b64(data), "mimeType": mime_type}, annotations, meta))


def resource_link(
    uri: str,
    name: str,
    *,
    title: str | None = None,
    description: str | None = None,
    mime_type: str | None = None,
    size: int | None = None,
    annotations: Annotations | None = None,
    meta: dict[str, Any] | None = None,
) -> ResourceLink:
    """A link to a resource the client may read (it need not be listed)."""
    block: dict[str, Any] = {"type": "resource_link", "uri": uri, "name": name}
    for key, value in (("title", title), ("description", description), ("mimeType", mime_type), ("size", size)):
        if value is not None:
            block[key] = value
    return cast("ResourceLink", _extras(block, annotations, meta))


def text_resource(uri: str, value: str, mime_type: str | None = None) -> dict[str, Any]:
    """`TextResourceContents`: one entry of a `resources/read` result."""
    contents: dict[str, Any] = {"uri": uri, "text": value}
    if mime_type:
        contents["mimeType"] = mime_type
    return contents


def blob_resource(uri: str, data: bytes | str, mime_type: str | None = None) -> dict[str, Any]:
    """`BlobResourceContents`: binary contents, base64 on the wire."""
    contents: dict[str, Any] = {"uri": uri, "blob": _b64(data)}
    if mime_type:
        contents["mimeType"] = mime_type
    return contents


def embedded(
    uri: str,
    value: str | bytes,
    mime_type: str | None = None,
    *,
    annotations: Annotations | None = None,
    meta: dict[str, Any] | None = None,
) -> EmbeddedResource:
    """An embedded resource block: text for `str`, blob for `bytes`."""
    contents = (
        text_resource(uri, value, mime_type)
        if isinstance(value, str)
        else blob_resource(uri, value, mime_type)
    )
    return cast("EmbeddedResource", _extras({"type": "resource", "resource": contents}, annotations, meta))


def is_content_block(value: Any) -> bool:
    return type(value) is dict and value.get("type") in CONTENT_TYPES


def _is_block_model(tp: Any) -> bool:
    """A pydantic model shaped like a content block (the official SDK's `TextContent`,
    `ImageContent`, ...): its `type` field is a Literal of content types."""
    fields = getattr(tp, "model_fields", None) if isinstance(tp, type) else None
    field = fields.get("type") if isinstance(fields, dict) else None
    if field is None:
        return False
    kinds = typing.get_args(getattr(field, "annotation", None))
    return bool(kinds) and all(k in CONTENT_TYPES for k in kinds)


def block_from_model(value: Any) -> dict[str, Any] | None:
    """The wire form of a content-block model instance, or None if `value` is not one."""
    if not _is_block_model(type(value)):
        return None
    block = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return cast("dict[str, Any]", block) if is_content_block(block) else None


def is_content_hint(tp: Any) -> bool:
    """True for return annotations that mean "content blocks", not structured output."""
    if tp in BLOCK_CLASSES or _is_block_model(tp):
        return True
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(is_content_hint(a) for a in args) and all(
            is_content_hint(a) or a is str for a in args
        )
    if origin in (list, tuple, collections.abc.Sequence):
        items = [a for a in args if a is not Ellipsis]
        # list[str] is structured data; only lists that hold content blocks are content.
        return any(is_content_hint(a) for a in items) and all(
            is_content_hint(a) or a is str for a in items
        )
    return False
