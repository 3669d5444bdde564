"""Transports: thin byte movers around the transport-agnostic server core, by role.

- `http/`: the server's Streamable HTTP endpoint (an ASGI app), its guard, the legacy
  HTTP leg and sessions, SSE resumption, the 2024-11-05 HTTP+SSE endpoints.
- `auth/`: the endpoint as an OAuth resource server (bearer tokens, verifiers,
  identity-provider presets, the OAuth proxy, DPoP).
- `stdio/`: both sides of stdio, sharing the line splitter.
- `client/`: the client's HTTP, HTTP+SSE and in-memory transports.
- `h1/`: nimblemcp's own HTTP/1.1 server engine and client pool (stdlib + httptools).

Shared by both sides: `_sse` (SSE framing), `_envelope`, `_read_size`, `_limits` (the
client's size, hop and connection limits). `_legacy` is the one 2025-11-25 adapter
(sessions, back channel, change forwarding) that the stdio server and the HTTP legacy
leg put on their wires. Server transports talk to the core only through the port
(`nimblemcp._port.Core`), never importing the server package; client transports never
import server transports (contracts in `.importlinter`).
"""
