"""The multi-instance benchmark scripts still run (issues 13 and 18): `listen_fanout.py
--quick` starts two real `nimblemcp run --transport http` instances on one real Redis,
opens 20 `subscriptions/listen` streams over raw sockets, publishes a burst of 200
resource-updated events from one instance and prints its table. Nothing here measures
speed (no timing thresholds, ever); it checks that every event reached every listener
subscribed to it and that the table is there. Results go to a temporary folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"

pytest.importorskip("httptools")  # the client's parser (uvicorn[standard], in [http])


def test_listen_fanout_quick_runs_and_delivers_every_event(tmp_path: Path) -> None:
    env = {**os.environ, "NIMBLE_PY": sys.executable, "BENCH_RESULTS": str(tmp_path)}
    env.pop("PYTHONPATH", None)
    run = subprocess.run([sys.executable, str(BENCH / "listen_fanout.py"), "--quick"], cwd=BENCH, env=env,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "| instance 0 (publishes) |" in run.stdout and "| instance 1 " in run.stdout
    delivered = re.search(r"Delivered (\d+) of (\d+) ", run.stdout)
    assert delivered is not None, run.stdout
    assert delivered.group(1) == delivered.group(2) == "800"  # 200 events x 4 listeners per topic
    assert (tmp_path / "listen_fanout.json").exists()


def _inproc() -> object:
    """benchmarks/inproc.py as a module (the benchmarks are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_inproc", BENCH / "inproc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", ["echo", "aecho", "add", "discover"])
def test_inproc_engine_mode_drives_the_engine_interface(case: str) -> None:
    """`inproc.py --serve-as engine` (issue 18) hands the app what nimblemcp's engine
    does (issue 31): its extension in the scope, naming the loop, and the answer comes
    back through its one-step `answer` (never two ASGI messages), with the same body the
    plain-ASGI mode gets."""
    import asyncio
    from typing import Any

    inproc: Any = _inproc()
    answered: list[int] = []
    keep = inproc._Answers.answer

    def spy(self: Any, status: int, body: bytes) -> None:
        answered.append(status)
        keep(self, status, body)

    loop = inproc.new_loop("asyncio")
    try:
        asyncio.set_event_loop(loop)
        app = inproc.make_app()
        loop.run_until_complete(inproc.start(app))
        inproc.SERVE_AS = "asgi"
        plain = loop.run_until_complete(inproc.drive(app, case, 2))
        inproc.SERVE_AS = "engine"
        inproc._Answers.answer = spy
        handled: list[dict[str, Any]] = []

        async def spy_app(scope: Any, receive: Any, send: Any) -> None:
            handled.append(scope)
            await app(scope, receive, send)  # the same `send`: the one-step answer still applies

        try:
            engine = loop.run_until_complete(inproc.drive(spy_app, case, 3))
        finally:
            inproc._Answers.answer = keep
            inproc.SERVE_AS = "asgi"
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    assert answered == [200, 200, 200]
    assert len(handled) == 3
    assert all(s["extensions"]["nimblemcp.engine"].loop is loop for s in handled)
    assert plain[0]["type"] == engine[0]["type"] == "http.response.start"
    assert plain[0]["status"] == engine[0]["status"] == 200
    assert plain[-1]["body"] == engine[-1]["body"]
    assert b'"result"' in engine[-1]["body"]


def test_inproc_script_prints_both_modes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent / "src")}
    for mode in ("asgi", "engine"):
        run = subprocess.run([sys.executable, str(BENCH / "inproc.py"), "--requests", "200", "--cases", "aecho,echo",
                              "--loop", "asyncio", "--serve-as", mode], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"serve-as {mode}" in run.stdout
        rows = dict(re.findall(r"^\s+(\w+)\s+([\d.]+)$", run.stdout, re.M))
        assert set(rows) == {"harness", "aecho", "echo"}, run.stdout
        assert all(float(v) > 0 for v in rows.values())
