"""Test helpers: an ASGI app under an in-process uvicorn, and a header recorder."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn


class HeaderRecorder:
    """ASGI middleware that keeps the method and request headers of every HTTP request."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[tuple[str, dict[str, str]]] = []

    @property
    def headers(self) -> list[dict[str, str]]:
        return [h for _, h in self.seen]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append((scope["method"], {k.decode().lower(): v.decode() for k, v in scope["headers"]}))
        await self.app(scope, receive, send)


@asynccontextmanager
async def serving(app: Any, log_level: str = "warning") -> AsyncIterator[str]:
    """Serve `app` on a free 127.0.0.1 port; yields `http://127.0.0.1:PORT`."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level=log_level, lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
