"""The content block types (TypedDicts) of `nimblemcp.content`, built on first use.

`nimblemcp.content` re-exports every name here and imports this module only when one
of them is asked for (or type-checked): defining eleven TypedDicts with their `Literal`
and `NotRequired` fields costs more at start-up than the rest of the content helpers,
and a server that returns plain strings or dicts never needs them. Annotations are
evaluated (no postponed annotations here), so building them compiles no ForwardRefs.
Imports only `typing`.
"""

from typing import Any, Literal, NotRequired, TypedDict

__all__ = [
    "BLOCK_CLASSES", "Annotations", "AudioContent", "ContentBlock", "EmbeddedResource", "ImageContent",
    "ResourceLink", "TextContent",
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

for _cls in (Annotations, *BLOCK_CLASSES):  # their public home, in reprs and docs
    _cls.__module__ = "nimblemcp.content"
