"""Resources and resource templates (RFC 6570 level 1, plus `{+var}` for paths).

A template variable never matches a value that could walk out of its slot:
decoded `..` segments, backslashes and NUL are refused (RES-08), and plain `{var}`
never spans a `/`.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any

from nimblemcp.content import blob_resource, text_resource
from nimblemcp.errors import InvalidParams
from nimblemcp.server._context import Context, context_param, type_hints
from nimblemcp.server._docstrings import parse_docstring
from nimblemcp.server._invoke import Invocable
from nimblemcp.server._visibility import tag_set

# Patterns, compiled by `re` on first use (registration), not at import (issue 18).
_VAR = r"\{([+]?)([A-Za-z0-9_]+)\}"
_URI_SCHEME = r"^[A-Za-z][A-Za-z0-9+.\-]*:"


def _definition(
    key: str, value: str, name: str, title: str | None, description: str | None,
    mime_type: str | None, extra: dict[str, Any],
) -> dict[str, Any]:
    d: dict[str, Any] = {key: value, "name": name}
    if title:
        d["title"] = title
    if description:
        d["description"] = description
    if mime_type:
        d["mimeType"] = mime_type
    d.update({k: v for k, v in extra.items() if v})
    return d


def to_contents(uri: str, value: Any, mime_type: str | None) -> list[dict[str, Any]]:
    """Turn what a read function returned into `contents` entries."""
    if isinstance(value, str):
        return [text_resource(uri, value, mime_type or "text/plain")]
    if isinstance(value, bytes | bytearray):
        return [blob_resource(uri, bytes(value), mime_type or "application/octet-stream")]
    if isinstance(value, dict) and "uri" in value and ("text" in value or "blob" in value):
        return [value]  # type: ignore[list-item]
    if isinstance(value, list) and value:
        out: list[dict[str, Any]] = []
        for item in value:  # type: ignore[union-attr]
            out.extend(to_contents(uri, item, mime_type))
        return out
    raise TypeError(f"resource {uri}: a read function must return str, bytes or contents")


class _Readable(Invocable):
    """A resource or template; its function runs by the policy of `_invoke`."""

    __slots__ = ("cache_scope", "definition", "mime_type", "ttl_ms")

    definition: dict[str, Any]
    mime_type: str | None
    ttl_ms: int | None
    cache_scope: str | None

    def _setup(
        self, fn: Callable[..., Any], ttl_ms: int | None, cache_scope: str | None,
        bind: Callable[[Any], dict[str, Any]] = dict, tags: Iterable[str] | None = None,
    ) -> None:
        self._set_fn(fn, context_param(fn), bind)  # the template's variables (none for a resource)
        self.tags = tag_set(tags)
        if ttl_ms is not None and ttl_ms < 0:
            raise ValueError("ttl_ms must be >= 0 (CACHE-01)")
        if cache_scope not in (None, "public", "private"):
            raise ValueError("cache_scope must be 'public' or 'private'")
        self.ttl_ms = ttl_ms
        self.cache_scope = cache_scope


class ResourceEntry(_Readable):
    """A resource with a fixed URI."""

    __slots__ = ("uri",)

    def __init__(
        self, uri: str, fn: Callable[..., Any], *, name: str | None = None,
        title: str | None = None, description: str | None = None,
        mime_type: str | None = None, size: int | None = None,
        icons: list[dict[str, Any]] | None = None, annotations: dict[str, Any] | None = None,
        meta: dict[str, Any] | None = None, ttl_ms: int | None = None,
        cache_scope: str | None = None, tags: Iterable[str] | None = None,
    ) -> None:
        if not re.match(_URI_SCHEME, uri):
            raise ValueError(f"resource URI {uri!r} needs a scheme (RES-06)")
        self.uri = uri
        self.mime_type = mime_type
        self._setup(fn, ttl_ms, cache_scope, tags=tags)
        summary, _ = parse_docstring(fn.__doc__)
        self.definition = _definition(
            "uri", uri, name or fn.__name__, title,
            description if description is not None else summary, mime_type,
            {"size": size, "icons": icons, "annotations": annotations, "_meta": meta},
        )

    async def read(self, ctx: Context) -> list[dict[str, Any]]:
        return to_contents(self.uri, await self.invoke(ctx, ()), self.mime_type)


def compile_template(uri_template: str) -> tuple[re.Pattern[str], tuple[tuple[str, bool], ...]]:
    """The matching regex of a URI template and its variables (name, reserved)."""
    parts: list[str] = []
    pos = 0
    variables: list[tuple[str, bool]] = []
    for m in re.finditer(_VAR, uri_template):
        parts.append(re.escape(uri_template[pos : m.start()]))
        reserved = m.group(1) == "+"
        parts.append(f"(?P<{m.group(2)}>{'.+?' if reserved else '[^/?#]+'})")
        variables.append((m.group(2), reserved))
        pos = m.end()
    parts.append(re.escape(uri_template[pos:]))
    return re.compile("^" + "".join(parts) + "$"), tuple(variables)


def _safe(value: str, allow_slash: bool) -> bool:
    if "\\" in value or "\x00" in value:
        return False
    if not allow_slash and "/" in value:
        return False
    return all(seg not in ("..", ".") for seg in value.split("/")) if value else True


class TemplateEntry(_Readable):
    """A resource template; its function takes the template variables as arguments."""

    __slots__ = ("completers", "pattern", "uri_template", "variables")

    def __init__(
        self, uri_template: str, fn: Callable[..., Any], *, name: str | None = None,
        title: str | None = None, description: str | None = None,
        mime_type: str | None = None, icons: list[dict[str, Any]] | None = None,
        annotations: dict[str, Any] | None = None, meta: dict[str, Any] | None = None,
        ttl_ms: int | None = None, cache_scope: str | None = None,
        complete: dict[str, Callable[..., Any]] | None = None,
        tags: Iterable[str] | None = None,
    ) -> None:
        if not re.match(_URI_SCHEME, uri_template):
            raise ValueError(f"resource template {uri_template!r} needs a scheme")
        self.uri_template = uri_template
        self.mime_type = mime_type
        self.pattern, self.variables = compile_template(uri_template)
        variables = self.variables
        # Variables converted per the function's annotations (-32602 on a bad value).
        from nimblemcp.server._uri_values import uri_binder  # templates only (start-up, issue 18)

        try:
            hints = type_hints(fn)
        except Exception:  # unresolvable annotations: the values stay strings
            hints = {}
        self._setup(fn, ttl_ms, cache_scope, uri_binder(fn, [v for v, _ in variables], hints), tags)
        params = set(inspect.signature(fn).parameters) - {self.ctx_param}
        missing = {v for v, _ in variables} - params
        if missing:
            raise TypeError(f"{fn.__name__} must accept the template variables {sorted(missing)}")
        self.completers = dict(complete or {})
        summary, _ = parse_docstring(fn.__doc__)
        self.definition = _definition(
            "uriTemplate", uri_template, name or fn.__name__, title,
            description if description is not None else summary, mime_type,
            {"icons": icons, "annotations": annotations, "_meta": meta},
        )

    def match(self, uri: str) -> dict[str, str] | None:
        """Variables for `uri`, None when it does not fit; raises on traversal tricks."""
        m = self.pattern.match(uri)
        if m is None:
            return None
        values: dict[str, str] = {}
        for name, reserved in self.variables:
            raw = m.group(name)
            if "%" in raw:  # `unquote` returns any other text as it is
                from urllib.parse import unquote  # here: keeps urllib off a server's start-up

                value = unquote(raw)
            else:
                value = raw
            if not _safe(value, reserved):
                raise InvalidParams("Invalid resource URI", {"uri": uri})
            values[name] = value
        return values

    async def read(self, ctx: Context, uri: str, values: dict[str, str]) -> list[dict[str, Any]]:
        return to_contents(uri, await self.invoke(ctx, values), self.mime_type)
