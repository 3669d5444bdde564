"""A stdio server stopped by SIGTERM (CHECKLIST STDIO-02, STDIO-06, TASK-05, TASK-10, SUB-09).

What a process manager or host that sends SIGTERM may count on, in a real
`python -m nimblemcp run server.py` subprocess:
- no new request is taken: one sent after the signal is answered at once with -32603
  ("shutting down"); a legacy client's answers to the server's questions are still read;
- running requests get the grace (`SHUTDOWN_GRACE`): one that finishes in time is
  answered, one that does not is cancelled (its `finally` runs) and gets no response;
- running background tasks (tasks extension) get the same grace, then are marked
  failed (-32603, "shut down") at once, published (an open listen stream on the same
  connection hears it) and, with a shared store, visible to another instance at once,
  not after the lease (60 s here) lapses;
- listen streams end with their closing result; the process exits with status 0;
  stdout carries nothing but JSON-RPC messages (logs go to stderr);
- a second SIGTERM, or a SIGTERM after stdin closed, cuts the wait short.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _redis import RedisServer
from _waits import wait_for_file

from nimblemcp.server._tasks import STOPPED, TASKS_EXTENSION
from nimblemcp.transports.stdio.server import SHUTDOWN_GRACE, SHUTTING_DOWN

HANG = 30.0  # only a guard against a hung test, never a measurement
SUB = "io.modelcontextprotocol/subscriptionId"
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}

SOURCE = textwrap.dedent('''
    import asyncio, contextlib, json, os, threading
    from pathlib import Path
    import nimblemcp as m

    MARKS = Path(os.environ["MARKS"])
    ME = os.environ.get("ME", "A")


    @contextlib.asynccontextmanager
    async def lifespan(server):
        yield
        # Runs after the server settled its tasks: write what their records say.
        ids = MARKS / "ids.txt"
        if ids.exists():
            seen = {}
            for task_id in ids.read_text().split():
                seen[task_id] = server.tasks.public(await server.tasks.read(task_id, None))
            (MARKS / f"records.{ME}.json").write_text(json.dumps(seen))
        last = os.environ.get("LAST_UPDATE")
        if last:  # published at the very last moment
            server.notify_resource_updated(last)


    server = m.Server("stdio-shutdown", lifespan=lifespan,
                      task_options=m.TaskOptions(heartbeat=0.5, lease=60.0))


    async def _sleep(tag, seconds):
        (MARKS / f"{tag}.started").write_text(ME)
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            (MARKS / f"{tag}.cancelled").write_text(ME)
            raise
        finally:
            (MARKS / f"{tag}.finally").write_text(ME)
        return f"{tag} finished"


    @server.tool()
    async def sleep(tag: str, seconds: float) -> str:
        return await _sleep(tag, seconds)


    @server.tool(task="required")
    async def job(tag: str, seconds: float) -> str:
        return await _sleep(tag, seconds)


    @server.tool()
    def block(tag: str) -> str:
        (MARKS / f"{tag}.started").write_text(ME)
        threading.Event().wait(60)  # a sync tool nobody can stop
        return "unblocked"


    @server.tool()
    async def greet(ctx: m.Context) -> str:
        (MARKS / "greet.started").write_text(ME)
        answer = await ctx.elicit("name", "Your name?", {"type": "object",
            "properties": {"name": {"type": "string"}}, "required": ["name"]})
        return f"Hello, {answer.content['name']}!" if answer.accepted else "no name"


    @server.resource("notes://{name}")
    def note(name: str) -> str:
        return name
''')


class Stdio:
    """One `nimblemcp run` stdio server process, read line by line on a thread."""

    def __init__(self, tmp: Path, env: dict[str, str] | None = None, name: str = "A") -> None:
        src = tmp / "stdio_shutdown_server.py"
        if not src.exists():
            src.write_text(SOURCE)
        self.marks = tmp / "marks"
        self.marks.mkdir(exist_ok=True)
        base = {k: v for k, v in os.environ.items() if k != "NIMBLEMCP_REDIS_URL"}
        self.p = subprocess.Popen(
            [sys.executable, "-m", "nimblemcp", "run", str(src)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp,
            env={**base, "MARKS": str(self.marks), "ME": name, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        self.raw: list[bytes] = []
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stderr = b""
        self.threads = [threading.Thread(target=self._out, daemon=True), threading.Thread(target=self._err, daemon=True)]
        for t in self.threads:
            t.start()

    def _out(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.raw.append(line)
            try:
                self.lines.put(json.loads(line))
            except ValueError:
                self.lines.put({"not json": line.decode(errors="replace")})
        self.lines.put(None)

    def _err(self) -> None:
        assert self.p.stderr is not None
        self.stderr = self.p.stderr.read()

    def send(self, message: dict[str, Any]) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(message).encode() + b"\n")
        self.p.stdin.flush()

    def request(self, rid: Any, method: str, params: dict[str, Any] | None = None) -> None:
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": {**(params or {}), "_meta": META}})

    def call_tool(self, rid: Any, name: str, **arguments: Any) -> None:
        self.request(rid, "tools/call", {"name": name, "arguments": arguments})

    def until(self, want: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The next message `want` accepts (earlier ones are skipped)."""
        deadline = time.monotonic() + HANG
        while True:
            message = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            assert message is not None, f"server exited; stderr: {self.stderr[-3000:]!r}"
            if want(message):
                return message

    def rest(self) -> list[dict[str, Any]]:
        """Every message still to come until stdout closes."""
        out: list[dict[str, Any]] = []
        while (message := self.lines.get(timeout=HANG)) is not None:
            out.append(message)
        return out

    def wait_for_mark(self, name: str) -> None:
        wait_for_file(self.marks / name, why=lambda: f"stderr: {self.stderr[-3000:]!r}", hang=HANG)

    def terminate(self) -> None:
        self.p.send_signal(signal.SIGTERM)

    def wait(self) -> int:
        try:
            code = self.p.wait(timeout=HANG)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
            self.release()
        return code

    def release(self) -> None:
        for t in self.threads:
            t.join(HANG)
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            if f is not None and not f.closed:
                with contextlib.suppress(BrokenPipeError):
                    f.close()

    def close_stdin(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.close()

    def assert_protocol_only(self) -> None:
        """STDIO-02: every line on stdout is one JSON-RPC message."""
        for line in self.raw:
            message = json.loads(line)
            assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", line


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Stdio]]:
    started: list[Stdio] = []
    yield started
    for s in started:
        if s.p.poll() is None:
            s.p.kill()
            s.p.wait()
        s.release()


