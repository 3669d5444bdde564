#!/usr/bin/env bash
# Create the benchmark environments, isolated from the main interpreter:
#   .venv-peers   the official SDK (mcp) and FastMCP, plus uvicorn[standard]
#   .venv-nimble  nimblemcp from this work tree (editable, [http,redis,bench] extras)
# Both come from the same base interpreter with no extra .pth start-up hooks, so cold
# start compares like with like (the main interpreter's site-packages carries a .pth
# that imports certifi at every start: ~25 ms that is no part of nimblemcp).
#   bash benchmarks/_peers.sh            # idempotent; a re-run is cheap once installed
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
# The floor version's own interpreter (never a pyenv shim), found as scripts/test-pythons does.
PY="${PYTHON:-$("$ROOT/scripts/find-python" 3.11)}"
MCP_VERSION="${MCP_VERSION:-2.3.0}"
FASTMCP_VERSION="${FASTMCP_VERSION:-4.1.6}"

VENV="$HERE/.venv-peers"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
if ! "$VENV/bin/python" - "$MCP_VERSION" "$FASTMCP_VERSION" <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import version
ok = version("mcp") == sys.argv[1] and version("fastmcp") == sys.argv[2]
import uvicorn, uvloop, httptools  # noqa: F401  same HTTP stack as nimblemcp
sys.exit(0 if ok else 1)
PYEOF
then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "mcp==$MCP_VERSION" "fastmcp==$FASTMCP_VERSION" "uvicorn[standard]"
fi
"$VENV/bin/python" -c "from importlib.metadata import version as v; print('peers venv:', 'mcp', v('mcp'), '| fastmcp', v('fastmcp'), '| uvicorn', v('uvicorn'))"

NV="$HERE/.venv-nimble"
[ -x "$NV/bin/python" ] || "$PY" -m venv "$NV"
# [redis] for the multi-instance benchmarks (workers, nginx pool, listen fan-out),
# [bench] (matplotlib) for chart.py; neither is loaded by the servers measured here.
if ! "$NV/bin/python" -c "import nimblemcp, uvicorn, uvloop, httptools, redis, matplotlib" 2>/dev/null; then
  "$NV/bin/python" -m pip install -q --upgrade pip
  "$NV/bin/python" -m pip install -q -e "$ROOT[http,redis,bench]"
fi
"$NV/bin/python" -c "import nimblemcp, uvicorn; print('nimble venv: nimblemcp from', nimblemcp.__file__, '| uvicorn', uvicorn.__version__)"
