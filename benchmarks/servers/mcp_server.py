"""Official MCP Python SDK (mcp 2.3.0) high-level `MCPServer`: one `echo` tool.

    python mcp_server.py                    # stdio
    python mcp_server.py http [PORT]        # SDK's own streamable-HTTP runner (stateless, JSON)
    uvicorn mcp_server:http_app --factory ...      # what http_throughput.py does
Run with benchmarks/.venv-peers/bin/python.
"""

import sys

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("bench-mcp")


@mcp.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


def http_app():
    # Stateless + JSON responses: the closest match to a 2026-07-28 single-exchange server.
    return mcp.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        port = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
        mcp.run("streamable-http", host="127.0.0.1", port=port, streamable_http_path="/mcp",
                stateless_http=True, json_response=True)
    else:
        mcp.run()
