"""Listen fan-out across instances: many `subscriptions/listen` streams, a burst of events.

    python benchmarks/listen_fanout.py [--instances 3] [--listeners 1000] [--events 10000]
                                       [--topics 100] [--quick] [--server nimblemcp|mcp]

`--instances` copies of `servers/nimble_listen_server.py` run under `nimblemcp run
--transport http`, sharing one Redis (the bus) and one state key. `--listeners` 2026-07-28
`subscriptions/listen` streams are opened straight at the instances, round-robin; listener
j subscribes to `bench://t/<j % topics>`. Then one `tools/call burst` on instance 0
publishes `--events` resource-updated events round-robin over the topics, each URI stamped
with its publish time (`time.monotonic_ns()`: one clock for every process here). Every
event reaches the listeners of its topic on every instance: with the defaults each of the
10,000 events reaches 10 listeners (100,000 deliveries); `--topics 1` makes every event
reach every listener (a broadcast: events x listeners deliveries).

Measured: deliveries received of those expected, delivery latency (publish to receipt by
the client) p50 / p99 / max overall and per instance, the whole burst's span (first
publish to last receipt), events/s and deliveries/s over that span, each instance's RSS
idle, with the listeners open, and after the burst (and the memory each open listen
costs: RSS listening minus idle, per listen); CPU seconds used during the burst by the
instances, Redis and the client.

`--server mcp` runs the official SDK instead (`servers/mcp_listen_server.py`, mcp 2.3.0
under uvicorn from benchmarks/.venv-peers, the same HTTP stack): one instance (the SDK
has no bus across instances), every listener on `bench://t/0` and every event for it
(the SDK matches URIs exactly: a broadcast, `--topics 1`); its `burst` tool returns each
event's publish time and the client pairs the k-th event of a stream with the k-th time.
Its listen cap (1,024 streams) and backlog cap are raised (`BENCH_LISTEN_MAX`,
`BENCH_LISTEN_QUEUE`).

The client is one process: asyncio (uvloop) protocols with httptools' response parser, one
socket per stream, a timestamp per socket read and a regex over each batch of complete SSE
events, nothing per event but an integer subtraction; its CPU share is in the table so
it can be seen not to be the limit (it runs from benchmarks/.venv-nimble, re-executing
itself there). Events are stamped by the publisher, so the latency includes the Redis
round trip of the bus and the instances' own queueing. The listen queue is raised
(`BENCH_LISTEN_QUEUE`, default here 20000) so that a burst is measured rather than cut: at
nimblemcp's default of 256 a listener more than 256 events behind is ended by design.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from _common import META, NIMBLE_PY, PEER_PY, VERSION, ensure_peers, pct, save, say, table

try:
    import httptools
except ImportError:  # the driver's interpreter lacks it: run from the nimble venv
    ensure_peers()
    os.execv(NIMBLE_PY, [NIMBLE_PY, str(Path(__file__).resolve()), *sys.argv[1:]])

from _fleet import (
    LOGS,
    SERVERS_DIR,
    Redis,
    cpu_seconds,
    free_port,
    launch,
    load,
    rss_mib,
    state_key,
    stop,
    wait_port,
)

TARGET = SERVERS_DIR / "nimble_listen_server.py"
STAMP = re.compile(rb"bench://t/\d+/\d+/(\d+)")
UPDATED = b"notifications/resources/updated"


class Stats:
    def __init__(self, instances: int) -> None:
        self.lat: list[list[int]] = [[] for _ in range(instances)]  # ns, per instance
        self.acks = 0
        self.failed: list[str] = []
        self.received = 0
        self.last_ns = 0


class Listener(asyncio.Protocol):
    """One listen stream: write the POST, parse the SSE body, record one latency per event
    (`ordered`: the receipt time of each event instead, paired with the publish times
    the burst returns; the official SDK's events carry no stamp)."""

    def __init__(self, request: bytes, stats: Stats, instance: int, ordered: bool = False) -> None:
        self.request, self.stats, self.instance = request, stats, instance
        self.parser = httptools.HttpResponseParser(self)
        self.buf = b""
        self.acked = False
        self.now = 0
        self.transport: asyncio.Transport | None = None
        self.ordered = ordered
        self.times: list[int] = []
        self.sep = b"\r\n\r\n" if ordered else b"\n\n"  # the SDK ends SSE lines with CRLF

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.now = time.monotonic_ns()
        self.parser.feed_data(data)

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status != 200:
            self.stats.failed.append(f"HTTP {status}")

    def on_body(self, body: bytes) -> None:
        buf = self.buf + body
        cut = buf.rfind(self.sep)
        if cut < 0:
            self.buf = buf
            return
        done, self.buf = buf[:cut], buf[cut + len(self.sep):]
        if not self.acked:
            if b"notifications/subscriptions/acknowledged" in done:
                if b"resourceSubscriptions" not in done:
                    self.stats.failed.append("the acknowledgement does not honour resourceSubscriptions")
                self.acked = True
                self.stats.acks += 1
            elif b"error" in done:
                self.stats.failed.append(done[:300].decode(errors="replace"))
        now, lat = self.now, self.stats.lat[self.instance]
        n = 0
        if self.ordered:
            n = done.count(UPDATED)
            self.times.extend([now] * n)
        else:
            for m in STAMP.finditer(done):
                lat.append(now - int(m.group(1)))
                n += 1
        if n:
            self.stats.received += n
            self.stats.last_ns = now
        if b"notifications/cancelled" in done:
            self.stats.failed.append("a listen was ended by the server: " + done[-200:].decode(errors="replace"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


def listen_request(port: int, rid: int, topic: int) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "subscriptions/listen",
                       "params": {"_meta": META, "notifications": {
                           "resourceSubscriptions": [f"bench://t/{topic}"]}}}, separators=(",", ":")).encode()
    head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {VERSION}\r\n"
            f"Mcp-Method: subscriptions/listen\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


def call_burst(port: int, events: int, topics: int, rate: float, sdk: bool = False) -> list[int]:
    """Run the server's `burst` tool; the publish times it returns (the SDK's server)."""
    arguments = {"n": events} if sdk else {"n": events, "topics": topics, "rate": rate}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"_meta": META, "name": "burst", "arguments": arguments}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body, headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION, "Mcp-Method": "tools/call", "Mcp-Name": "burst"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        reply = resp.read()
    if b'"isError":true' in reply or b'"error"' in reply:
        raise RuntimeError(f"burst failed: {reply[:300]!r}")
    if not sdk:
        return []
    text = reply.strip()
    if not text.startswith(b"{"):  # an SSE answer: its last data line is the response
        lines = [ln[5:].strip() for ln in text.splitlines() if ln.startswith(b"data:")]
        if not lines:
            raise RuntimeError(f"burst: no answer in {reply[:300]!r}")
        text = lines[-1]
    stamps: list[int] = json.loads(text)["result"]["structuredContent"]["result"]
    return stamps


