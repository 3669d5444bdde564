"""Key management (issue 13): `nimblemcp keys new`, and the documented rotation of the
requestState keys across two real instances (docs/deployment.md): add the new key as
secondary everywhere, promote it, retire the old one after `state_ttl`. An MRTR round
sealed by the old primary is accepted after promotion and refused after retirement."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import httpx
from _deploy import HANG_GUARD, call, launch, stop, text, write_server
from _redis import free_port

ANSWER = {"name": {"action": "accept", "content": {"name": "Ada"}}}


def keys_new() -> str:
    out = subprocess.run([sys.executable, "-m", "nimblemcp", "keys", "new"], capture_output=True,
                         text=True, timeout=HANG_GUARD, check=True).stdout
    assert out.endswith("\n") and out.count("\n") == 1
    return out.strip()


def test_keys_new_prints_a_fresh_32_byte_key() -> None:
    a, b = keys_new(), keys_new()
    assert a != b
    assert len(base64.urlsafe_b64decode(a + "=")) == 32


async def test_rotation_add_promote_retire_across_two_instances(tmp_path: Path) -> None:
    src = write_server(tmp_path)
    old, new = keys_new(), keys_new()
    files = {name: tmp_path / f"{name}.keys" for name in ("A", "B")}
    ports = {"A": free_port(), "B": free_port()}
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def deploy(*keys: str) -> None:
        """A rolling restart of both instances with this key ring (first seals)."""
        for name in ("A", "B"):
            if name in procs:
                stop(procs[name])
            files[name].write_text("".join(k + "\n" for k in keys))
            procs[name] = launch(src, ports[name], tmp_path / f"{name}.log", "--state-keys-file",
                                 str(files[name]), env={"INSTANCE": name})

    def url(name: str) -> str:
        return f"http://127.0.0.1:{ports[name]}/mcp"

    async def start_round(c: httpx.AsyncClient, name: str) -> str:
        first = (await call(c, url(name), "wizard")).json()["result"]
        assert first["resultType"] == "input_required"
        state: str = first["requestState"]
        return state

    async def finish(c: httpx.AsyncClient, name: str, state: str) -> httpx.Response:
        return await call(c, url(name), "wizard", inputResponses=ANSWER, requestState=state)

    try:
        async with httpx.AsyncClient(timeout=HANG_GUARD) as c:
            deploy(old)
            sealed_by_old = await start_round(c, "A")
            # Step 1: the new key as secondary everywhere (still sealing with the old one).
            deploy(old, new)
            assert text(await finish(c, "B", sealed_by_old)) == "Ada ran on A,B"
            still_old = await start_round(c, "B")
            # Step 2: promote: the new key seals, the old one still opens.
            deploy(new, old)
            assert text(await finish(c, "A", sealed_by_old)) == "Ada ran on A,A"
            assert text(await finish(c, "A", still_old)) == "Ada ran on B,A"
            sealed_by_new = await start_round(c, "B")
            # Step 3 (after state_ttl): retire the old key.
            deploy(new)
            refused = await finish(c, "A", sealed_by_old)
            assert refused.status_code == 400
            assert refused.json()["error"]["code"] == -32602
            assert (await finish(c, "B", still_old)).status_code == 400  # step 1 still sealed with old
            assert text(await finish(c, "A", sealed_by_new)) == "Ada ran on B,A"
    finally:
        for proc in procs.values():
            stop(proc)
