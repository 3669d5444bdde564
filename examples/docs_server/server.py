"""The project documents server: the example people build when they learn MCP.

A folder of Markdown documents exposed three ways:
- tools `list_docs`, `read_doc(name)` and `search_docs(query)` the model can call,
- every document as a resource `docs://<name>` the host can attach,
- a prompt `review_brief` that asks the model to find risks the brief does not cover,
- a review session: `start_review` returns a handle, `add_comment` adds to it, and
  `finish_review` asks the user to confirm (elicitation) before publishing.

Run it:  python -m nimblemcp run examples/docs_server/server.py            (stdio)
         python -m nimblemcp run examples/docs_server/server.py --transport http
Set DOCS_DIR to serve another folder. The folder is watched (DOCS_WATCH=0 turns it off):
clients that `subscriptions/listen` hear about edited, added and removed documents.

Confinement: every entry point (tools, resources, search, the watcher, the prompt)
reads through `_read`, which resolves symlinks and serves only regular files directly
inside DOCS_DIR. A symlink pointing elsewhere, a broken one or an unreadable file is
simply not a document; a file that is not UTF-8 is read with replacement characters.
No error sent to a client names a server path or repeats an OS message.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from nimblemcp import Context, Server, ServerInfo, ToolError, embedded, user

DOCS_DIR = Path(os.environ.get("DOCS_DIR", Path(__file__).parent / "docs")).resolve()

server = Server(
    "project-docs",
    "1.0.0",
    info=ServerInfo(title="Project documents"),
    instructions=(
        "Project documents (brief, risks, glossary). Use list_docs to see what exists, "
        "read_doc to read one, search_docs to find lines mentioning a term."
    ),
)


def _shown(name: str) -> str:
    """A client-supplied name, shortened for an error message."""
    return repr(name if len(name) <= 60 else name[:57] + "...")


def _confined(path: Path) -> Path | None:
    """`path` with symlinks resolved, if it is a regular file directly in DOCS_DIR."""
    try:
        real = path.resolve(strict=True)
        return real if real.parent == DOCS_DIR and real.is_file() else None
    except (OSError, RuntimeError):  # broken link, loop, name too long, no permission
        return None


def _doc_path(name: str) -> Path:
    """The file for a document name; refuses anything that could leave DOCS_DIR."""
    if (not name or len(name) > 255 or "/" in name or "\\" in name or name.startswith(".")
            or "\x00" in name or not name.endswith(".md")):
        raise ToolError(f"Invalid document name {_shown(name)}: use a plain file name like 'brief.md'.")
    path = _confined(DOCS_DIR / name)
    if path is None:
        raise ToolError(f"No document named {_shown(name)}. Available: {', '.join(_names())}.")
    return path


def _read(name: str) -> str:
    """A document's text (invalid UTF-8 replaced); ToolError when it is not one."""
    path = _doc_path(name)
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        raise ToolError(f"The document {_shown(name)} cannot be read right now.") from None


def _names() -> list[str]:
    try:
        candidates = list(DOCS_DIR.glob("*.md"))
    except OSError:
        return []
    return sorted(p.name for p in candidates if _confined(p) is not None)


@server.tool(annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False})
def list_docs() -> list[str]:
    """List the names of all project documents."""
    return _names()


@server.tool(annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False})
def read_doc(name: str) -> str:
    """Read one project document.

    Args:
        name: The document's file name, e.g. "brief.md" (see list_docs).
    """
    return _read(name)


@server.tool(annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False})
def search_docs(query: str) -> list[str]:
    """Find the lines of all documents that mention a term (case-insensitive).

    Args:
        query: The word or phrase to look for.
    """
    needle = query.strip().lower()
    if not needle:
        raise ToolError("The query must not be empty.")
    hits: list[str] = []
    for name in _names():
        try:
            text = _read(name)
        except ToolError:  # removed or made unreadable since it was listed
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if needle in line.lower():
                hits.append(f"{name}:{number}: {line.strip()}")
    return hits


def _register_document(name: str) -> None:
    def read() -> str:
        try:
            return _read(name)
        except ToolError as exc:
            from nimblemcp import ResourceNotFound

            raise ResourceNotFound(f"docs://{name}", str(exc)) from None

    server.resource(f"docs://{name}", name=name, mime_type="text/markdown",
                    description=f"The project document {name}")(read)


for _name in _names():
    _register_document(_name)


