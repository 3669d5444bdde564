"""nimblemcp with an `async def echo`: shows what the per-call thread hop of a sync tool costs.

Same tool as nimble_server.py otherwise; http_throughput.py runs it as `nimblemcp-async`.
"""

import sys

from nimblemcp import Server

server = Server("bench-nimble", "1.0.0")


@server.tool
async def echo(text: str) -> str:
    """Echo the text back."""
    return text


def http_app():
    from nimblemcp.transports.http.app import asgi_app

    return asgi_app(server, path="/mcp", freeze_gc=True)  # as `nimblemcp run --transport http`


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        port = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
        server.run("http", host="127.0.0.1", port=port, path="/mcp")
    else:
        server.run()
