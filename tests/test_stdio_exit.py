"""How a stdio server's process ends, and how long its shutdown grace is (STDIO-06).

In a real subprocess (`nimblemcp run`, or a script calling `server.run("stdio")`):
- when nothing can keep the process alive after the grace (an async request that was
  cancelled, by the client or at the grace's end, has finished), it exits normally:
  `atexit` handlers run (a mark file written at exit shows it);
- when work that nobody can stop still runs (a sync tool in a worker thread, a thread
  a tool started through `asyncio.to_thread`), it leaves at once with `os._exit(0)`,
  says so on stderr, and does not wait for that work; a cancelled sync tool that ends
  within the grace is waited for, and the exit is normal;
- the grace is `--shutdown-timeout` / `NIMBLEMCP_SHUTDOWN_TIMEOUT` /
  `server.run("stdio", shutdown_timeout=...)` (default `SHUTDOWN_GRACE`, 2 s): a short
  one cuts a slow tool off, a long one lets it finish and answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _waits import HANG, wait_for_file

from nimblemcp.transports.stdio.server import SHUTDOWN_GRACE, run_stdio, serve_stdio

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}

SOURCE = textwrap.dedent('''
    import asyncio, atexit, os, sys, threading, time
    from pathlib import Path
    import nimblemcp as m

    MARKS = Path(os.environ["MARKS"])
    atexit.register(lambda: (MARKS / "atexit").write_text("ran"))
    server = m.Server("stdio-exit")


    @server.tool()
    async def nap(seconds: float) -> str:
        (MARKS / "nap.started").write_text("1")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            (MARKS / "nap.cancelled").write_text("1")
            raise
        return "rested"


    @server.tool()
    def block() -> str:
        (MARKS / "block.started").write_text("1")
        threading.Event().wait(600)  # a sync tool nobody can stop
        return "unblocked"


    @server.tool()
    def snooze(seconds: float) -> str:
        (MARKS / "snooze.started").write_text("1")
        time.sleep(seconds)
        (MARKS / "snooze.done").write_text("1")
        return "awake"


    @server.tool()
    async def offload(seconds: float) -> str:
        (MARKS / "offload.started").write_text("1")
        await asyncio.to_thread(time.sleep, seconds)
        return "done"


    if __name__ == "__main__":
        grace = os.environ.get("GRACE")
        server.run("stdio", **({} if grace is None else {"shutdown_timeout": float(grace)}))
''')


class Proc:
    """One stdio server process; everything it writes is read at the end."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str] | None = None, script: bool = False) -> None:
        src = tmp / "exit_server.py"
        src.write_text(SOURCE)
        self.marks = tmp / "marks"
        self.marks.mkdir()
        cmd = [sys.executable, str(src)] if script else [sys.executable, "-m", "nimblemcp", "run", str(src), *args]
        base = {k: v for k, v in os.environ.items() if not k.startswith("NIMBLEMCP_")}
        self.p = subprocess.Popen(cmd, cwd=tmp, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env={**base, "MARKS": str(self.marks), **(env or {})})
        self.out: list[dict[str, Any]] = []
        self.err = ""

    def send(self, message: dict[str, Any]) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(message).encode() + b"\n")
        self.p.stdin.flush()

    def call(self, rid: int, name: str, **arguments: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                   "params": {"name": name, "arguments": arguments, "_meta": META}})

    def cancel(self, rid: int) -> None:
        self.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}})

    def mark(self, name: str) -> bool:
        return (self.marks / name).exists()

    def wait_mark(self, name: str) -> None:
        wait_for_file(self.marks / name, why=lambda: f"exit status {self.p.poll()}")

    def end(self) -> int:
        """Close stdin and collect the rest; the exit status."""
        try:
            out, err = self.p.communicate(timeout=HANG)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, err = self.p.communicate()
            raise AssertionError(f"the server did not exit; stderr: {err.decode()[-3000:]}") from None
        self.out = [json.loads(line) for line in out.splitlines()]
        self.err = err.decode()
        return self.p.returncode

    def answered(self, rid: int) -> dict[str, Any] | None:
        return next((m for m in self.out if m.get("id") == rid), None)