def _watch(interval: float, seen: dict[str, int]) -> None:
    """Poll the folder: an edited document sends `notifications/resources/updated` to
    listeners subscribed to it; an added or removed one changes the resource list,
    which sends `notifications/resources/list_changed` by itself. `seen` is taken at
    import, before serving starts, so no edit made after start-up is missed."""
    while True:
        time.sleep(interval)
        try:
            now = _snapshot()
            for name in now.keys() - seen.keys():
                _register_document(name)
            for name in seen.keys() - now.keys():
                server.remove_resource(f"docs://{name}")
            for name in now.keys() & seen.keys():
                if now[name] != seen[name]:
                    server.notify_resource_updated(f"docs://{name}")
            seen = now
        except Exception:  # the watcher must outlive any surprise in the folder
            logging.getLogger("docs-watcher").exception("watching %s failed once", DOCS_DIR)


def _snapshot() -> dict[str, int]:
    """Modification times of the documents (confined ones only; vanished ones skipped)."""
    out: dict[str, int] = {}
    for name in _names():
        path = _confined(DOCS_DIR / name)
        try:
            if path is not None:
                out[name] = path.stat().st_mtime_ns
        except OSError:
            continue
    return out


if os.environ.get("DOCS_WATCH", "1") != "0":
    threading.Thread(
        target=_watch, args=(float(os.environ.get("DOCS_POLL_SECONDS", "0.5")), _snapshot()),
        daemon=True, name="docs-watcher",
    ).start()


def _complete_name(value: str, _context: dict[str, str]) -> list[str]:
    return [n for n in _names() if n.startswith(value)]


@server.resource("docs://{name}", mime_type="text/markdown", complete={"name": _complete_name})
def document(name: str) -> str:
    """Any document in the folder, including ones added after start-up."""
    try:
        return _read(name)
    except ToolError as exc:
        from nimblemcp import ResourceNotFound

        raise ResourceNotFound(f"docs://{name}", str(exc)) from None


# -- a review session: state handles + a confirmation (MRTR elicitation) ------------------

REVIEWS_DIR = Path(os.environ.get("REVIEWS_DIR", Path(__file__).parent / "reviews")).resolve()
CONFIRM = {
    "type": "object",
    "properties": {"publish": {"type": "boolean", "title": "Publish the review?", "default": True}},
    "required": ["publish"],
}


@server.tool
async def start_review(document: str, ctx: Context) -> str:
    """Open a review of one document and return its review handle.

    Pass the handle to add_comment and finish_review. A review expires after one
    hour without use.

    Args:
        document: The document to review, e.g. "brief.md".
    """
    _doc_path(document)
    return await ctx.handles.create({"document": document, "comments": []})


@server.tool
async def add_comment(review: str, comment: str, ctx: Context) -> str:
    """Add a comment to an open review.

    Args:
        review: The handle start_review returned.
        comment: The comment text.
    """
    data = await ctx.handles.get(review)
    data["comments"].append(comment.strip())
    await ctx.handles.update(review, data)
    return f"{len(data['comments'])} comment(s) on {data['document']}"


@server.tool(one_time=True, annotations={"destructiveHint": False, "idempotentHint": False})
async def finish_review(review: str, ctx: Context) -> str:
    """Publish a review after the user confirms it; the review is then closed.

    Args:
        review: The handle start_review returned.
    """
    data = await ctx.handles.get(review)
    if not data["comments"]:
        raise ToolError("The review has no comments yet; add some with add_comment.")
    answer = await ctx.elicit(
        "confirm",
        f"Publish {len(data['comments'])} comment(s) on {data['document']}?",
        CONFIRM,
    )
    if not answer.accepted or not answer.content or not answer.content.get("publish"):
        return "Not published; the review stays open."
    REVIEWS_DIR.mkdir(parents=True, exist_ok=True)
    target = REVIEWS_DIR / f"{Path(data['document']).stem}-{time.strftime('%Y%m%d-%H%M%S')}.md"
    lines = [f"# Review of {data['document']}", ""] + [f"- {c}" for c in data["comments"]]
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    await ctx.handles.drop(review)
    return f"Published to {target.name}"


@server.prompt(title="Review the brief")
def review_brief() -> list[dict[str, object]]:
    """Read the project brief and list the risks it does not cover yet."""
    return [
        user(embedded("docs://brief.md", _read("brief.md"), "text/markdown")),
        user(embedded("docs://risks.md", _read("risks.md"), "text/markdown")),
        user(
            "Read the project brief above and list the risks it does not cover yet. "
            "Skip the risks already in the risk list; for each new one, say why it matters "
            "and suggest one mitigation."
        ),
    ]


if __name__ == "__main__":
    server.run()
