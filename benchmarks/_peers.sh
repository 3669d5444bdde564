#!/usr/bin/env bash
# Create benchmarks/.venv-peers with the peer SDKs we compare against, isolated from the
# main interpreter (peers must not pollute nimblemcp's environment).
#   bash benchmarks/_peers.sh            # idempotent; re-run is cheap once installed
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-/root/.pyenv/versions/3.11.7/bin/python3}"
VENV="$HERE/.venv-peers"
MCP_VERSION="${MCP_VERSION:-2.3.0}"
FASTMCP_VERSION="${FASTMCP_VERSION:-4.1.6}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
want="mcp==$MCP_VERSION fastmcp==$FASTMCP_VERSION"
if ! "$VENV/bin/python" - "$MCP_VERSION" "$FASTMCP_VERSION" <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import version
ok = version("mcp") == sys.argv[1] and version("fastmcp") == sys.argv[2]
import uvicorn, uvloop, httptools  # noqa: F401  same HTTP stack as nimblemcp
sys.exit(0 if ok else 1)
PYEOF
then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q $want "uvicorn[standard]"
fi
"$VENV/bin/python" -c "from importlib.metadata import version as v; print('peers venv:', 'mcp', v('mcp'), '| fastmcp', v('fastmcp'), '| uvicorn', v('uvicorn'))"
