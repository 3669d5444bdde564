"""The CLI's era probe for a stdio server it spawned itself (COMPAT-C06, MAP-09): the
process is ours and just started, so it may take longer than the library's
`probe_timeout` (5 s) to answer `server/discover` without counting as a 2025-11-25
server. A slow-starting 2026-07-28 server is still spoken to as modern; a legacy server
that answers the probe with an error is still recognised at once; one that stays
silent is recognised once the (longer, `--timeout`-capped) probe ends. Real
subprocesses: `nimblemcp call -- python server.py`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SLOW_MODERN = '''
import time
time.sleep(float({delay!r}))  # a slow start (a loaded machine, heavy imports)
import nimblemcp as m

server = m.Server("slow-start")


@server.tool
def era(ctx: m.Context) -> str:
    return ctx.protocol_version


if __name__ == "__main__":
    server.run()
'''

# A 2025-11-25-only stdio server, written out by hand: `server/discover` is unknown to it.
LEGACY = '''
import json
import sys

SILENT = sys.argv[1] == "silent"
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, rid = msg.get("method"), msg["id"]
    if method == "initialize":
        result = {{"protocolVersion": "2025-11-25", "capabilities": {{"tools": {{}}}},
                   "serverInfo": {{"name": "old", "version": "1"}}}}
    elif method == "tools/list":
        result = {{"tools": [{{"name": "era", "inputSchema": {{"type": "object"}}}}]}}
    elif method == "tools/call":
        result = {{"content": [{{"type": "text", "text": "legacy server"}}]}}
    elif SILENT:
        continue  # never answers what it does not know
    else:
        print(json.dumps({{"jsonrpc": "2.0", "id": rid,
                          "error": {{"code": -32601, "message": "Method not found"}}}}), flush=True)
        continue
    print(json.dumps({{"jsonrpc": "2.0", "id": rid, "result": result}}), flush=True)
'''


def cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "nimblemcp", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return done, time.monotonic() - began


def test_a_slow_starting_spawned_server_is_not_taken_for_legacy(tmp_path: Path) -> None:
    src = tmp_path / "slow_server.py"
    src.write_text(SLOW_MODERN.format(delay=6.5))  # past the library's 5 s probe
    done, _ = cli("call", "era", "-v", "--", sys.executable, str(src))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2026-07-28", (done.stdout, done.stderr)
    assert "legacy server" not in done.stderr


@pytest.mark.parametrize("mode", ["error", "silent"])
def test_a_spawned_legacy_server_is_still_recognised(tmp_path: Path, mode: str) -> None:
    src = tmp_path / "legacy_server.py"
    src.write_text(LEGACY.format())
    done, took = cli("call", "era", "--timeout", "8", "-v", "--", sys.executable, str(src), mode)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "legacy server"
    if mode == "error":  # an error answer is a verdict at once (COMPAT-C06)
        assert "server/discover answered -32601: legacy server" in done.stderr
        assert took < 8, took
    else:  # silence: the probe ends at --timeout (8 s), not the 30 s spawn allowance
        assert "no answer to server/discover within 8.0 s: legacy server" in done.stderr
        assert took < 25, took
