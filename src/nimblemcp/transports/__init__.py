"""Transports: thin byte movers around the transport-agnostic server core.

Server side, each talking to the core only through the port (`nimblemcp._port.Core`),
never importing the server package: `stdio` (newline-delimited JSON-RPC), `http` (the
Streamable HTTP ASGI app) with `_http_exchange` (one request in flight), `_http_headers`
(headers against the body), `http_security` and `http_auth` (ASGI middleware), `_asgi`
(responses and the Accept parser) and `_sse` (framing). `_legacy` is the one 2025-11-25
adapter (sessions, back channel, change forwarding) that `stdio` and `_http_legacy`
(+ `_http_sessions`, the session table) put on their wires. Client side: `stdio_client`,
`http_client` (+ `_http_answers`: redirects, `Retry-After`, challenges and capped
reads; `_wire`: its two wires, `h1.client` and httpx; `_tls`, `_proxies`, `_brotli`),
`memory` (in-process, for tests), and `_limits` (their size, hop and connection
limits, defined once). A contract in `.importlinter` keeps the client side from
importing the server side (shared: `_sse`, `_envelope`, `_stdio_lines`, `_read_size`).
"""
