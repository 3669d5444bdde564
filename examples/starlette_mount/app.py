"""An MCP server inside a FastAPI (Starlette) application, beside the app's own routes.

`app.mount("/notes", server.asgi_app())` serves MCP on `/notes/mcp`, with the
server's `/notes/healthz` and `/notes/readyz` probes and its own `@server.route`
page. The host runs the server's lifespan: `FastAPI(lifespan=server.lifespan_context)`
(for several servers, or a lifespan of your own, enter each in one
`contextlib.AsyncExitStack`). Mounted apps do not get the ASGI lifespan from their
host, so this is the one line to remember.

Run it:  uvicorn examples.starlette_mount.app:app --port 8000
         (or python examples/starlette_mount/app.py)
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI

from nimblemcp import Context, Server


@contextlib.asynccontextmanager
async def lifespan(server: Server) -> AsyncIterator[dict[str, int]]:
    yield {"visits": 0}


server = Server("hosted-notes", lifespan=lifespan)


@server.tool()
def visit(ctx: Context) -> int:
    """Count a visit (state held by the lifespan)."""
    ctx.lifespan["visits"] += 1
    return int(ctx.lifespan["visits"])


@server.route("/status")
def status() -> dict[str, Any]:
    return {"server": server.name, "tools": sorted(server.tools)}


app = FastAPI(lifespan=server.lifespan_context)


@app.get("/health")
def health() -> dict[str, str]:
    """The host application's own health route."""
    return {"status": "ok"}


app.mount("/notes", server.asgi_app())

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, port=8000)