@pytest.fixture
def servers() -> Any:
    started: list[Proc] = []
    yield started
    for s in started:
        if s.p.poll() is None:
            s.p.kill()
            s.p.communicate()


def start(servers: list[Proc], tmp: Path, *args: str, **kwargs: Any) -> Proc:
    s = Proc(tmp, *args, **kwargs)
    servers.append(s)
    return s


# -- nothing stuck: a normal exit --------------------------------------------------------


def test_a_request_cancelled_at_the_graces_end_lets_the_process_exit_normally(
        tmp_path: Path, servers: list[Proc]) -> None:
    s = start(servers, tmp_path, "--shutdown-timeout", "0.3")
    s.call(1, "nap", seconds=600)
    s.wait_mark("nap.started")
    assert s.end() == 0, s.err
    assert s.mark("nap.cancelled")
    assert s.answered(1) is None  # cancelled: no response (CANC-03)
    assert s.mark("atexit"), s.err  # no os._exit: the async request ended when cancelled
    assert "exiting at once" not in s.err


def test_a_request_the_client_cancelled_lets_the_process_exit_normally(tmp_path: Path, servers: list[Proc]) -> None:
    s = start(servers, tmp_path)
    s.call(1, "nap", seconds=600)
    s.wait_mark("nap.started")
    s.cancel(1)
    s.wait_mark("nap.cancelled")
    assert s.end() == 0, s.err
    assert s.mark("atexit"), s.err
    assert "exiting at once" not in s.err


def test_a_cancelled_sync_tool_that_ends_within_the_grace_is_waited_for(tmp_path: Path, servers: list[Proc]) -> None:
    """Its request is gone, but its worker thread still runs: the grace covers it."""
    s = start(servers, tmp_path, "--shutdown-timeout", "20")
    s.call(1, "snooze", seconds=0.5)
    s.wait_mark("snooze.started")
    s.cancel(1)
    assert s.end() == 0, s.err
    assert s.mark("snooze.done")  # the thread's work was not cut off at exit ...
    assert s.mark("atexit"), s.err  # ... and the exit was a normal one
    assert s.answered(1) is None


# -- something stuck: os._exit -----------------------------------------------------------


def test_a_sync_tool_still_running_makes_the_process_leave_at_once(tmp_path: Path, servers: list[Proc]) -> None:
    s = start(servers, tmp_path, "--shutdown-timeout", "0.3")
    s.call(1, "block")
    s.wait_mark("block.started")
    assert s.end() == 0, s.err
    assert "exiting at once" in s.err and "nimblemcp-worker" in s.err
    assert not s.mark("atexit")  # it left through os._exit
    assert s.answered(1) is None


def test_a_cancelled_sync_tool_still_running_makes_the_process_leave_at_once(
        tmp_path: Path, servers: list[Proc]) -> None:
    s = start(servers, tmp_path, "--shutdown-timeout", "0.3")
    s.call(1, "block")
    s.wait_mark("block.started")
    s.cancel(1)
    assert s.end() == 0, s.err
    assert "exiting at once" in s.err and "nimblemcp-worker" in s.err
    assert not s.mark("atexit")


def test_a_thread_of_a_cancelled_request_does_not_keep_the_process_alive(tmp_path: Path, servers: list[Proc]) -> None:
    """`asyncio.to_thread` work outlives its cancelled request; closing the loop and the
    interpreter's exit would both wait for it (here 600 s)."""
    s = start(servers, tmp_path, "--shutdown-timeout", "0.3")
    s.call(1, "offload", seconds=600)
    s.wait_mark("offload.started")
    s.cancel(1)
    assert s.end() == 0, s.err
    assert "exiting at once" in s.err
    assert not s.mark("atexit")


# -- the grace -----------------------------------------------------------------------------


def test_a_short_shutdown_timeout_cuts_a_slow_tool_off(tmp_path: Path, servers: list[Proc]) -> None:
    assert SHUTDOWN_GRACE > 1.0  # the default would have let it finish
    s = start(servers, tmp_path, "--shutdown-timeout", "0.2")
    s.call(1, "nap", seconds=1.0)
    s.wait_mark("nap.started")
    assert s.end() == 0, s.err
    assert s.mark("nap.cancelled") and s.answered(1) is None