def _by_id(rid: Any) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("id") == rid and "method" not in m


def _assert_stopped(task: dict[str, Any]) -> None:
    assert task["status"] == "failed", task
    assert task["error"] == {"code": -32603, "message": STOPPED}  # the JSON-RPC error (TASK-05)
    assert task["statusMessage"] == STOPPED and "shut down" in STOPPED
    assert "result" not in task


def test_sigterm_answers_running_requests_in_the_grace_and_refuses_new_ones(tmp_path: Path, servers: list[Stdio]) -> None:
    s = Stdio(tmp_path)
    servers.append(s)
    s.call_tool(1, "sleep", tag="quick", seconds=0.5)
    s.call_tool(2, "sleep", tag="slow", seconds=3600)
    s.wait_for_mark("quick.started")
    s.wait_for_mark("slow.started")
    s.terminate()
    time.sleep(0.1)
    s.call_tool(3, "sleep", tag="late", seconds=0)  # after the signal: refused at once
    refused = s.until(_by_id(3))
    assert refused["error"]["code"] == -32603 and refused["error"]["message"] == SHUTTING_DOWN
    done = s.until(_by_id(1))  # finished within the grace: answered
    assert done["result"]["content"][0]["text"] == "quick finished"
    rest = s.rest()
    assert s.wait() == 0, s.stderr.decode()
    assert not any(m.get("id") == 2 for m in rest)  # cancelled at the grace's end: no response (CANC-03)
    assert (s.marks / "slow.cancelled").exists() and (s.marks / "slow.finally").exists()
    assert not (s.marks / "late.started").exists()
    s.assert_protocol_only()


