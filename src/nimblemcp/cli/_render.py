"""Plain-text output and terminal prompts for the client commands of the CLI.

Tables for lists, readable content blocks for results, one line per listen event,
what happens during a request on stderr (`Progress`: a bar on a terminal, lines
otherwise; `show_log`: the server's log messages; `show_error`: an error with its
details), and `ask_form`: an elicitation form answered with `input()` per schema
field. Standard library only (no terminal library: the CLI stays quick to start).
Pure formatting and prompting: must not import the client, transports or the server.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

from nimblemcp.types._meta import SERVER_INFO

__all__ = [
    "Progress",
    "ask_form",
    "describe_rows",
    "dump_event",
    "dump_json",
    "first_line",
    "render_content",
    "render_discover",
    "render_event",
    "render_messages",
    "resource_rows",
    "show_error",
    "show_log",
    "table",
]


def dump_json(value: Any, out: TextIO | None = None) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False), file=out or sys.stdout, flush=True)


def dump_event(value: Any, out: TextIO | None = None) -> None:
    """One compact JSON line on stderr (what `--json` shows of progress and logs)."""
    print(json.dumps(value, ensure_ascii=False), file=out or sys.stderr, flush=True)


class Progress:
    """Shows `notifications/progress` of one request on stderr.

    On a terminal one line is redrawn in place (`[#####.....]  50%  message`); into
    a pipe or file each update is its own line (`progress 1/2 (50%) message`); with
    `json_lines` each is a JSON object. `above(...)` prints other lines (the server's
    log) above the bar instead of onto it; `finish()` clears the terminal line.
    """

    def __init__(self, out: TextIO | None = None, *, json_lines: bool = False) -> None:
        self.out = out or sys.stderr
        self.json_lines = json_lines
        self.live = not json_lines and self.out.isatty()
        self.drawn = ""  # the bar on the terminal line now ("" when none)

    def update(self, progress: float, total: float | None, message: str | None) -> None:
        if self.json_lines:
            dump_event({"progress": progress, "total": total, "message": message}, self.out)
            return
        share = progress / total if total else None
        number = f"{progress:g}" + (f"/{total:g}" if total else "")
        percent = f" ({share:.0%})" if share is not None else ""
        if not self.live:
            text = f"progress {number}{percent}" + (f" {message}" if message else "")
            print(text, file=self.out, flush=True)
            return
        width = max(10, min(40, shutil.get_terminal_size().columns - 40))
        if share is not None:
            filled = int(min(max(share, 0.0), 1.0) * width)
            bar = "[" + "#" * filled + "." * (width - filled) + f"] {share:4.0%}"
        else:
            bar = f"[{number}]"
        line = bar + (f"  {message}" if message else "")
        self.out.write("\r\x1b[2K" + line[:max(1, shutil.get_terminal_size().columns - 1)])
        self.out.flush()
        self.drawn = line

    def above(self, show: Callable[[], None]) -> None:
        """Run `show` (which prints whole lines to the same stream) with the bar cleared
        first and drawn again after, so that both stay readable."""
        drawn = self.drawn
        if drawn:
            self.finish()
        show()
        if drawn:
            self.out.write(drawn[:max(1, shutil.get_terminal_size().columns - 1)])
            self.out.flush()
            self.drawn = drawn

    def finish(self) -> None:
        if self.drawn:
            self.out.write("\r\x1b[2K")
            self.out.flush()
            self.drawn = ""


def show_log(params: Mapping[str, Any], out: TextIO | None = None) -> None:
    """A `notifications/message` as one stderr line: `[server warning db] text`."""
    data = params.get("data")
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    where = " ".join(str(part) for part in (params.get("level", "info"), params.get("logger"))
                     if part)
    print(f"[server {where}] {text}", file=out or sys.stderr, flush=True)


def show_error(exc: BaseException, out: TextIO | None = None, *, json_lines: bool = False) -> None:
    """An error with its code and data kept (a missing capability, a dead server's stderr)."""
    code = getattr(exc, "code", None)
    data = getattr(exc, "data", None)
    if json_lines:
        dump_event({"error": {"type": type(exc).__name__, "code": code, "message": str(exc),
                              "data": data}}, out)
        return
    out = out or sys.stderr
    head = f"nimblemcp: {type(exc).__name__}" + (f" ({code})" if code is not None else "")
    print(f"{head}: {exc}", file=out)
    if data is not None:
        print("details: " + json.dumps(data, ensure_ascii=False, indent=2), file=out)
    out.flush()


def resource_rows(resources: Iterable[Mapping[str, Any]],
                  templates: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    """Rows for `read` without a URI: the resources, then the templates."""
    rows = [[str(i.get("uri")), str(i.get("mimeType", "")),
             first_line(i.get("description") or i.get("title") or i.get("name"))]
            for i in resources]
    rows += [[str(t.get("uriTemplate")), str(t.get("mimeType", "")),
              "(template) " + first_line(t.get("description") or t.get("title") or t.get("name"))]
             for t in templates]
    return rows


def first_line(text: Any) -> str:
    return str(text or "").strip().splitlines()[0] if str(text or "").strip() else ""


def table(rows: Sequence[Sequence[str]], headers: Sequence[str], out: TextIO | None = None) -> None:
    """A left-aligned text table; the last column is never padded."""
    out = out or sys.stdout
    if not rows:
        print("(none)", file=out)
        return
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers) - 1)]
    for row in [headers, ["-" * len(h) for h in headers], *rows]:
        cells = [str(c).ljust(widths[i]) for i, c in enumerate(row[:-1])]
        print("  ".join([*cells, str(row[-1])]).rstrip(), file=out)