def test_a_long_shutdown_timeout_lets_a_slow_tool_finish(tmp_path: Path, servers: list[Proc]) -> None:
    seconds = SHUTDOWN_GRACE + 0.5  # the default would have cut it off
    s = start(servers, tmp_path, "--shutdown-timeout", "30")
    s.call(1, "nap", seconds=seconds)
    s.call(2, "snooze", seconds=seconds)
    s.wait_mark("nap.started")
    s.wait_mark("snooze.started")
    assert s.end() == 0, s.err
    assert not s.mark("nap.cancelled")
    nap, snooze = s.answered(1), s.answered(2)
    assert nap is not None and nap["result"]["content"][0]["text"] == "rested"
    assert snooze is not None and snooze["result"]["content"][0]["text"] == "awake"
    assert s.mark("atexit")


def test_the_default_grace_cuts_a_slower_tool_off(tmp_path: Path, servers: list[Proc]) -> None:
    s = start(servers, tmp_path)
    s.call(1, "nap", seconds=SHUTDOWN_GRACE + 20)
    s.wait_mark("nap.started")
    assert s.end() == 0, s.err
    assert s.mark("nap.cancelled") and s.answered(1) is None


def test_the_shutdown_timeout_from_the_environment(tmp_path: Path, servers: list[Proc]) -> None:
    s = start(servers, tmp_path, env={"NIMBLEMCP_SHUTDOWN_TIMEOUT": "0.2"})
    s.call(1, "nap", seconds=1.0)
    s.wait_mark("nap.started")
    assert s.end() == 0, s.err
    assert s.mark("nap.cancelled") and s.answered(1) is None


@pytest.mark.parametrize(("grace", "finished"), [("0.2", False), ("30", True)])
def test_the_shutdown_timeout_of_server_run(tmp_path: Path, servers: list[Proc], grace: str, finished: bool) -> None:
    s = start(servers, tmp_path, env={"GRACE": grace}, script=True)
    s.call(1, "nap", seconds=SHUTDOWN_GRACE + 0.5 if finished else 1.0)
    s.wait_mark("nap.started")
    assert s.end() == 0, s.err
    assert (s.answered(1) is not None) is finished
    assert s.mark("nap.cancelled") is not finished


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_a_negative_shutdown_timeout_is_refused(bad: float) -> None:
    import nimblemcp as m

    with pytest.raises(ValueError, match="shutdown_timeout"):
        run_stdio(m.Server("x"), shutdown_timeout=bad)


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
async def test_serve_stdio_refuses_a_negative_shutdown_timeout(bad: float) -> None:
    import nimblemcp as m

    with pytest.raises(ValueError, match="shutdown_timeout"):
        await serve_stdio(m.Server("x"), shutdown_timeout=bad)


async def test_busy_pool_threads_names_the_threads_running_work_only() -> None:
    """The check behind the exit: a sync-tool worker or an `asyncio.to_thread` thread
    counts while it runs a job, not while it waits for one."""
    import asyncio
    import threading

    from nimblemcp.server._workers import run_sync
    from nimblemcp.transports.stdio._stuck import busy_pool_threads

    others = len(busy_pool_threads())  # other tests' threads in this process, if any
    gate = threading.Event()
    jobs = [run_sync(gate.wait, timeout=HANG), asyncio.ensure_future(asyncio.to_thread(gate.wait, HANG))]
    try:
        async with asyncio.timeout(HANG):
            while len(busy := busy_pool_threads()) < others + 2:
                await asyncio.sleep(0.01)
        assert "nimblemcp-worker" in busy and any(name.startswith("asyncio_") for name in busy), busy
    finally:
        gate.set()
        assert await asyncio.gather(*jobs) == [True, True]
    async with asyncio.timeout(HANG):
        while len(busy_pool_threads()) > others:
            await asyncio.sleep(0.01)