def test_sigterm_settles_tasks_and_a_listen_on_the_connection_hears_it(tmp_path: Path, servers: list[Stdio]) -> None:
    s = Stdio(tmp_path)
    servers.append(s)
    s.call_tool("slow", "job", tag="slow", seconds=3600)
    slow = s.until(_by_id("slow"))["result"]
    s.call_tool("quick", "job", tag="quick", seconds=0.6)
    quick = s.until(_by_id("quick"))["result"]
    assert slow["resultType"] == quick["resultType"] == "task"
    ids = [slow["taskId"], quick["taskId"]]
    (s.marks / "ids.txt").write_text(" ".join(ids))
    s.request("L", "subscriptions/listen", {"notifications": {"taskIds": ids}})
    ack = s.until(lambda m: m.get("method") == "notifications/subscriptions/acknowledged")
    assert ack["params"]["_meta"][SUB] == "L" and sorted(ack["params"]["notifications"]["taskIds"]) == sorted(ids)
    s.wait_for_mark("quick.started")
    s.wait_for_mark("slow.started")

    s.terminate()
    rest = s.rest()
    assert s.wait() == 0, s.stderr.decode()
    notes = {m["params"]["taskId"]: m["params"] for m in rest
             if m.get("method") == "notifications/tasks" and m["params"]["status"] != "working"}
    # The task that finished in the grace reports its result; the other failed at its end.
    assert notes[quick["taskId"]]["status"] == "completed", rest
    assert notes[quick["taskId"]]["result"]["content"][0]["text"] == "quick finished"
    _assert_stopped(notes[slow["taskId"]])
    # Then the listen ends with its closing result (SUB-09), the last message.
    closing = rest[-1]
    assert closing["id"] == "L" and closing["result"]["resultType"] == "complete"
    assert closing["result"]["_meta"][SUB] == "L"
    # The lifespan's exit ran after the settle and read the same records.
    seen = json.loads((s.marks / "records.A.json").read_text())
    assert seen[quick["taskId"]]["status"] == "completed"
    _assert_stopped(seen[slow["taskId"]])
    assert (s.marks / "slow.cancelled").exists() and (s.marks / "slow.finally").exists()
    assert not (s.marks / "quick.cancelled").exists()
    assert b"marked failed" in s.stderr  # logs go to stderr
    s.assert_protocol_only()


def test_a_second_sigterm_cuts_the_grace_short(tmp_path: Path, servers: list[Stdio]) -> None:
    s = Stdio(tmp_path)
    servers.append(s)
    # Would finish in the grace (1.5 s < SHUTDOWN_GRACE), but the second signal ends the wait.
    assert SHUTDOWN_GRACE > 1.5
    s.call_tool("t", "job", tag="task", seconds=1.5)
    task = s.until(_by_id("t"))["result"]
    (s.marks / "ids.txt").write_text(task["taskId"])
    s.call_tool(1, "sleep", tag="request", seconds=1.5)
    s.wait_for_mark("task.started")
    s.wait_for_mark("request.started")
    s.terminate()
    time.sleep(0.2)
    s.terminate()
    rest = s.rest()
    assert s.wait() == 0, s.stderr.decode()
    assert not any(m.get("id") == 1 for m in rest)
    assert (s.marks / "request.cancelled").exists()
    _assert_stopped(json.loads((s.marks / "records.A.json").read_text())[task["taskId"]])
    s.assert_protocol_only()


