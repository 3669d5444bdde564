"""Chaos run: a deployment under steady work while faults are injected, with figures.

    python benchmarks/chaos.py [--duration 600] [--every 20] [--faults sigterm,kill,...]
                               [--engine uvicorn|nimblemcp] [--name chaos] [--seed 1]

What runs (all on 127.0.0.1, every process started here stopped by its own pid):
Redis (append-only file, fsync every second: a restart keeps the data, as a production
Redis behind tasks would); three `nimblemcp run servers/chaos_server.py --transport
http` instances sharing it, each reaching Redis through its own TCP proxy in this
script (so that one instance's network to Redis can be cut; iptables needs privileges
and is not used); Debian's nginx running `deploy/nginx/nimblemcp.conf` in front.

The work, for the whole duration, through nginx with nimblemcp's `Client`: idempotent
tool calls (`echo`, `idempotentHint`: the client may re-send them), non-idempotent
ones (`charge`: each call has its own op id and its one Redis transaction counts the
executions of that op), two-round MRTR calls (`wizard`), tasks (`job`, 1-4 s, followed
to their end), and `subscriptions/listen` streams hearing events that this script
publishes straight into Redis every 50 ms (numbered: a PUBLISH that Redis confirmed is
an event published).

The faults, one every `--every` seconds, in turn: `sigterm` (a rolling restart of one
instance: SIGTERM, wait for it to exit, start it again), `kill` (kill -9, started again
after 1 s), `redis-restart` (SIGTERM to Redis, started again on the same port),
`redis-pause` (SIGSTOP for 3 s, then SIGCONT), `redis-cut` (one instance's proxy drops
its connections and refuses new ones for 5 s), `slow-client` (40 connections through
nginx for 5 s: half open listens they never read, half trickle a request head a byte
at a time).

Reported: failed idempotent calls (target 0); non-idempotent calls executed more than
once (target 0; who ran them, from Redis); MRTR calls lost; tasks not terminal after
the run (target 0; read with `tasks/get` once every fault is over, after a settle of a
few leases) and tasks that failed; listen events lost versus published, gaps in the
events each listener heard and how many of them were signalled by a `missed` event,
events heard twice, and hand-overs; p50/p99 latency of the idempotent calls outside
and during faults (a fault's window plus 2 s), per fault kind; each instance's RSS at
the start and at the end. Exit status 1 when any non-idempotent call ran twice or any
task was left non-terminal (the CI's short run: tests/test_chaos.py).

On this machine the run shares two cores with everything else; read latency figures
with the load average printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import NIMBLE_PY, pct, save, say, table

try:
    import redis.asyncio as aredis

    import nimblemcp  # noqa: F401
except ImportError:  # the driver's interpreter lacks them: run from the nimble venv
    os.execv(NIMBLE_PY, [NIMBLE_PY, str(Path(__file__).resolve()), *sys.argv[1:]])

from _fleet import LOGS, SERVERS_DIR, Nginx, free_port, load, rss_mib, wait_port

from nimblemcp import Client

TARGET = SERVERS_DIR / "chaos_server.py"
FAULTS = ("sigterm", "kill", "redis-restart", "redis-pause", "redis-cut", "slow-client")
CHANNEL = "nimblemcp:events"
RECOVERY = 2.0  # seconds after a fault that still count as "during" it
SHUTDOWN = 10  # the instances' --shutdown-timeout


# -- the processes ----------------------------------------------------------------------


class RedisProc:
    """redis-server on a fixed loopback port, restartable, with an append-only file."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.binary, self.port = binary, free_port()
        self.dir = tempfile.mkdtemp(prefix="nimblemcp-chaos-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with (LOGS / "chaos-redis.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "yes", "--appendfsync", "everysec", "--dir", self.dir],
                stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused Redis cannot hear SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def signal(self, sig: int) -> None:
        if self.proc is not None:
            self.proc.send_signal(sig)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Proxies:
    """A TCP proxy per instance between it and Redis, on a thread and event loop of its
    own; `cut(i)` drops instance i's connections and refuses new ones until `mend(i)`."""

    def __init__(self, upstream: int, count: int) -> None:
        self.upstream = upstream
        self.ports = [free_port() for _ in range(count)]
        self.cut_off = [False] * count
        self.conns: list[set[asyncio.StreamWriter]] = [set() for _ in range(count)]
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="chaos-proxies", daemon=True)
        self.thread.start()
        self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        for i, port in enumerate(self.ports):
            self.loop.run_until_complete(asyncio.start_server(
                lambda r, w, i=i: self._serve(i, r, w), "127.0.0.1", port))
        self.ready.set()
        self.loop.run_forever()

    async def _serve(self, i: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off[i]:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self.conns[i].update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while chunk := await src.read(65536):
                    dst.write(chunk)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.transport.abort()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            self.conns[i].difference_update((writer, up_writer))

    def _set(self, i: int, cut: bool) -> None:
        self.cut_off[i] = cut
        if cut:
            for conn in list(self.conns[i]):
                conn.transport.abort()  # a reset, as a dropped link looks to both ends

    def cut(self, i: int) -> None:
        self.loop.call_soon_threadsafe(self._set, i, True)

    def mend(self, i: int) -> None:
        self.loop.call_soon_threadsafe(self._set, i, False)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Instance:
    """One `nimblemcp run` slot: its port, its process (started again after a fault)."""

    def __init__(self, name: str, port: int, redis_port: int, env: dict[str, str], engine: str) -> None:
        self.name, self.port, self.engine = name, port, engine
        self.env = {**env, "INSTANCE": name, "NIMBLEMCP_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0"}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        argv = [NIMBLE_PY, "-m", "nimblemcp", "run", str(TARGET), "--transport", "http", "--port",
                str(self.port), "--log-level", "warning", "--shutdown-timeout", str(SHUTDOWN),
                "--engine", self.engine]
        full = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        full.pop("PYTHONPATH", None)
        with (LOGS / f"chaos-{self.name}.log").open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, env=full, cwd=str(SERVERS_DIR))
        self.starts += 1
        wait_port(self.port, self.proc, f"instance {self.name}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = SHUTDOWN + 10) -> int | None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(sig)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


# -- what happened ----------------------------------------------------------------------


@dataclass
class Record:
    kind: str  # echo, charge, wizard, task
    start: float
    took: float
    ok: bool
    error: str = ""


@dataclass
class Fault:
    kind: str
    target: str
    start: float
    end: float = 0.0
    note: str = ""


@dataclass
class ListenLog:
    items: list[tuple[str, int, float]] = field(default_factory=list)  # ("ev", seq, t) / ("missed", -1, t)
    acked_at: float = 0.0
    handovers: int = 0
    reconnects: int = 0
    error: str = ""


class Run:
    def __init__(self, args: argparse.Namespace, url: str) -> None:
        self.args, self.url = args, url
        self.stop = asyncio.Event()
        self.records: list[Record] = []
        self.faults: list[Fault] = []
        self.ops: list[str] = []
        self.tasks: dict[str, str] = {}  # task id -> final status the client saw
        self.listens: list[ListenLog] = []
        self.published: dict[int, float] = {}
        self.run_id = f"{int(time.time())}-{os.getpid()}"

    def note(self, kind: str, start: float, ok: bool, error: str = "") -> None:
        self.records.append(Record(kind, start, time.monotonic() - start, ok, error[:200]))


# -- the work -----------------------------------------------------------------------------


async def idempotent(run: Run, w: int) -> None:
    async with Client(run.url, timeout=30) as client:
        for i in itertools.count():
            if run.stop.is_set():
                return
            start = time.monotonic()
            try:
                result = await client.call_tool("echo", {"text": f"{w}-{i}"})
                ok = not result.get("isError") and result["content"][0]["text"] == f"{w}-{i}"
                run.note("echo", start, ok, "" if ok else json.dumps(result)[:200])
            except Exception as exc:
                run.note("echo", start, False, f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(run.args.pace)


async def charges(run: Run, w: int) -> None:
    async with Client(run.url, timeout=30) as client:
        for i in itertools.count():
            if run.stop.is_set():
                return
            op = f"{run.run_id}-{w}-{i}"
            run.ops.append(op)
            start = time.monotonic()
            try:
                result = await client.call_tool("charge", {"op": op})
                run.note("charge", start, not result.get("isError"), json.dumps(result)[:200])
            except Exception as exc:
                run.note("charge", start, False, f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(run.args.pace)


async def wizards(run: Run, w: int) -> None:
    async def answer(params: dict[str, Any]) -> dict[str, Any]:
        return {"action": "accept", "content": {"v": "a" if "First" in params.get("message", "") else "b"}}

    async with Client(run.url, timeout=30, on_elicit=answer) as client:
        while not run.stop.is_set():
            start = time.monotonic()
            try:
                result = await client.call_tool("wizard", {})
                ok = not result.get("isError") and result["content"][0]["text"] == "a+b"
                run.note("wizard", start, ok, "" if ok else json.dumps(result)[:200])
            except Exception as exc:
                run.note("wizard", start, False, f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(run.args.pace)


async def jobs(run: Run, w: int) -> None:
    rng = random.Random(run.args.seed * 100 + w)
    async with Client(run.url, timeout=30, tasks=True) as client:
        while not run.stop.is_set():
            start = time.monotonic()
            task_id = None
            try:
                created = await client.call_tool("job", {"seconds": rng.uniform(1, 4)}, wait=False)
                task_id = created["taskId"]
                run.tasks[task_id] = "created"
                await client.wait_task(created, timeout=60)
                run.tasks[task_id] = "completed"
                run.note("task", start, True)
            except Exception as exc:
                if task_id is not None:
                    run.tasks[task_id] = f"error: {type(exc).__name__}"
                run.note("task", start, False, f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(run.args.pace)


async def listen(run: Run, log: ListenLog) -> None:
    async with Client(run.url, timeout=30) as client, client.listen(
            resources=["chaos://events"], backoff=0.05, max_backoff=1.0, max_reconnects=10_000) as events:
        log.acked_at = time.monotonic()
        try:
            while not run.stop.is_set():
                try:
                    event = await asyncio.wait_for(events.next(), 1.0)
                except TimeoutError:
                    continue
                now = time.monotonic()
                if event.kind == "missed":
                    log.items.append(("missed", -1, now))
                elif event.kind == "resource_updated" and event.uri and event.uri.startswith("chaos://events/"):
                    log.items.append(("ev", int(event.uri.rsplit("/", 1)[1]), now))
                elif event.kind == "closed":
                    log.error = "closed"
                    return
        except Exception as exc:
            log.error = f"{type(exc).__name__}: {exc}"
        finally:
            log.handovers, log.reconnects = events.handovers, events.reconnects


async def publisher(run: Run, redis_url: str) -> None:
    """Numbered events straight into Redis, in the bus's format; published = confirmed."""
    r = aredis.Redis.from_url(redis_url, socket_connect_timeout=1.0)
    try:
        for seq in itertools.count():
            if run.stop.is_set():
                return
            message = json.dumps({"k": "updated", "u": f"chaos://events/{seq}"})
            try:
                await r.publish(CHANNEL, message)
                run.published[seq] = time.monotonic()
            except Exception:
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.05)
    finally:
        await r.aclose()


# -- the faults ---------------------------------------------------------------------------


async def slow_clients(port: int, seconds: float) -> str:
    """Connections through nginx that never read a listen, or trickle a request head."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}},
        "notifications": {"resourceSubscriptions": ["chaos://events"]}}}).encode()
    head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
            f"Mcp-Method: subscriptions/listen\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    writers: list[asyncio.StreamWriter] = []
    for i in range(40):
        with contextlib.suppress(OSError):
            _reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1024)
            if i % 2 == 0:
                writer.write(head + body)  # a listen it never reads
            writers.append(writer)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for i, writer in enumerate(writers):
            if i % 2 == 1 and not writer.is_closing():
                with contextlib.suppress(OSError):
                    writer.write(head[:1])  # a head trickling in (never finished)
        await asyncio.sleep(0.5)
    for writer in writers:
        writer.transport.abort()
    return f"{len(writers)} connections"


async def inject(run: Run, kind: str, instances: list[Instance], redis: RedisProc, proxies: Proxies,
                 nginx_port: int, turn: int) -> Fault:
    victim = instances[turn % len(instances)]
    fault = Fault(kind, victim.name if kind in ("sigterm", "kill", "redis-cut") else "redis", time.monotonic())
    if kind == "sigterm":
        began = time.monotonic()
        code = await asyncio.to_thread(victim.stop, signal.SIGTERM)
        fault.note = f"exit {code} after {time.monotonic() - began:.1f} s"
        await asyncio.to_thread(victim.start)
    elif kind == "kill":
        await asyncio.to_thread(victim.stop, signal.SIGKILL)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(victim.start)
    elif kind == "redis-restart":
        await asyncio.to_thread(redis.stop)
        await asyncio.to_thread(redis.start)
        fault.target = "redis"
    elif kind == "redis-pause":
        redis.signal(signal.SIGSTOP)
        await asyncio.sleep(3.0)
        redis.signal(signal.SIGCONT)
    elif kind == "redis-cut":
        index = instances.index(victim)
        proxies.cut(index)
        await asyncio.sleep(5.0)
        proxies.mend(index)
    elif kind == "slow-client":
        fault.target = "nginx"
        fault.note = await slow_clients(nginx_port, 5.0)
    fault.end = time.monotonic()
    return fault


async def chaos(run: Run, instances: list[Instance], redis: RedisProc, proxies: Proxies, nginx_port: int) -> None:
    kinds = [k for k in run.args.faults.split(",") if k]
    await asyncio.sleep(min(5.0, run.args.every / 2))  # warm up first
    for turn in itertools.count():
        if run.stop.is_set():
            return
        kind = kinds[turn % len(kinds)]
        began = time.monotonic()
        # Each round of faults moves one instance further: every kind hits every instance.
        fault = await inject(run, kind, instances, redis, proxies, nginx_port, turn // len(kinds) + turn)
        run.faults.append(fault)
        say(f"  fault {turn + 1}: {kind} on {fault.target} ({fault.end - fault.start:.1f} s) {fault.note}")
        rest = run.args.every - (time.monotonic() - began)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.stop.wait(), max(rest, 1.0))


# -- the run ------------------------------------------------------------------------------


async def drive(args: argparse.Namespace, instances: list[Instance], redis: RedisProc, proxies: Proxies,
                nginx_port: int) -> tuple[Run, dict[str, Any]]:
    run = Run(args, f"http://127.0.0.1:{nginx_port}/mcp")
    workers = [asyncio.create_task(publisher(run, redis.url))]
    for _ in range(args.listens):
        log = ListenLog()
        run.listens.append(log)
        workers.append(asyncio.create_task(listen(run, log)))
    await asyncio.sleep(1.0)  # the listens are acknowledged before the clock starts
    workers += [asyncio.create_task(idempotent(run, w)) for w in range(args.idempotent)]
    workers += [asyncio.create_task(charges(run, w)) for w in range(args.charges)]
    workers += [asyncio.create_task(wizards(run, w)) for w in range(args.wizards)]
    workers += [asyncio.create_task(jobs(run, w)) for w in range(args.tasks)]
    started = time.monotonic()
    faults = asyncio.create_task(chaos(run, instances, redis, proxies, nginx_port))
    await asyncio.sleep(args.duration)
    run.stop.set()
    await faults  # the fault under way ends (an instance restarted, Redis back)
    say(f"  run over after {time.monotonic() - started:.0f} s; settling")
    _done, pending = await asyncio.wait(workers, timeout=90)
    for task in pending:
        task.cancel()
    await asyncio.sleep(1.0)
    return run, await settle(run, redis, instances)


async def settle(run: Run, redis: RedisProc, instances: list[Instance]) -> dict[str, Any]:
    """After the faults: executions per op, and each task's state (until every task is
    terminal, for at most 60 s: a lapsed lease is noticed by the next read)."""
    r = aredis.Redis.from_url(redis.url)
    try:
        twice: dict[str, list[str]] = {}
        executed = 0
        for start in range(0, len(run.ops), 500):
            batch = run.ops[start:start + 500]
            counts = await r.mget([f"chaos:exec:{op}" for op in batch])
            for op, count in zip(batch, counts, strict=True):
                executed += count is not None
                if count is not None and int(count) > 1:
                    twice[op] = [w.decode() for w in await r.lrange(f"chaos:who:{op}", 0, -1)]
    finally:
        await r.aclose()
    states: dict[str, str] = {}
    deadline = time.monotonic() + 60
    async with Client(run.url, timeout=30, tasks=True) as client:
        pending = list(run.tasks)
        while pending and time.monotonic() < deadline:
            still = []
            for task_id in pending:
                try:
                    states[task_id] = (await client.get_task(task_id))["status"]
                except Exception as exc:
                    states[task_id] = f"unreadable: {type(exc).__name__}: {exc}"[:120]
                if states[task_id] in ("working", "input_required"):
                    still.append(task_id)
            pending = still
            if pending:
                await asyncio.sleep(1.0)
    return {"twice": twice, "executed": executed, "task_states": states,
            "rss_end": {i.name: rss_mib(i.proc.pid) if i.proc else float("nan") for i in instances},
            "starts": {i.name: i.starts for i in instances}}


def listen_figures(run: Run, end_margin: float = 2.0) -> dict[str, Any]:
    """Per listener: events published while it listened, lost, gaps and how many a
    `missed` signalled, events heard twice."""
    out = []
    last_pub = max(run.published.values(), default=0.0)
    for log in run.listens:
        window = [seq for seq, t in sorted(run.published.items())
                  if t >= log.acked_at and t <= last_pub - end_margin]
        order = {seq: pos for pos, (kind, seq, _t) in enumerate(log.items) if kind == "ev"}
        heard = [seq for kind, seq, _t in log.items if kind == "ev"]
        twice = len(heard) - len(set(heard))
        lost = [seq for seq in window if seq not in order]
        gaps: list[list[int]] = []
        for seq in lost:
            if gaps and window.index(seq) == window.index(gaps[-1][-1]) + 1:
                gaps[-1].append(seq)
            else:
                gaps.append([seq])
        signalled = 0
        for gap in gaps:
            before = [order[s] for s in window if s < gap[0] and s in order]
            after = [order[s] for s in window if s > gap[-1] and s in order]
            lo = max(before) if before else -1
            hi = min(after) if after else len(log.items)
            if any(kind == "missed" for kind, _s, _t in log.items[lo + 1:hi]):
                signalled += 1
        out.append({"published": len(window), "heard": len(set(heard) & set(window)), "lost": len(lost),
                    "gaps": len(gaps), "signalled": signalled, "twice": twice,
                    "missed_events": sum(1 for k, _s, _t in log.items if k == "missed"),
                    "handovers": log.handovers, "reconnects": log.reconnects, "error": log.error})
    return {"listeners": out}


def latency_figures(run: Run) -> dict[str, Any]:
    def during(t: float) -> Fault | None:
        for f in run.faults:
            if f.start <= t <= f.end + RECOVERY:
                return f
        return None

    calm, hit = [], []
    per_kind: dict[str, list[Record]] = {}
    for rec in run.records:
        if rec.kind != "echo":
            continue
        fault = during(rec.start)
        (hit if fault else calm).append(rec)
        if fault:
            per_kind.setdefault(fault.kind, []).append(rec)
    ms = lambda recs, p: pct([r.took * 1000 for r in recs], p) if recs else float("nan")  # noqa: E731
    return {"calm": {"calls": len(calm), "p50": ms(calm, 50), "p99": ms(calm, 99)},
            "faults": {"calls": len(hit), "p50": ms(hit, 50), "p99": ms(hit, 99)},
            "per_kind": {k: {"calls": len(v), "p99": ms(v, 99), "failed": sum(not r.ok for r in v)}
                         for k, v in per_kind.items()}}


def report(args: argparse.Namespace, run: Run, settled: dict[str, Any], rss_start: dict[str, float],
           load_before: str, load_after: str, wall: float) -> tuple[str, dict[str, Any], bool]:
    by_kind = {k: [r for r in run.records if r.kind == k] for k in ("echo", "charge", "wizard", "task")}
    failed = {k: [r for r in v if not r.ok] for k, v in by_kind.items()}
    states = settled["task_states"]
    stuck = sorted(t for t, s in states.items() if s not in ("completed", "failed", "cancelled"))
    task_failed = sum(1 for s in states.values() if s == "failed")
    listens = listen_figures(run)["listeners"]
    lat = latency_figures(run)
    faults_by_kind: dict[str, int] = {}
    for f in run.faults:
        faults_by_kind[f.kind] = faults_by_kind.get(f.kind, 0) + 1
    twice = settled["twice"]
    ok = not twice and not stuck
    f1 = lambda v: f"{v:.1f}"  # noqa: E731
    rows = [
        ["idempotent calls (`echo`) failed", f"{len(failed['echo'])} of {len(by_kind['echo'])}", "0"],
        ["non-idempotent calls (`charge`) executed twice", f"{len(twice)} of {len(by_kind['charge'])} "
         f"({settled['executed']} executed, {len(failed['charge'])} failed)", "0"],
        ["MRTR calls (`wizard`, 2 rounds) lost", f"{len(failed['wizard'])} of {len(by_kind['wizard'])}", "0"],
        ["tasks not terminal after the run", f"{len(stuck)} of {len(states)} ({task_failed} failed, "
         f"{sum(1 for s in states.values() if s == 'completed')} completed)", "0"],
        ["listen events lost / published", ", ".join(f"{x['lost']} / {x['published']}" for x in listens), "-"],
        ["listen gaps signalled by `missed`", ", ".join(f"{x['signalled']} of {x['gaps']}" for x in listens),
         "all"],
        ["listen events heard twice", ", ".join(str(x["twice"]) for x in listens), "0"],
        ["listen hand-overs / re-listens", ", ".join(f"{x['handovers']} / {x['reconnects']}" for x in listens), "-"],
        ["`echo` p50 / p99 ms, no fault", f"{f1(lat['calm']['p50'])} / {f1(lat['calm']['p99'])} "
         f"({lat['calm']['calls']} calls)", "-"],
        ["`echo` p50 / p99 ms, during faults", f"{f1(lat['faults']['p50'])} / {f1(lat['faults']['p99'])} "
         f"({lat['faults']['calls']} calls)", "-"],
    ]
    fault_rows = [[k, str(faults_by_kind.get(k, 0)), f1(lat["per_kind"].get(k, {}).get("p99", float("nan"))),
                   str(lat["per_kind"].get(k, {}).get("failed", 0))] for k in FAULTS if k in faults_by_kind]
    rss_rows = [[name, f1(rss_start[name]), f1(settled["rss_end"][name]), str(settled["starts"][name] - 1)]
                for name in rss_start]
    out = (f"Chaos run: {args.duration:.0f} s, a fault every {args.every:g} s ({len(run.faults)} faults), "
           f"3 instances (`--engine {args.engine}`) + Redis + nginx; workers: {args.idempotent} idempotent, "
           f"{args.charges} non-idempotent, {args.wizards} MRTR, {args.tasks} task, {args.listens} listen; "
           f"wall {wall:.0f} s; {os.cpu_count()} cores; {load_before} before, {load_after} after.\n\n"
           + table(["figure", "result", "target"], rows)
           + "\n\n" + table(["fault", "times", "`echo` p99 ms during", "`echo` failed during"], fault_rows)
           + "\n\n" + table(["instance", "RSS at start MiB", "RSS at end MiB", "restarts"], rss_rows))
    problems = []
    for kind in ("echo", "wizard", "charge"):
        errors: dict[str, int] = {}
        for rec in failed[kind]:
            errors[rec.error[:120]] = errors.get(rec.error[:120], 0) + 1
        problems += [f"{kind}: {n} x {e}" for e, n in sorted(errors.items(), key=lambda x: -x[1])[:5]]
    if twice:
        problems += [f"ran twice: {op} by {who}" for op, who in list(twice.items())[:10]]
    if stuck:
        problems += [f"not terminal: {t} ({states[t]}; client saw {run.tasks.get(t)})" for t in stuck[:10]]
    problems += [f"listener {i}: {x['error']}" for i, x in enumerate(listens) if x["error"]]
    if problems:
        out += "\n\nDetails:\n" + "\n".join(f"- {p}" for p in problems)
    data = {"args": vars(args), "load_before": load_before, "load_after": load_after, "wall_s": wall,
            "faults": [vars(f) for f in run.faults], "calls": {k: len(v) for k, v in by_kind.items()},
            "failed": {k: len(v) for k, v in failed.items()}, "executed_twice": twice,
            "tasks": {"total": len(states), "stuck": stuck, "failed": task_failed},
            "listens": listens, "latency_ms": lat, "rss_start": rss_start, "rss_end": settled["rss_end"],
            "starts": settled["starts"], "problems": problems, "ok": ok}
    return out, data, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of work under faults")
    ap.add_argument("--every", type=float, default=20.0, help="seconds between the starts of two faults")
    ap.add_argument("--faults", default=",".join(FAULTS), help="the faults, in turn")
    ap.add_argument("--engine", choices=("uvicorn", "nimblemcp"), default="uvicorn")
    ap.add_argument("--idempotent", type=int, default=4)
    ap.add_argument("--charges", type=int, default=2)
    ap.add_argument("--wizards", type=int, default=1)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--listens", type=int, default=2)
    ap.add_argument("--pace", type=float, default=0.02, help="seconds a worker waits between two calls")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--name", default="chaos", help="results file name")
    args = ap.parse_args()
    unknown = set(args.faults.split(",")) - set(FAULTS)
    if unknown:
        sys.exit(f"unknown faults: {sorted(unknown)} (known: {', '.join(FAULTS)})")
    load_before = load()
    redis = RedisProc()
    redis.start()
    proxies = Proxies(redis.port, 3)
    state = subprocess.run([NIMBLE_PY, "-c", "from nimblemcp.server._sealing import new_key; print(new_key())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    env = {"NIMBLEMCP_STATE_KEYS": state, "NIMBLEMCP_ALLOWED_HOSTS": "nimblemcp,nimblemcp_sticky"}
    instances = [Instance(name, free_port(), proxies.ports[i], env, args.engine) for i, name in enumerate("ABC")]
    nginx: Nginx | None = None
    began = time.monotonic()
    try:
        for inst in instances:
            inst.start()
        nginx_port = free_port()
        nginx = Nginx([i.port for i in instances], nginx_port)
        rss_start = {i.name: rss_mib(i.proc.pid) if i.proc else float("nan") for i in instances}
        say(f"chaos: {args.duration:.0f} s, faults {args.faults} every {args.every:g} s; logs in {LOGS}/chaos-*.log")
        run, settled = asyncio.run(drive(args, instances, redis, proxies, nginx_port))
    finally:
        if nginx is not None:
            nginx.close()
        for inst in instances:
            inst.stop()
        proxies.close()
        redis.close()
    out, data, ok = report(args, run, settled, rss_start, load_before, load(), time.monotonic() - began)
    say(out)
    save(args.name, out, data)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
