"""Issue 33: what `nimblemcp run --transport http` says, as a real process, on both
engines (uvicorn and nimblemcp's own).

- A port in use is one line naming the address and the flag that changes it, exit
  status 1, before the server's lifespan runs (was a 61-line double traceback).
- "serving ... at URL" is said once the server listens and its lifespan has started,
  never before a failure; the settings line only with `-v`.
- `--port 0` announces the port the system chose.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests._waits import wait_for_file, wait_until

ENGINES = ("uvicorn", "nimblemcp")

SERVER = '''
import contextlib, os, pathlib, time
import nimblemcp as m

marks = pathlib.Path(os.environ["MARKS"])

@contextlib.asynccontextmanager
async def lifespan(server):
    (marks / "lifespan").write_text("started")
    while not (marks / "go").exists():  # the test decides when start-up ends
        import asyncio
        await asyncio.sleep(0.02)
    if (marks / "go").read_text() == "fail":
        raise RuntimeError("the database is down")
    yield

server = m.Server("messages", lifespan=lifespan)

@server.tool
def ping() -> str:
    return "pong"
'''


@pytest.fixture
def listener() -> Iterator[int]:
    """A port another process holds."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    (tmp_path / "srv.py").write_text(SERVER)
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "nimblemcp", "run", "srv.py", "--transport", "http", *args],
                            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MARKS": str(marks), "PYTHONUNBUFFERED": "1"})


@pytest.mark.parametrize("engine", ENGINES)
def test_a_port_in_use_is_one_line_and_status_1(tmp_path: Path, listener: int, engine: str) -> None:
    proc = start(tmp_path, "--port", str(listener), "--engine", engine)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.splitlines() == [
        f"nimblemcp: cannot listen on 127.0.0.1:{listener}: the port is already in use (is another "
        "server running there?); choose another port with --port (or NIMBLEMCP_PORT)"]
    assert not (tmp_path / "marks" / "lifespan").exists()  # nothing started


def test_workers_refuse_a_port_in_use_before_starting_any(tmp_path: Path, listener: int) -> None:
    keys = tmp_path / "keys"
    keys.write_text(subprocess.run([sys.executable, "-m", "nimblemcp", "keys", "new"], capture_output=True,
                                   text=True, check=True, timeout=60).stdout)
    proc = start(tmp_path, "--port", str(listener), "--workers", "2", "--state-keys-file", str(keys),
                 "--redis-url", "redis://127.0.0.1:1/0")
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert len(err.splitlines()) == 1 and f"127.0.0.1:{listener}" in err and "--port" in err
    assert not (tmp_path / "marks" / "lifespan").exists()


class Stderr:
    """The process's stderr, read on a thread as it comes."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        import threading

        self.lines: list[str] = []
        assert proc.stderr is not None
        stream = proc.stderr
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: Any) -> None:
        with stream:
            self.lines.extend(stream)

    def text(self) -> str:
        return "".join(self.lines)


@pytest.mark.parametrize("engine", ENGINES)
def test_serving_is_said_once_listening_and_settings_only_with_v(tmp_path: Path, engine: str) -> None:
    proc = start(tmp_path, "--port", "0", "--engine", engine)
    err = Stderr(proc)
    try:
        wait_for_file(tmp_path / "marks" / "lifespan", why=err.text)
        assert "serving" not in err.text()  # the lifespan is still starting
        (tmp_path / "marks" / "go").write_text("ok")
        wait_until(lambda: "nimblemcp: serving" in err.text(), "the serving line", why=err.text)
        line = next(x for x in err.lines if x.startswith("nimblemcp: serving"))
        url = line.split(" at ", 1)[1].strip()
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert port != 0 and url == f"http://127.0.0.1:{port}/mcp"
        called = subprocess.run([sys.executable, "-m", "nimblemcp", "call", "ping", url],
                                capture_output=True, text=True, timeout=60)
        assert called.returncode == 0 and called.stdout == "pong\n", called.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        err.thread.join(timeout=30)
    assert "settings" not in err.text()


@pytest.mark.parametrize("engine", ENGINES)
def test_v_prints_the_settings_after_the_endpoint(tmp_path: Path, engine: str) -> None:
    proc = start(tmp_path, "--port", "0", "--engine", engine, "-v")
    err = Stderr(proc)
    (tmp_path / "marks" / "go").write_text("ok")
    try:
        wait_until(lambda: "nimblemcp: settings" in err.text(), "the settings line", why=err.text)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        err.thread.join(timeout=30)
    lines = err.lines
    at = next(i for i, x in enumerate(lines) if x.startswith("nimblemcp: serving"))
    assert lines[at + 1].startswith('nimblemcp: settings {"nimblemcp_settings": ')
    assert f'"engine": "{engine}"' in lines[at + 1]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_failed_start_never_says_serving(tmp_path: Path, engine: str) -> None:
    proc = start(tmp_path, "--port", "0", "--engine", engine)
    err = Stderr(proc)
    (tmp_path / "marks" / "go").write_text("fail")
    assert proc.wait(timeout=60) == 1
    err.thread.join(timeout=30)
    assert "the database is down" in err.text()
    assert "serving" not in err.text()
