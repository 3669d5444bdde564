"""A stop signal that arrives while the lifespan is still starting (the port is already
bound and connectable) stops the server cleanly: exit status 0, lifespan shutdown run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from _waits import wait_for_file

SOURCE = '''
import asyncio, contextlib, os, pathlib
import nimblemcp as m

MARKS = pathlib.Path(os.environ["MARKS"])

@contextlib.asynccontextmanager
async def lifespan(server):
    (MARKS / "starting").write_text("1")
    await asyncio.sleep(1.0)
    yield
    (MARKS / "stopped").write_text("1")

server = m.Server("slow-start", lifespan=lifespan)
'''


def test_sigterm_during_startup_is_a_clean_stop(tmp_path: Path) -> None:
    src = tmp_path / "slow_start.py"
    src.write_text(SOURCE)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NIMBLEMCP_")}
    proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "run", str(src), "--transport", "http",
                             "--engine", "nimblemcp", "--port", "0"],
                            env={**env, "MARKS": str(marks)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for_file(marks / "starting", why=lambda: f"exit status {proc.poll()}")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert (marks / "stopped").exists()
