"""The client's transports: how `nimblemcp.Client` reaches a server.

`http` (Streamable HTTP, `HttpTransport`) with `_answers` (redirects, `Retry-After`,
challenges, capped reads), `_wire` (its two wires: `transports.h1.client` and httpx),
`_tls`, `_proxies` and `_brotli`; `sse` (the 2024-11-05 HTTP+SSE transport) and
`memory` (a server in the same process). The stdio client lives in `transports.stdio`.
None of them imports a server transport (a contract in `.importlinter`).
"""