def expected(listeners: int, events: int, topics: int) -> int:
    per_topic_listeners = [len(range(k, listeners, topics)) for k in range(topics)]
    return sum(per_topic_listeners[i % topics] for i in range(events))


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def measure(args: argparse.Namespace, ports: list[int], pids: list[int], redis_pid: int) -> dict:
    loop = asyncio.get_running_loop()
    stats = Stats(len(ports))
    rss_idle = [rss_mib(p) for p in pids]
    protocols: list[Listener] = []
    t0 = time.monotonic()
    for start in range(0, args.listeners, 100):  # connect in batches: no accept-queue overflow
        batch = []
        for j in range(start, min(start + 100, args.listeners)):
            inst = j % len(ports)
            req = listen_request(ports[inst], j + 1, j % args.topics)
            batch.append(loop.create_connection(lambda r=req, i=inst: Listener(r, stats, i, args.server == "mcp"),
                                                "127.0.0.1", ports[inst]))
        for _transport, proto in await asyncio.gather(*batch):
            protocols.append(proto)
    while stats.acks < args.listeners and not stats.failed:
        if time.monotonic() - t0 > 120:
            raise RuntimeError(f"only {stats.acks} of {args.listeners} listens acknowledged in 120 s")
        await asyncio.sleep(0.02)
    if stats.failed:
        raise RuntimeError(f"listen failed: {stats.failed[:3]}")
    connect_s = time.monotonic() - t0
    await asyncio.sleep(1.0)  # settle: every instance's bus subscription is live
    rss_listening = [rss_mib(p) for p in pids]
    cpu0 = [cpu_seconds(p) for p in pids] + [cpu_seconds(redis_pid), own_cpu()]
    want = expected(args.listeners, args.events, args.topics)
    burst_start = time.monotonic_ns()
    call = loop.run_in_executor(None, call_burst, ports[0], args.events, args.topics, args.rate,
                                args.server == "mcp")
    last_progress, last_count = time.monotonic(), 0
    while stats.received < want:
        await asyncio.sleep(0.05)
        if stats.received != last_count:
            last_progress, last_count = time.monotonic(), stats.received
        elif time.monotonic() - last_progress > args.idle:
            break
    stamps = await call
    for proto in protocols:  # the SDK's server: the k-th event of a stream was published at stamps[k]
        stats.lat[proto.instance].extend(t - stamps[k] for k, t in enumerate(proto.times[:len(stamps)]))
    span_s = (stats.last_ns - burst_start) / 1e9 if stats.last_ns else float("nan")
    cpu1 = [cpu_seconds(p) for p in pids] + [cpu_seconds(redis_pid), own_cpu()]
    await asyncio.sleep(0.5)
    rss_after = [rss_mib(p) for p in pids]
    for proto in protocols:
        if proto.transport is not None:
            proto.transport.close()
    await asyncio.sleep(1.0)
    rss_closed = [rss_mib(p) for p in pids]
    used = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    return {"stats": stats, "want": want, "connect_s": connect_s, "span_s": span_s,
            "rss": list(zip(rss_idle, rss_listening, rss_after, rss_closed, strict=True)),
            "cpu_instances": used[:-2], "cpu_redis": used[-2], "cpu_client": used[-1],
            "failed": stats.failed[:5]}


