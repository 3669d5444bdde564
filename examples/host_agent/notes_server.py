"""A tiny notes server over HTTP: the second server of the host_agent example.

Run it:  python -m nimblemcp run examples/host_agent/notes_server.py --transport http --port 8765

Tools: `list_notes` and `read_note` (read-only), `add_note`, and `delete_note`, which
is annotated destructive, so a host asks the user before running it. Notes live in
memory and vanish when the server stops.
"""

from __future__ import annotations

from nimblemcp import Server, ServerInfo, ToolError

server = Server("notes", "1.0.0", info=ServerInfo(title="Notes"),
                instructions="Short notes: list_notes, read_note, add_note, delete_note.")
NOTES: dict[str, str] = {}
READ_ONLY = {"readOnlyHint": True, "openWorldHint": False}


@server.tool(annotations=READ_ONLY)
def list_notes() -> list[str]:
    """List the notes as `key: text` lines."""
    return [f"{key}: {text}" for key, text in NOTES.items()]


@server.tool(annotations=READ_ONLY)
def read_note(key: str) -> str:
    """Read one note.

    Args:
        key: The note's key, as list_notes shows it.
    """
    if key not in NOTES:
        raise ToolError(f"No note {key!r}; see list_notes.")
    return NOTES[key]


@server.tool(annotations={"readOnlyHint": False, "destructiveHint": False,
                          "idempotentHint": False, "openWorldHint": False})
def add_note(text: str) -> str:
    """Add a note and return its key.

    Args:
        text: What to write down.
    """
    key = str(len(NOTES) + 1)
    while key in NOTES:
        key = str(int(key) + 1)
    NOTES[key] = text.strip()
    return key


@server.tool(annotations={"destructiveHint": True, "idempotentHint": True, "openWorldHint": False})
def delete_note(key: str) -> str:
    """Delete a note for good.

    Args:
        key: The note's key.
    """
    if NOTES.pop(key, None) is None:
        raise ToolError(f"No note {key!r}.")
    return f"Deleted note {key}."


if __name__ == "__main__":
    server.run("http", port=8765)
