"""`nimblemcp run` for production (issue 13): allowed hosts/origins from flags, env and
a TOML config file (the nginx `proxy_pass http://pool;` case), root path, the settings
line on start-up with secrets masked, JSON logs, and `--workers N` sharing one port
(refused without shared state keys and Redis). Real subprocesses on loopback only."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from _deploy import HANG_GUARD, call, launch, stop, text, write_server
from _redis import RedisServer, free_port

from nimblemcp.server._sealing import new_key

CLEAN = (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM after its graceful shutdown


async def test_upstream_host_name_is_refused_with_the_option_to_use_then_allowed(tmp_path: Path) -> None:
    """nginx `proxy_pass http://pool;` sends `Host: pool`: refused by default with a
    message naming --allowed-hosts; accepted once it is listed (flag, env or config)."""
    src = write_server(tmp_path)
    config = tmp_path / "nimblemcp.toml"
    config.write_text('[run]\nallowed-hosts = ["pool"]\n')
    ports = [free_port() for _ in range(4)]
    procs = [
        launch(src, ports[0], tmp_path / "plain.log"),
        launch(src, ports[1], tmp_path / "flag.log", "--allowed-hosts", "pool,mcp.example.com"),
        launch(src, ports[2], tmp_path / "env.log", env={"NIMBLEMCP_ALLOWED_HOSTS": "pool"}),
        launch(src, ports[3], tmp_path / "file.log", "--config", str(config)),
    ]
    try:
        async with httpx.AsyncClient(timeout=HANG_GUARD) as c:
            refused = await call(c, f"http://127.0.0.1:{ports[0]}/mcp", "whoami", host="pool")
            assert refused.status_code == 403
            message = refused.json()["error"]["message"]
            assert "Host not allowed" in message and "--allowed-hosts" in message
            assert "NIMBLEMCP_ALLOWED_HOSTS" in message
            for port in ports[1:]:
                ok = await call(c, f"http://127.0.0.1:{port}/mcp", "whoami", host="pool")
                assert ok.status_code == 200, ok.text
                assert text(ok).startswith("?:")
            # Only what is listed: another name stays refused.
            other = await call(c, f"http://127.0.0.1:{ports[2]}/mcp", "whoami", host="evil.example")
            assert other.status_code == 403
            public = await call(c, f"http://127.0.0.1:{ports[1]}/mcp", "whoami", host="mcp.example.com:443")
            assert public.status_code == 200
    finally:
        for proc in procs:
            stop(proc)


async def test_flags_beat_env_beat_config_file_and_root_path_serves_under_prefix(tmp_path: Path) -> None:
    src = write_server(tmp_path)
    config = tmp_path / "c.toml"
    port = free_port()
    config.write_text('port = 1\npath = "/from-file"\nroot_path = "/api"\nlog_level = "warning"\n')
    log = tmp_path / "run.log"
    proc = launch(src, port, log, "--config", str(config), "-v", env={"NIMBLEMCP_PATH": "/from-env"})
    try:
        async with httpx.AsyncClient(timeout=HANG_GUARD) as c:
            ok = await call(c, f"http://127.0.0.1:{port}/from-env", "whoami")  # the proxy strips /api
            assert ok.status_code == 200, ok.text
            assert (await call(c, f"http://127.0.0.1:{port}/from-file", "whoami")).status_code == 404
    finally:
        assert stop(proc) in CLEAN
    lines = log.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("nimblemcp: serving"))
    lines = lines[at:]  # once it listens: the URL first, then (-v) the settings
    assert lines[0].startswith("nimblemcp: serving 'deploy' over Streamable HTTP at ")
    assert lines[1].startswith("nimblemcp: settings ")
    settings = json.loads(lines[1].removeprefix("nimblemcp: settings "))["nimblemcp_settings"]
    assert (settings["port"], settings["path"], settings["root_path"]) == (port, "/from-env", "/api")


@pytest.mark.parametrize(("engine", "logger", "ready"), [
    ("uvicorn", "uvicorn", "Uvicorn running"),  # the default engine's JSON log lines
    ("nimblemcp", "nimblemcp.http", "running on"),
])
def test_settings_line_masks_secrets_and_json_logs(
    tmp_path: Path, redis: RedisServer, engine: str, logger: str, ready: str
) -> None:
    src = write_server(tmp_path)
    keys = tmp_path / "keys"
    secret_a, secret_b = new_key(), new_key()
    keys.write_text(f"# the first seals\n{secret_a}\n{secret_b}\n")
    port = free_port()
    log = tmp_path / "run.log"
    url = redis.url.replace("redis://", "redis://default:hunter2@")
    proc = launch(src, port, log, "--engine", engine, "-v", "--log-format", "json", "--state-keys-file", str(keys),
                  "--redis-url", url, env={"NIMBLEMCP_REDIS_URL": "redis://ignored:1"}, wait=False)
    try:
        for _ in range(200):
            if ready in log.read_text() or proc.poll() is not None:
                break
            subprocess.run([sys.executable, "-c", "import time; time.sleep(0.05)"], check=True)
    finally:
        stop(proc, signal.SIGINT)
    out = log.read_text()
    assert secret_a not in out and secret_b not in out and "hunter2" not in out
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]  # every line is JSON
    at = next(i for i, rec in enumerate(lines) if rec.get("message", "").startswith("serving"))
    assert lines[at]["message"].startswith("serving 'deploy' over Streamable HTTP at")
    settings = lines[at + 1]["nimblemcp_settings"]
    assert settings["state_keys"] == "<2 key(s), first seals>"
    assert settings["redis_url"].startswith("redis://default:***@127.0.0.1:")
    assert settings["log_format"] == "json"
    assert any(rec.get("logger", "").startswith(logger) and "running" in rec["message"]
               for rec in lines), out


def test_workers_refuse_to_start_without_shared_state(tmp_path: Path) -> None:
    src = write_server(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "nimblemcp", "run", str(src), "--transport", "http", "--port",
         str(free_port()), "--workers", "2"], capture_output=True, text=True, timeout=HANG_GUARD,
        env={k: v for k, v in os.environ.items() if not k.startswith("NIMBLEMCP_")})
    assert proc.returncode != 0
    assert "--workers 2" in proc.stderr and "state keys" in proc.stderr and "Redis URL" in proc.stderr
    assert "nimblemcp keys new" in proc.stderr


async def test_two_workers_share_the_port_and_mrtr_crosses_them(tmp_path: Path, redis: RedisServer) -> None:
    src = write_server(tmp_path)
    port = free_port()
    log = tmp_path / "workers.log"
    proc = launch(src, port, log, "--workers", "2", "--log-level", "warning",
                  env={"NIMBLEMCP_STATE_KEYS": new_key(), "NIMBLEMCP_REDIS_URL": redis.url})
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        seen: set[str] = set()
        async with httpx.AsyncClient(timeout=HANG_GUARD, headers={"connection": "close"}) as c:
            # The first worker may listen well before the second has started (a loaded
            # box): keep asking, new connections each time, until both answered or 30 s.
            deadline = time.monotonic() + 30
            while len(seen) < 2 and time.monotonic() < deadline:
                r = await call(c, url, "whoami")
                if r.status_code == 200:
                    seen.add(text(r))
                await asyncio.sleep(0.01)
            assert len(seen) == 2, (seen, log.read_text())  # two processes answer on one port
            for _ in range(6):  # each round on whichever worker the kernel picks
                first = (await call(c, url, "wizard")).json()["result"]
                answers = {"name": {"action": "accept", "content": {"name": "Ada"}}}
                done = await call(c, url, "wizard", inputResponses=answers, requestState=first["requestState"])
                assert text(done).startswith("Ada ran on"), done.text
            # A worker that dies is replaced by the supervisor.
            victim = int(sorted(seen)[0].split(":")[1])
            os.kill(victim, signal.SIGKILL)
            fresh: set[str] = set()
            for _ in range(300):
                try:
                    r = await call(c, url, "whoami")
                except httpx.TransportError:  # a connection queued at the killed worker
                    continue
                if r.status_code == 200 and text(r) not in seen:
                    fresh.add(text(r))
                    break
                await asyncio.sleep(0.05)
            assert fresh, log.read_text()
            assert "restarting it" in log.read_text()
    finally:
        assert stop(proc) in CLEAN, log.read_text()
