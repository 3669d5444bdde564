"""A missing optional dependency ends with one line naming the extra (issue 14), and
`nimblemcp run --transport http` says where it serves. Real subprocesses; the optional
module is made unimportable with `sys.modules[name] = None` before the CLI runs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nimblemcp._extras import MissingExtraError, needs_extra

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "examples" / "docs_server" / "server.py"


def without(modules: list[str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`nimblemcp ARGS` in a process where `modules` cannot be imported."""
    code = ("import sys\n"
            f"for name in {modules!r}:\n    sys.modules[name] = None\n"
            "from nimblemcp.cli import main\nmain(sys.argv[1:])\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "DOCS_WATCH": "0"}, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("missing", "engine"), [(["httptools"], "nimblemcp"), (["uvicorn"], "uvicorn")])
def test_run_http_without_uvicorn_names_the_extra(missing: list[str], engine: str) -> None:
    # The default engine needs uvicorn; `--engine nimblemcp` needs httptools: both come with [http].
    proc = without(missing, "run", str(DOCS), "--transport", "http", "--port", "1", "--engine", engine)
    assert proc.returncode == 1
    assert "HTTP serving needs the [http] extra: pip install 'nimblemcp[http]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_client_command_without_httpx_names_the_extra() -> None:
    proc = without(["httpx"], "tools", "http://127.0.0.1:1/mcp")
    assert proc.returncode == 1
    assert "needs the [http] extra: pip install 'nimblemcp[http]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_library_client_without_httpx_raises_an_import_error_naming_the_extra() -> None:
    code = ("import sys; sys.modules['httpx'] = None\n"
            "from nimblemcp.client._transport import transport_for\n"
            "try:\n    transport_for('http://127.0.0.1:1/mcp')\n"
            "except ImportError as exc:\n    print(type(exc).__name__, exc.extra, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("MissingExtraError http "), out.stderr
    assert "pip install 'nimblemcp[http]'" in out.stdout


def test_redis_backends_without_redis_name_the_extra() -> None:
    code = ("import sys; sys.modules['redis'] = None; sys.modules['redis.asyncio'] = None\n"
            "from nimblemcp.backends.redis import RedisStore\n"
            "from nimblemcp.backends._redis_bus import RedisBus\n"
            "for make in (RedisStore, RedisBus):\n"
            "    try:\n        make('redis://127.0.0.1:1/0')\n"
            "    except ImportError as exc:\n        print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stderr
    assert all("needs the [redis] extra: pip install 'nimblemcp[redis]'" in line for line in lines)


def test_needs_extra_keeps_the_cause_and_passes_other_errors() -> None:
    with pytest.raises(MissingExtraError) as caught, needs_extra("http", "Testing"):
        import nimblemcp_no_such_module  # type: ignore[import-not-found]  # noqa: F401
    assert isinstance(caught.value, ImportError)
    assert caught.value.missing == "nimblemcp_no_such_module"
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)
    with pytest.raises(ValueError), needs_extra("http", "Testing"):
        raise ValueError("not an import problem")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_run_http_prints_the_endpoint_url() -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "run", str(DOCS), "--transport",
                             "http", "--port", str(port), "--path", "/custom"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, "DOCS_WATCH": "0"})
    try:
        assert proc.stderr is not None
        # Said once it listens, after the HTTP server's own log lines.
        first = next(line for line in proc.stderr if line.startswith("nimblemcp: serving"))
        assert f"http://127.0.0.1:{port}/custom" in first
        deadline = time.monotonic() + 30
        while True:  # and it is really there
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
