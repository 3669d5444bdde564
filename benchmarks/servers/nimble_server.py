"""nimblemcp: one `echo` tool.

    python nimble_server.py                 # stdio (direct server.run())
    python -m nimblemcp run nimble_server.py
    python nimble_server.py http [PORT]     # nimblemcp's own HTTP runner
    uvicorn nimble_server:http_app --factory ...   # what http_throughput.py does
"""

import sys

from nimblemcp import Server

server = Server("bench-nimble", "1.0.0")


@server.tool
def echo(text: str) -> str:
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
