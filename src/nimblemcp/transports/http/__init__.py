"""The server's Streamable HTTP side: the ASGI endpoint and what stands around it.

`app` (the endpoint, `McpHttpApp` / `asgi_app`) with `_exchange` (one request in
flight), `_headers` (headers checked against the body), `_asgi` (responses, the Accept
parser) and `_routes` (health and extra routes); `security` (the guard: Host, Origin,
limits, CORS) and `_drain` (listen streams kept through the guard); `_legacy_leg` and
`_sessions` (2025-11-25 peers over HTTP), `_resume` and `_sse_log` (SSE resumption);
`legacy_sse` (the deprecated 2024-11-05 HTTP+SSE endpoints); `_uvicorn` (uvicorn's
limits from ours) and `_serving_gc` (the serving process's GC tuning). Never imported
by a client transport (a contract in `.importlinter`).
"""
