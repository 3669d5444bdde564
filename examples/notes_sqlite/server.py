"""A notes server on SQLite: a lifespan that opens shared resources, and dependency injection.

- The lifespan creates the database (schema + seed) and an `httpx.AsyncClient` at
  start-up and closes the client at shut-down; handlers reach both through it.
- `get_db` is a generator provider: each request gets its own SQLite connection, which
  commits (or rolls back on failure) and closes once the handler has finished.
- Injected parameters (`db`, `http`) are not tool arguments: the input schema lists
  only `title`, `body`, `query`...

Run it:  python -m nimblemcp run examples/notes_sqlite/server.py                 (stdio)
         python -m nimblemcp run examples/notes_sqlite/server.py --transport http
NOTES_DB chooses the database file (default: notes.db next to this file).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import httpx

from nimblemcp import Context, Depends, Server, ToolError, get_lifespan


@dataclass
class App:
    """What the lifespan opens once and every handler shares."""

    db_path: Path
    http: httpx.AsyncClient


@contextlib.asynccontextmanager
async def lifespan(server: Server) -> AsyncIterator[App]:
    db_path = Path(os.environ.get("NOTES_DB", Path(__file__).with_name("notes.db")))
    with contextlib.closing(sqlite3.connect(db_path)) as db, db:
        db.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, title TEXT UNIQUE, body TEXT)")
        db.execute("INSERT OR IGNORE INTO notes (title, body) VALUES ('welcome', 'Notes live in SQLite.')")
    async with httpx.AsyncClient(timeout=10) as http:
        yield App(db_path, http)


server = Server("notes", "1.0.0", lifespan=lifespan,
                instructions="Keep short notes: add_note, search_notes, read notes://{title}.")


def get_db(app: Annotated[App, Depends(get_lifespan)]) -> Iterator[sqlite3.Connection]:
    """One connection per request; committed if the handler succeeds, then closed.

    Providers run on the event loop and sync tools in a worker thread: the connection
    is opened here and used there (one request at a time), hence check_same_thread."""
    db = sqlite3.connect(app.db_path, check_same_thread=False)
    try:
        with db:  # commit, or roll back on an exception
            yield db
    finally:
        db.close()


Db = Annotated[sqlite3.Connection, Depends(get_db)]


@server.tool(annotations={"destructiveHint": False})
def add_note(title: str, body: str, db: Db) -> int:
    """Add a note.

    Args:
        title: a unique title
        body: the text of the note
    """
    try:
        cursor = db.execute("INSERT INTO notes (title, body) VALUES (?, ?)", (title, body))
    except sqlite3.IntegrityError:
        raise ToolError(f"a note titled {title!r} already exists") from None
    return int(cursor.lastrowid or 0)


@server.tool(annotations={"readOnlyHint": True})
def search_notes(query: str, db: Db, limit: int = 10) -> list[str]:
    """Titles of the notes whose title or body contains `query`."""
    rows = db.execute("SELECT title FROM notes WHERE title LIKE ?1 OR body LIKE ?1 ORDER BY id LIMIT ?2",
                      (f"%{query}%", limit))
    return [title for (title,) in rows]


@server.tool(annotations={"readOnlyHint": True, "openWorldHint": True})
async def check_url(url: str, app: Annotated[App, Depends(get_lifespan)], ctx: Context) -> int:
    """The HTTP status of `url`, fetched with the shared client from the lifespan."""
    await ctx.info(f"checking {url}")
    response = await app.http.get(url)
    return response.status_code


@server.resource("notes://{title}", mime_type="text/plain")
def read_note(title: str, db: Db) -> str:
    """One note's body."""
    row = db.execute("SELECT body FROM notes WHERE title = ?", (title,)).fetchone()
    if row is None:
        raise ToolError(f"no note titled {title!r}")
    return str(row[0])


if __name__ == "__main__":
    server.run()
