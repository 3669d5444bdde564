"""stdio, both sides: newline-delimited JSON-RPC over a process's standard streams.

`server` (a server on its own stdin/stdout) and `client` (a server as a subprocess)
share `_lines` (the line splitter and its read gate); `_stuck` tells the server which
worker threads are busy when it shuts down. The client never imports the server.
"""
