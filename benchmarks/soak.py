"""Bounded soak: mixed load on a real `run_http` server, two identical rounds.

    python benchmarks/soak.py [--duration 60] [--listeners 200] [--workers 16]

A server subprocess (uvicorn on loopback, what `nimblemcp run --transport http`
serves) gets, for each round: `--listeners` open `subscriptions/listen` streams (each
must be acknowledged and stay open), and `--workers` loops that each pick, per turn,
a tool call (70%), an MRTR flow (20%: `input_required`, then the retry with the
answer and the `requestState`), or an abrupt disconnect (10%: a raw socket sends a
call to a slow tool and closes mid-request). A warm-up round runs first (imports,
caches, pools), then round 1 (time-bound) and round 2, which replays exactly the
turns of round 1 (same seeds, same count per worker): identical work.

Reported: responses lost (a request that did not get its complete, correct answer;
the deliberately abandoned ones are not expected to), listens not acknowledged or
ended early, req/s, and the server's RSS after each round (settled 1 s), before and
after a full cyclic GC (a `settle` tool of the soak's server), with the growth from
round 1 to round 2 (target < 2%, after the GC: the raw figure also counts cyclic
garbage that `run_http`'s raised young-GC threshold leaves for later). Total run time is capped at 10 min.
Not part of pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream",
           "mcp-protocol-version": V}
MAX_DURATION = 600.0

SERVER = textwrap.dedent('''
    import asyncio, sys
    import nimblemcp as m
    from nimblemcp.serving import HttpServeOptions, run_http

    server = m.Server("soak", "1.0", state=m.StateOptions(keys=["c29hay1iZW5jaG1hcmsta2V5LTMyLWJ5dGVzLWxvbmc"]))

    @server.tool()
    async def echo(text: str) -> str:
        return text

    @server.tool()
    async def greet(ctx: m.Context) -> str:
        ctx.state["asked"] = ctx.state.get("asked", 0) + 1
        answer = await ctx.elicit("name", "Your name?",
                                  schema={"type": "object", "properties": {"name": {"type": "string"}}})
        return f"hello {answer.content['name']}" if answer.content else "declined"

    @server.tool()
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "slept"

    @server.tool()
    def settle() -> int:
        """The soak's probe: a full cyclic collection, so RSS shows what is retained."""
        import gc
        return gc.collect()

    run_http(server, port=int(sys.argv[1]), options=HttpServeOptions(log_level="error"))