def test_sigterm_after_stdin_closed_cuts_the_grace_short(tmp_path: Path, servers: list[Stdio]) -> None:
    """A client's shutdown (STDIO-06): close stdin, wait, then SIGTERM. The end of stdin
    began the stop; the signal ends its wait."""
    s = Stdio(tmp_path)
    servers.append(s)
    s.call_tool("t", "job", tag="task", seconds=1.5)
    task = s.until(_by_id("t"))["result"]
    (s.marks / "ids.txt").write_text(task["taskId"])
    s.wait_for_mark("task.started")
    s.close_stdin()
    time.sleep(0.2)
    s.terminate()
    assert s.wait() == 0, s.stderr.decode()
    _assert_stopped(json.loads((s.marks / "records.A.json").read_text())[task["taskId"]])


def test_the_end_of_stdin_gives_tasks_the_grace_too(tmp_path: Path, servers: list[Stdio]) -> None:
    s = Stdio(tmp_path)
    servers.append(s)
    s.call_tool("t", "job", tag="task", seconds=0.5)
    task = s.until(_by_id("t"))["result"]
    (s.marks / "ids.txt").write_text(task["taskId"])
    s.wait_for_mark("task.started")
    s.close_stdin()
    assert s.wait() == 0, s.stderr.decode()
    assert json.loads((s.marks / "records.A.json").read_text())[task["taskId"]]["status"] == "completed"


def test_a_legacy_clients_answer_still_arrives_during_the_grace(tmp_path: Path, servers: list[Stdio]) -> None:
    s = Stdio(tmp_path)
    servers.append(s)
    s.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "legacy-host", "version": "1"}}})
    assert s.until(_by_id(0))["result"]["protocolVersion"] == "2025-11-25"
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    s.send({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "greet"}})
    ask = s.until(lambda m: m.get("method") == "elicitation/create")
    s.terminate()
    time.sleep(0.1)
    s.send({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"name": "Ada"}}})
    done = s.until(_by_id(10))
    assert done["result"]["content"][0]["text"] == "Hello, Ada!"
    s.rest()
    assert s.wait() == 0, s.stderr.decode()
    s.assert_protocol_only()


# -- with a shared store: another instance sees it at once --------------------------------


def test_sigterm_fails_a_running_task_for_another_instance_on_redis(
        tmp_path: Path, servers: list[Stdio], redis_server: RedisServer) -> None:
    env = {"NIMBLEMCP_REDIS_URL": redis_server.url}
    a = Stdio(tmp_path, env, "A")
    b = Stdio(tmp_path, env, "B")
    servers.extend((a, b))
    a.call_tool("slow", "job", tag="slow", seconds=3600)
    slow = a.until(_by_id("slow"))["result"]["taskId"]
    a.wait_for_mark("slow.started")
    b.request("L", "subscriptions/listen", {"notifications": {"taskIds": [slow]}})
    b.until(lambda m: m.get("method") == "notifications/subscriptions/acknowledged")
    assert b.until(lambda m: m.get("method") == "notifications/tasks")["params"]["status"] == "working"

    signalled = time.monotonic()
    a.terminate()
    assert a.wait() == 0, a.stderr.decode()
    took = time.monotonic() - signalled
    # B's listen heard it (A's publish crossed Redis before A exited) ...
    note = b.until(lambda m: m.get("method") == "notifications/tasks")
    assert note["params"]["taskId"] == slow
    _assert_stopped(note["params"])
    # ... and B reads the same record, long before A's 60 s lease would have lapsed.
    b.request("G", "tasks/get", {"taskId": slow})
    _assert_stopped(b.until(_by_id("G"))["result"])
    assert took < 20, took
    assert (a.marks / "slow.cancelled").read_text() == "A"
    assert b"could not confirm" not in a.stderr  # the notice crossed Redis before A exited
    b.close_stdin()
    assert b.wait() == 0, b.stderr.decode()
    a.assert_protocol_only()
    b.assert_protocol_only()
