"""Independent peers for interop tests, installed into `.cache/` (gitignored) on first use.

- `mcp_python()`: a private venv with the official Python SDK `mcp` 2.3.0.
- `fastmcp_python()`: a private venv with FastMCP 4.1.6 (the README comparison).
- `ts_client_modules()`: `node_modules` with the official TypeScript client
  `@modelcontextprotocol/client` (v2, the line that speaks 2026-07-28; the v1 package
  `@modelcontextprotocol/sdk` does not), run with the machine's Node (>= 20).

Installs are idempotent (a marker file per pinned version), serialised by a file lock so
parallel pytest sessions in one work tree do not race, and bounded by timeouts. When an
install is impossible the tests fail loudly rather than skip.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import time
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache"
INTEROP = Path(__file__).resolve().parent / "interop"

MCP_VERSION = "2.3.0"
MCP_VENV = CACHE / f"interop-mcp-{MCP_VERSION}"
FASTMCP_VERSION = "4.1.6"
FASTMCP_VENV = CACHE / f"interop-fastmcp-{FASTMCP_VERSION}"
TS_CLIENT_VERSION = "2.4.0"
NPM_PEERS = CACHE / "npm-peers"


@contextmanager
def _locked(name: str) -> Iterator[None]:
    CACHE.mkdir(exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _new_venv(folder: Path) -> None:
    """A fresh venv whose python is a symlink, as `python -m venv` makes on POSIX. A copied
    binary is a file just written: when install_all's threads fork for another install at
    that moment, the child holds it open and exec'ing it fails with "Text file busy"."""
    venv.EnvBuilder(with_pip=True, clear=True, symlinks=True).create(folder)


def mcp_python() -> Path:
    """The python of a venv holding `mcp==2.3.0` (created once)."""
    python = MCP_VENV / "bin" / "python"
    marker = MCP_VENV / f"installed-mcp-{MCP_VERSION}"
    with _locked(MCP_VENV.name):
        if not marker.exists():
            _new_venv(MCP_VENV)
            subprocess.run([str(python), "-m", "pip", "install", "-q", f"mcp=={MCP_VERSION}"],
                           check=True, timeout=300, capture_output=True)
            marker.write_text("ok\n")
    return python


def sdk_http_probe(url: str, tool: str | None = None, arguments: dict[str, Any] | None = None,
                   ) -> dict[str, Any]:
    """What the official SDK's client sees at `url` (interop/sdk_http_probe.py): its
    tools as listed and, when `tool` is named, that call's result."""
    argv = [str(mcp_python()), str(INTEROP / "sdk_http_probe.py"), url]
    if tool is not None:
        argv += [tool, json.dumps(arguments or {})]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def fastmcp_python() -> Path:
    """The python of a venv holding `fastmcp==4.1.6` (created once)."""
    python = FASTMCP_VENV / "bin" / "python"
    marker = FASTMCP_VENV / f"installed-fastmcp-{FASTMCP_VERSION}"
    with _locked(FASTMCP_VENV.name):
        if not marker.exists():
            _new_venv(FASTMCP_VENV)
            subprocess.run([str(python), "-m", "pip", "install", "-q", f"fastmcp=={FASTMCP_VERSION}"],
                           check=True, timeout=600, capture_output=True)
            marker.write_text("ok\n")
    return python


def node() -> str:
    """The machine's node binary; the v2 TypeScript client needs Node >= 20."""
    found = shutil.which("node")
    if found is None:
        raise RuntimeError("node is not on PATH; the TypeScript interop tests need Node >= 20")
    version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30,
                             check=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 20:
        raise RuntimeError(f"node {version} is too old for @modelcontextprotocol/client (>= 20)")
    return found


def _npm_package(folder: Path, package: str, version: str) -> Path:
    """`folder/node_modules` holding `package@version` (installed once with npm)."""
    marker = folder / f"installed-{package.rsplit('/', 1)[-1]}-{version}"
    with _locked(folder.name):
        if not marker.exists():
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "package.json").write_text(json.dumps({
                "private": True, "dependencies": {package: version},
            }, indent=2) + "\n")
            npm = shutil.which("npm")
            if npm is None:
                raise RuntimeError(f"npm is not on PATH; the interop tests need it for {package}")
            subprocess.run([npm, "install", "--no-audit", "--no-fund", "--ignore-scripts"],
                           cwd=folder, check=True, timeout=300, capture_output=True)
            marker.write_text("ok\n")
    return folder / "node_modules"


def ts_client_modules() -> Path:
    """`node_modules` holding `@modelcontextprotocol/client` (installed once with npm)."""
    return _npm_package(NPM_PEERS, "@modelcontextprotocol/client", TS_CLIENT_VERSION)


EVERYTHING_VERSION = "2026.8.31"
NPM_EVERYTHING = CACHE / "npm-everything"


def server_everything() -> list[str]:
    """The command that starts the npm reference server `server-everything` on stdio."""
    modules = _npm_package(NPM_EVERYTHING, "@modelcontextprotocol/server-everything", EVERYTHING_VERSION)
    entry = modules / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    return [node(), str(entry), "stdio"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(proc: subprocess.Popen[bytes], port: int, what: str) -> None:
    """Wait (bounded) until `port` accepts connections; fail if the process exits first."""
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode} before listening") from None
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port}")


@contextmanager
def running(cmd: list[str], port: int, what: str, env: dict[str, str] | None = None,
            ) -> Iterator[subprocess.Popen[bytes]]:
    """Start a server subprocess listening on `port`; stop it afterwards."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})
    try:
        wait_for_port(proc, port, what)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


TS_SDK_V1_VERSION = "1.32.2"
NPM_SDK_V1 = CACHE / "npm-sdk-v1"


def ts_sdk_v1_modules() -> Path:
    """`node_modules` holding the v1 TypeScript SDK `@modelcontextprotocol/sdk` (the line
    most hosts still ship; its `SSEClientTransport` speaks the 2024-11-05 transport)."""
    return _npm_package(NPM_SDK_V1, "@modelcontextprotocol/sdk", TS_SDK_V1_VERSION)


def install_all() -> None:
    """Every peer above, installed now if missing. `.ci/run` starts this in the background
    before anything else, so the installs (mostly waiting on the network) overlap the
    lint and build phases instead of holding up pytest workers in fixture setup; a test
    that gets there first takes the same lock and waits, or installs it itself."""
    from concurrent.futures import ThreadPoolExecutor

    def npm_peers() -> None:  # one after another: they share npm's cache
        from tests._oidc_provider import install as oidc_provider  # the OAuth tests' server

        ts_client_modules()
        _npm_package(NPM_EVERYTHING, "@modelcontextprotocol/server-everything", EVERYTHING_VERSION)
        ts_sdk_v1_modules()
        oidc_provider()

    with ThreadPoolExecutor(3) as pool:
        for job in [pool.submit(f) for f in (mcp_python, fastmcp_python, npm_peers)]:
            job.result()


if __name__ == "__main__":  # python tests/_peers.py: install every peer (see install_all)
    import sys

    sys.path.insert(0, str(ROOT))  # `tests._oidc_provider`
    install_all()
