"""FastMCP 4.1.6: one `echo` tool.

    python fastmcp_server.py                # stdio
    python fastmcp_server.py http [PORT]    # FastMCP's own HTTP runner (stateless, JSON)
    uvicorn fastmcp_server:http_app --factory ...  # what http_throughput.py does
Run with benchmarks/.venv-peers/bin/python.
"""

import sys

from fastmcp import FastMCP

mcp = FastMCP("bench-fastmcp")


@mcp.tool
def echo(text: str) -> str:
    """Echo the text back."""
    return text


def http_app():
    return mcp.http_app(path="/mcp", stateless_http=True, json_response=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        port = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
        mcp.run("http", show_banner=False, host="127.0.0.1", port=port, path="/mcp",
                stateless_http=True, json_response=True)
    else:
        mcp.run(show_banner=False)
