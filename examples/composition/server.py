"""Composition: one server made of others, each keeping its own lifespan.

`notes` (with a lifespan holding its store) and `calc` are ordinary servers; `app`
mounts them under namespaces: tools become `notes_add` and `calc_add`, the resource
`memo://today` becomes `memo://notes/today`. Tools registered on a mounted server
later appear on `app` too (and list-change events reach its listeners).

Run it:  python -m nimblemcp run examples/composition/server.py                 (stdio)
         python -m nimblemcp run examples/composition/server.py --transport http
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from nimblemcp import Context, Server


@contextlib.asynccontextmanager
async def notes_store(server: Server) -> AsyncIterator[dict[str, str]]:
    yield {"today": "ship the release"}


notes = Server("notes", lifespan=notes_store)


@notes.tool()
def add(key: str, text: str, ctx: Context) -> str:
    """Store a memo under `key`."""
    ctx.lifespan[key] = text
    return f"saved {key}"


@notes.resource("memo://{key}", mime_type="text/plain")
def memo(key: str, ctx: Context) -> str:
    """One memo."""
    return str(ctx.lifespan.get(key, ""))


calc = Server("calc")


@calc.tool(annotations={"readOnlyHint": True})
def add_numbers(a: float, b: float) -> float:
    """a + b"""
    return a + b


app = Server("workspace", instructions="Notes and a calculator in one server.")
app.mount(notes, namespace="notes")
app.mount(calc, namespace="calc")


@app.tool()
def about() -> str:
    """What this server is made of."""
    return ", ".join(server.name for server in app.mounted)


if __name__ == "__main__":
    app.run()