def launch_sdk(port: int, queue: int, listeners: int) -> subprocess.Popen[bytes]:
    """The official SDK's listen server under uvicorn (uvloop, httptools), from .venv-peers."""
    ensure_peers()
    env = dict(os.environ, BENCH_LISTEN_QUEUE=str(queue), BENCH_LISTEN_MAX=str(max(listeners, 1024)))
    env.pop("PYTHONPATH", None)
    with (LOGS / "bench-listen-mcp.log").open("wb") as log:
        return subprocess.Popen(
            [PEER_PY, "-m", "uvicorn", "mcp_listen_server:http_app", "--factory", "--port", str(port),
             "--log-level", "warning", "--loop", "uvloop", "--http", "httptools"],
            stdout=log, stderr=log, env=env, cwd=str(SERVERS_DIR))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--listeners", type=int, default=1000)
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("--topics", type=int, default=100, help="1 = every event reaches every listener")
    ap.add_argument("--rate", type=float, default=0.0, help="events per second (0: all at once)")
    ap.add_argument("--queue", type=int, default=20000, help="listen queue of each instance")
    ap.add_argument("--idle", type=float, default=10.0, help="give up after this long without a delivery")
    ap.add_argument("--name", default="listen_fanout", help="results file name")
    ap.add_argument("--quick", action="store_true", help="tiny numbers: a smoke run")
    ap.add_argument("--server", choices=("nimblemcp", "mcp"), default="nimblemcp",
                    help="mcp: the official SDK (one instance, a broadcast)")
    args = ap.parse_args()
    if args.quick:
        args.instances, args.listeners, args.events, args.topics = 2, 20, 200, 5
    if args.server == "mcp":
        args.instances, args.topics = 1, 1
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    load_before = load()
    redis = Redis()
    env = {"NIMBLEMCP_STATE_KEYS": state_key(), "NIMBLEMCP_REDIS_URL": redis.url,
           "BENCH_LISTEN_QUEUE": str(args.queue)}
    procs = []
    try:
        ports = [free_port() for _ in range(args.instances)]
        for i, port in enumerate(ports):
            procs.append(launch(TARGET, port, f"listen-{i}", env=env) if args.server == "nimblemcp"
                         else launch_sdk(port, args.queue, args.listeners))
        for proc, port in zip(procs, ports, strict=True):
            wait_port(port, proc)
        try:
            import uvloop
            runner = uvloop.run
        except ImportError:
            runner = asyncio.run
        res = runner(measure(args, ports, [p.pid for p in procs], redis.proc.pid))
    finally:
        for proc in procs:
            stop(proc)
        redis.close()
    load_after = load()
    stats: Stats = res["stats"]
    every = [x for lat in stats.lat for x in lat]
    ms = lambda v: f"{v / 1e6:.1f}"  # noqa: E731
    fanout = "every listener (broadcast)" if args.topics == 1 else f"{args.listeners // args.topics} listeners"
    rows = []
    for i, lat in enumerate(stats.lat):
        idle, listening, after, closed = res["rss"][i]
        rows.append([f"instance {i}" + (" (publishes)" if i == 0 else ""), str(len(lat)),
                     ms(pct(lat, 50)) if lat else "-", ms(pct(lat, 99)) if lat else "-",
                     ms(max(lat)) if lat else "-", f"{idle:.1f}", f"{listening:.1f}", f"{after:.1f}",
                     f"{closed:.1f}", f"{res['cpu_instances'][i]:.2f}"])
    rows.append(["all", str(len(every)), ms(pct(every, 50)) if every else "-",
                 ms(pct(every, 99)) if every else "-", ms(max(every)) if every else "-",
                 f"{sum(r[0] for r in res['rss']):.1f}", f"{sum(r[1] for r in res['rss']):.1f}",
                 f"{sum(r[2] for r in res['rss']):.1f}", f"{sum(r[3] for r in res['rss']):.1f}",
                 f"{sum(res['cpu_instances']):.2f}"])
    span_ok = res["span_s"] == res["span_s"] and res["span_s"] > 0
    rate = len(every) / res["span_s"] if span_ok else 0
    events_rate = args.events / res["span_s"] if span_ok else 0
    per_listen = sum(r[1] - r[0] for r in res["rss"]) * 1024 / args.listeners  # KiB
    cpu_per = sum(res["cpu_instances"]) / len(every) * 1e6 if every else float("nan")  # us
    paced = f"paced at {args.rate:g}/s" if args.rate else "all at once"
    who = "nimblemcp" if args.server == "nimblemcp" else "the official SDK (mcp 2.3.0), one instance"
    out = (f"{who}: {args.listeners} listen streams over {args.instances} instances sharing Redis; "
           f"{args.events} resource-updated events from instance 0 ({paced}), each reaching {fanout}; "
           f"{os.cpu_count()} cores; {load_before} before, {load_after} after.\n\n"
           + table(["listeners on", "deliveries", "p50 ms", "p99 ms", "max ms", "RSS idle MiB",
                    "RSS listening MiB", "RSS after burst MiB", "RSS closed MiB", "CPU s in burst"], rows)
           + f"\n\nDelivered {len(every)} of {res['want']} ({len(every) / res['want']:.1%}); burst span "
           f"(first publish to last receipt) {res['span_s']:.2f} s: {events_rate:,.1f} events/s, "
           f"{rate:,.0f} deliveries/s, {cpu_per:.1f} us of instance CPU per delivery; each open listen "
           f"{per_listen:.1f} KiB of RSS. Opening the "
           f"{args.listeners} listens took {res['connect_s']:.2f} s. CPU during the burst: instances "
           f"{sum(res['cpu_instances']):.2f} s, Redis {res['cpu_redis']:.2f} s, client {res['cpu_client']:.2f} s.")
    if res["failed"]:
        out += f"\n\nProblems: {res['failed']}"
    say(out)
    save(args.name, out, {"args": vars(args), "load_before": load_before, "load_after": load_after,
                          "expected": res["want"], "delivered": len(every), "span_s": res["span_s"],
                          "connect_s": res["connect_s"], "rss_idle_listening_after_closed": res["rss"],
                          "cpu_instances": res["cpu_instances"], "cpu_redis": res["cpu_redis"],
                          "cpu_client": res["cpu_client"], "server": args.server,
                          "events_per_s": events_rate, "deliveries_per_s": rate,
                          "kib_per_listen": per_listen, "cpu_us_per_delivery": cpu_per,
                          "latency_ms": {"p50": pct(every, 50) / 1e6 if every else None,
                                         "p99": pct(every, 99) / 1e6 if every else None,
                                         "max": max(every) / 1e6 if every else None},
                          "per_instance_latency_ms": [
                              {"deliveries": len(lat), "p50": pct(lat, 50) / 1e6 if lat else None,
                               "p99": pct(lat, 99) / 1e6 if lat else None} for lat in stats.lat],
                          "problems": res["failed"]})


if __name__ == "__main__":
    main()