def describe_rows(items: Iterable[Mapping[str, Any]], key: str = "name") -> list[list[str]]:
    return [[str(i.get(key, "")), first_line(i.get("title") or i.get("description"))]
            for i in items]


def render_discover(result: Mapping[str, Any], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    info = result.get("serverInfo") or (result.get("_meta") or {}).get(SERVER_INFO) or {}
    name = info.get("title") or info.get("name") or "(unnamed server)"
    print(f"{name} {info.get('version', '')}".rstrip(), file=out)
    print("versions:     " + ", ".join(result.get("supportedVersions") or []), file=out)
    caps = result.get("capabilities") or {}
    print("capabilities: " + (", ".join(sorted(caps)) or "(none)"), file=out)
    if result.get("instructions"):
        print("\n" + str(result["instructions"]), file=out)


def render_content(blocks: Iterable[Mapping[str, Any]], out: TextIO | None = None) -> None:
    """Text as-is; other blocks as a one-line summary."""
    out = out or sys.stdout
    for block in blocks:
        kind = block.get("type")
        if kind == "text" or ("text" in block and kind is None):
            print(block.get("text", ""), file=out)
        elif kind in ("image", "audio") or "blob" in block:
            size = len(str(block.get("data") or block.get("blob") or "")) * 3 // 4
            label = kind or "blob"
            print(f"[{label} {block.get('mimeType', '?')}, about {size} bytes]", file=out)
        elif kind == "resource_link":
            print(f"[link {block.get('uri')}] {block.get('name', '')}".rstrip(), file=out)
        elif kind == "resource":
            inner = block.get("resource") or {}
            print(f"[resource {inner.get('uri')}]", file=out)
            render_content([inner], out)
        else:
            print(json.dumps(block, ensure_ascii=False), file=out)


def render_messages(messages: Iterable[Mapping[str, Any]], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for message in messages:
        print(f"--- {message.get('role', '?')}", file=out)
        content = message.get("content")
        render_content(content if isinstance(content, list) else [content or {}], out)


def render_event(kind: str, uri: str | None, raw: Mapping[str, Any] | None) -> str:
    if kind in ("acknowledged", "missed") and raw is not None:
        honoured = (raw.get("params") or {}).get("notifications")
        note = " (events may have been lost; refetch)" if kind == "missed" else ""
        return f"{kind}{note} {json.dumps(honoured, ensure_ascii=False)}"
    return f"{kind} {uri}" if uri else kind


def _parse(prop: Mapping[str, Any], text: str) -> Any:
    kind = prop.get("type")
    if kind == "boolean":
        lowered = text.strip().lower()
        if lowered in ("y", "yes", "true", "1"):
            return True
        if lowered in ("n", "no", "false", "0"):
            return False
        raise ValueError("answer yes or no")
    if kind == "integer":
        return int(text)
    if kind == "number":
        return float(text)
    if kind == "array":
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


def ask_form(
    params: Mapping[str, Any], ask: Callable[[str], str] = input, out: TextIO | None = None
) -> dict[str, Any]:
    """Answer one `elicitation/create` in the terminal; returns an ElicitResult dict.

    An empty answer keeps the field's default (or leaves an optional field out);
    `!decline` declines, `!cancel` or end of input cancels.
    """
    out = out or sys.stderr
    print(f"\nThe server asks: {params.get('message', '')}", file=out, flush=True)
    if params.get("mode") == "url":
        print(f"Open: {params.get('url')}", file=out, flush=True)
        try:
            reply = ask("Press Enter when done (or type !decline): ").strip()
        except EOFError:
            return {"action": "cancel"}
        return {"action": "decline"} if reply == "!decline" else {"action": "accept"}
    schema = params.get("requestedSchema") or {}
    props: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    print("(Enter keeps the default; !decline declines, !cancel cancels.)", file=out, flush=True)
    content: dict[str, Any] = {}
    for name, prop in props.items():
        label = prop.get("title") or name
        hints = []
        if prop.get("enum"):
            hints.append("/".join(str(v) for v in prop["enum"]))
        elif prop.get("type"):
            hints.append(str(prop["type"]))
        if "default" in prop:
            hints.append(f"default {json.dumps(prop['default'])}")
        if name in required:
            hints.append("required")
        if prop.get("description"):
            print(f"  {prop['description']}", file=out, flush=True)
        while True:
            try:
                reply = ask(f"{label} [{', '.join(hints)}]: ")
            except EOFError:
                return {"action": "cancel"}
            reply = reply.strip()
            if reply in ("!decline", "!cancel"):
                return {"action": reply[1:]}
            if not reply:
                if "default" in prop or name not in required:
                    break  # fill_defaults adds the default
                print("  this field is required", file=out, flush=True)
                continue
            try:
                value = _parse(prop, reply)
            except ValueError as exc:
                print(f"  not a valid {prop.get('type', 'value')}: {exc}", file=out, flush=True)
                continue
            if prop.get("enum") and value not in prop["enum"]:
                print("  choose one of: " + ", ".join(map(str, prop["enum"])), file=out, flush=True)
                continue
            content[name] = value
            break
    return {"action": "accept", "content": content}