''')


@dataclass
class Tally:
    expected: int = 0
    ok: int = 0
    lost: int = 0
    abandoned: int = 0
    listens_acked: int = 0
    listens_failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def lose(self, why: str) -> None:
        self.lost += 1
        self.errors[why] = self.errors.get(why, 0) + 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _settle(port: int) -> None:
    r = httpx.post(f"http://127.0.0.1:{port}/mcp", json=_call(0, "settle", {}), headers=_headers("settle"),
                   timeout=30)
    r.raise_for_status()


def _call(rid: int, name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": META, **extra}}


def _headers(name: str | None, method: str = "tools/call") -> dict[str, str]:
    h = {**HEADERS, "mcp-method": method}
    if name is not None:
        h["mcp-name"] = name
    return h


def _result(r: httpx.Response, rid: int) -> dict[str, Any] | None:
    if r.status_code != 200:
        return None
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        frames = [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:")]
        body = json.loads(frames[-1]) if frames else {}
    else:
        body = r.json()
    if body.get("id") != rid or "result" not in body:
        return None
    result: dict[str, Any] = body["result"]
    return result


async def _one_call(c: httpx.AsyncClient, url: str, rid: int, tally: Tally) -> None:
    tally.expected += 1
    text = f"t{rid}"
    r = await c.post(url, json=_call(rid, "echo", {"text": text}), headers=_headers("echo"))
    result = _result(r, rid)
    if result is None or result["content"][0]["text"] != text:
        tally.lose(f"call status {r.status_code}")
        return
    tally.ok += 1


async def _mrtr_flow(c: httpx.AsyncClient, url: str, rid: int, tally: Tally) -> None:
    tally.expected += 2
    r = await c.post(url, json=_call(rid, "greet", {}), headers=_headers("greet"))
    first = _result(r, rid)
    if first is None or first.get("resultType") != "input_required":
        tally.lose(f"mrtr first {r.status_code}")
        return
    tally.ok += 1
    retry = _call(rid + 1, "greet", {}, inputResponses={"name": {"action": "accept", "content": {"name": "ann"}}},
                  requestState=first["requestState"])
    r = await c.post(url, json=retry, headers=_headers("greet"))
    final = _result(r, rid + 1)
    if final is None or final["content"][0]["text"] != "hello ann":
        tally.lose(f"mrtr retry {r.status_code}")
        return
    tally.ok += 1


async def _abandon(port: int, rid: int, tally: Tally) -> None:
    """A call to a slow tool, closed before the answer (the server must cancel it)."""
    body = json.dumps(_call(rid, "slow", {"seconds": 0.5})).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in _headers("slow").items())
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n{head}content-length: {len(body)}\r\n\r\n".encode()
                 + body)
    await writer.drain()
    await asyncio.sleep(random.uniform(0.01, 0.08))
    writer.transport.abort()  # an RST-like end, not a polite close
    tally.abandoned += 1


async def _listener(c: httpx.AsyncClient, url: str, rid: int, tally: Tally, stop: asyncio.Event) -> None:
    body = {"jsonrpc": "2.0", "id": f"listen-{rid}", "method": "subscriptions/listen",
            "params": {"_meta": META, "notifications": {"toolsListChanged": True}}}
    try:
        async with c.stream("POST", url, json=body, headers=_headers(None, "subscriptions/listen")) as stream:
            chunks = stream.aiter_bytes()
            first = await asyncio.wait_for(chunks.__anext__(), 10)
            while b"acknowledged" not in first:
                first += await asyncio.wait_for(chunks.__anext__(), 10)
            tally.listens_acked += 1
            reading = asyncio.ensure_future(chunks.__anext__())
            stopping = asyncio.ensure_future(stop.wait())
            while True:
                done, _ = await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if stopping in done:
                    reading.cancel()
                    return
                reading.result()  # keep-alives; StopAsyncIteration = ended early
                reading = asyncio.ensure_future(chunks.__anext__())
    except (StopAsyncIteration, httpx.HTTPError, TimeoutError) as exc:
        tally.listens_failed += 1
        tally.errors[f"listen {type(exc).__name__}"] = tally.errors.get(f"listen {type(exc).__name__}", 0) + 1


MIX = (0.7, 0.2, 0.1)  # calls, MRTR flows, abrupt disconnects


async def _round(port: int, seconds: float, listeners: int, workers: int, seed: int,
                 quotas: list[int] | None = None) -> tuple[Tally, list[int]]:
    """One round: time-bound, or (given `quotas`) exactly that many turns per worker,
    each worker replaying the same random plan as the round that set the quotas."""
    url = f"http://127.0.0.1:{port}/mcp"
    tally = Tally()
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=listeners + workers + 8, max_keepalive_connections=workers + 8)
    async with httpx.AsyncClient(timeout=30, limits=limits) as c:
        stop = asyncio.Event()
        streams = [asyncio.create_task(_listener(c, url, i, tally, stop)) for i in range(listeners)]
        deadline = time.monotonic() + seconds
        ids = iter(range(seed * 10_000_000, (seed + 1) * 10_000_000, 2))

        async def worker(plan: random.Random, quota: int | None) -> int:
            turns = 0
            while (time.monotonic() < deadline) if quota is None else (turns < quota):
                pick, rid = plan.random(), next(ids)
                turns += 1
                try:
                    if pick < MIX[0]:
                        await _one_call(c, url, rid, tally)
                    elif pick < MIX[0] + MIX[1]:
                        await _mrtr_flow(c, url, rid, tally)
                    else:
                        await _abandon(port, rid, tally)
                except (httpx.HTTPError, OSError, ValueError) as exc:
                    tally.lose(type(exc).__name__)
            return turns

        plans = [random.Random(rng.random()) for _ in range(workers)]
        done = await asyncio.gather(*(worker(plans[i], None if quotas is None else quotas[i])
                                      for i in range(workers)))
        stop.set()
        await asyncio.gather(*streams)
    return tally, list(done)


async def _wait_ready(port: int) -> None:
    async with httpx.AsyncClient(timeout=2) as c:
        for _ in range(400):
            try:
                await c.get(f"http://127.0.0.1:{port}/mcp")
                return
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    raise RuntimeError("the server did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds for the two measured rounds together")
    parser.add_argument("--listeners", type=int, default=200)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--mix", default="70,20,10", help="weights of calls, MRTR flows, abrupt disconnects")
    args = parser.parse_args()
    global MIX
    weights = [float(w) for w in args.mix.split(",")]
    MIX = tuple(w / sum(weights) for w in weights)  # type: ignore[assignment]
    duration = min(args.duration, MAX_DURATION - 30)
    warmup, each = min(10.0, max(2.0, duration / 10)), duration / 2
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "soak_server.py"
        source.write_text(SERVER)
        proc = subprocess.Popen([sys.executable, str(source), str(port)], env={**os.environ})
        try:
            asyncio.run(_wait_ready(port))
            rounds: list[tuple[str, Tally, float, int, int]] = []
            quotas: list[int] | None = None
            for name, seconds, seed in (("warm-up", warmup, 1), ("round 1", each, 2), ("round 2", each, 2)):
                began = time.monotonic()
                tally, turns = asyncio.run(_round(port, seconds, args.listeners, args.workers, seed,
                                                  quotas if name == "round 2" else None))
                quotas = turns
                took = time.monotonic() - began
                time.sleep(1.0)  # let cancelled work and closed streams settle
                raw = _rss_kib(proc.pid)
                _settle(port)
                rounds.append((name, tally, took, raw, _rss_kib(proc.pid)))
            alive = proc.poll() is None
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"soak: {args.listeners} listen streams, {args.workers} workers, rounds of {each:.0f} s "
          f"(warm-up {warmup:.0f} s)")
    for name, t, took, raw, rss in rounds:
        print(f"  {name:8} answered {t.ok:>7}/{t.expected:<7} lost {t.lost:<4} abandoned {t.abandoned:<5} "
              f"listens acked {t.listens_acked}/{args.listeners} failed {t.listens_failed:<3} "
              f"{t.ok / took:7.0f} resp/s  RSS {raw / 1024:6.1f} MiB, {rss / 1024:6.1f} MiB after a full GC"
              f"  {t.errors or ''}")
    raw_growth = (rounds[2][3] - rounds[1][3]) / rounds[1][3] * 100
    growth = (rounds[2][4] - rounds[1][4]) / rounds[1][4] * 100
    lost = sum(t.lost + t.listens_failed for _, t, *_ in rounds)
    print(f"  RSS growth round 1 -> round 2: {growth:+.2f}% after a full GC (target < 2%), "
          f"{raw_growth:+.2f}% before it; lost: {lost}; server alive: {alive}")
    return 0 if lost == 0 and growth < 2.0 and alive else 1


if __name__ == "__main__":
    raise SystemExit(main())
