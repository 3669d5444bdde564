"""Shared bits for the benchmark drivers: interpreters, server commands, wire bodies, stats.

The drivers run on the main interpreter (nimblemcp's); the peers run from
benchmarks/.venv-peers (made by _peers.sh) so they never share an environment.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVERS = HERE / "servers"
RESULTS = Path(os.environ.get("BENCH_RESULTS", str(HERE / "results")))  # tests write elsewhere
# The base interpreter of the one running this driver, never a pyenv shim (a shim adds
# ~60 ms to every start); `MAIN_PY` names another.
_BASE_PY = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
MAIN_PY = os.environ.get("MAIN_PY", str(_BASE_PY if _BASE_PY.exists() else sys.executable))
PEER_PY = str(HERE / ".venv-peers" / "bin" / "python")
# nimblemcp runs from its own clean venv (same base interpreter as the peers' venv).
NIMBLE_PY = os.environ.get("NIMBLE_PY", str(HERE / ".venv-nimble" / "bin" / "python"))

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "nimblemcp-bench", "version": "1.0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def discover_request(rid: int | str = 1) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "server/discover", "params": {"_meta": META}}


def call_request(rid: int | str = 1, text: str = "hello") -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": text}, "_meta": META}}


def initialize_request(rid: int | str = 0, version: str = "2025-11-25") -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "nimblemcp-bench", "version": "1.0"}}}


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def line(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


# name -> argv of a stdio server. "nimblemcp-cli" is `python -m nimblemcp run file.py`,
# "nimblemcp" is `python file.py` calling server.run() directly.
def stdio_commands() -> dict[str, list[str]]:
    return {
        "nimblemcp": [NIMBLE_PY, str(SERVERS / "nimble_server.py")],
        "nimblemcp-cli": [NIMBLE_PY, "-m", "nimblemcp", "run", str(SERVERS / "nimble_server.py")],
        "mcp": [PEER_PY, str(SERVERS / "mcp_server.py")],
        "fastmcp": [PEER_PY, str(SERVERS / "fastmcp_server.py")],
    }


def env_for(name: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["PYTHONUNBUFFERED"] = "0"
    env["FASTMCP_SHOW_SERVER_BANNER"] = "false"
    env["FASTMCP_LOG_LEVEL"] = "WARNING"
    env["FASTMCP_CHECK_FOR_UPDATES"] = "off"
    return env


def spawn(argv: list[str], name: str, src: str | None = None) -> subprocess.Popen[bytes]:
    """A stdio server; `src`: another checkout's `src/`, first on its `PYTHONPATH`."""
    env = env_for(name)
    if src is not None:
        env["PYTHONPATH"] = src
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, cwd=str(SERVERS), bufsize=0)


def ensure_peers() -> None:
    if not (Path(PEER_PY).exists() and Path(NIMBLE_PY).exists()):
        subprocess.run(["bash", str(HERE / "_peers.sh")], check=True)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def median(values: list[float]) -> float:
    return statistics.median(values)


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + " |" for r in rows]
    return "\n".join(out)


def save(name: str, text: str, data: object) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.md").write_text(text + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")


def say(*a: object) -> None:
    print(*a, flush=True)
    sys.stdout.flush()
