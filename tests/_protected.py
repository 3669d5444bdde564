"""Start `tests/fixtures/protected_server.py` as a real process on a loopback port.

`async with protected(sites, issuer_url, tmp) as p:` writes the JSON config, starts the
process, waits (on the event loop: the test's own issuer keeps serving meanwhile) until
it accepts connections, and stops it with SIGINT at the end. `p.url(site)` is a
site's MCP endpoint, `p.log()` what the process wrote (tracebacks included).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _issuer import ISSUER

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "protected_server.py"
HANG = 30.0  # a guard against a hung test, never a measurement


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Protected:
    base: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def url(self, site: str) -> str:
        return f"{self.base}/{site}/mcp"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start(sites: list[dict[str, Any]], issuer_url: str, tmp: Path) -> Protected:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    config = tmp / "protected.json"
    config.write_text(json.dumps({"port": port, "base": base, "issuer": ISSUER, "issuer_url": issuer_url,
                                  "sites": sites}))
    log = tmp / "protected.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([sys.executable, str(FIXTURE), str(config)], stdout=sink, stderr=sink)
    return Protected(base, process, log)


@contextlib.asynccontextmanager
async def protected(sites: list[dict[str, Any]], issuer_url: str, tmp: Path) -> AsyncIterator[Protected]:
    p = start(sites, issuer_url, tmp)
    port = int(p.base.rsplit(":", 1)[1])
    try:
        deadline = asyncio.get_running_loop().time() + HANG
        while True:
            if p.process.poll() is not None:
                raise RuntimeError(f"the protected server exited: {p.log()}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                if asyncio.get_running_loop().time() > deadline:
                    raise RuntimeError(f"the protected server did not start: {p.log()}") from None
                await asyncio.sleep(0.05)
        yield p
    finally:
        if p.process.poll() is None:
            p.process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(asyncio.to_thread(p.process.wait), HANG)
            except TimeoutError:
                p.process.kill()
                p.process.wait()
