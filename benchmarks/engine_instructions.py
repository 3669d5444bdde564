"""Instructions per request of an HTTP server, counted by callgrind: stable on a busy box.

    python benchmarks/engine_instructions.py [--requests 2048] [--connections 16] [--only NAME ...]
                                             [--keep DIR]

The servers run on `NIMBLE_PY` (default benchmarks/.venv-nimble; point it at a 3.12
venv to count there). `--keep DIR` keeps each server's callgrind dump for
`callgrind_annotate`.

Each server runs under `valgrind --tool=callgrind` from benchmarks/.venv-nimble. A client
outside valgrind (this process) warms it up, the counters are zeroed
(`callgrind_control -z`), then it sends `--requests` fixed `tools/call echo` POSTs (the
body and headers of http_throughput.py) over `--connections` keep-alive connections,
each sending its next request when the last answer is in, and the counters are dumped.
Instructions divided by requests is the server's cost per request: the engine, the app
and the event loop, without the kernel. Wall time under valgrind is ~50x, so the server
always has every connection's request waiting, as under wrk at 64 connections.

Rows: `bare-asgi-engine` (the bare app on nimblemcp's engine), `bare-asgi` (on uvicorn,
uvloop + httptools), `nimblemcp-run` (the guarded app, sync echo, on the engine),
`nimblemcp-run-async` and `nimblemcp-run-inline` (the same with an `async def` echo and
with the sync echo marked `run_in_thread=False`: what the thread hop costs).

The `nimblemcp-run*` servers start through a wrapper that first sets the transport's
`WATCH_DELAY` (seconds a request may run before its disconnect watcher starts; 20 ms in
the library) to `--watch-delay` (5 s by default), then runs `python -m nimblemcp`. Under
valgrind a request that waits for a worker thread often outlives 20 ms, so the sync row
counted watcher tasks, timers and their cancellation that a request served at native
speed (~1 ms under wrk at 64 connections) never starts: ±15k run to run. With the
watcher held off every row counts the same served path, and the sync row repeats.
`--watch-delay 0.02` counts with the library's own value. Only these benchmark
processes change it; the library's constant stays.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from _common import NIMBLE_PY, SERVERS, call_request, save, say, table
from http_throughput import BODY, HEADERS, free_port

# `python -m nimblemcp` with the transport's WATCH_DELAY set to argv[1] first: in every
# module that holds the name (http.py imports it from _http_exchange.py by value).
RUN_WATCHED = (
    "import runpy, sys\n"
    "delay = float(sys.argv.pop(1))\n"
    "import nimblemcp.transports.http.app\n"
    "held = [m for n, m in list(sys.modules.items()) if n.startswith('nimblemcp') and hasattr(m, 'WATCH_DELAY')]\n"
    "assert held, 'no WATCH_DELAY to set'\n"
    "for m in held:\n"
    "    m.WATCH_DELAY = delay\n"
    "sys.argv[0] = 'nimblemcp'\n"
    "runpy.run_module('nimblemcp', run_name='__main__', alter_sys=True)\n"
)
WATCH_DELAY = "<watch-delay>"  # the wrapper's first argument, replaced by --watch-delay's value

SERVERS_ARGV = {  # name -> argv without the port (appended last)
    "bare-asgi-engine": [NIMBLE_PY, str(SERVERS / "bare_asgi.py")],
    "bare-asgi": [NIMBLE_PY, "-c", "import sys, uvicorn; uvicorn.run('bare_asgi:http_app', factory=True, "
                  "loop='uvloop', http='httptools', access_log=False, log_level='warning', "
                  "port=int(sys.argv[1]))"],
    "nimblemcp-run": [NIMBLE_PY, "-c", RUN_WATCHED, WATCH_DELAY, "run", str(SERVERS / "nimble_server.py"), "--transport",
                      "http", "--log-level", "warning", "--engine", "nimblemcp", "--port"],
    # The same with an `async def` echo and with the sync echo run inline: the difference
    # to `nimblemcp-run` is what the worker-thread hop costs in user space.
    "nimblemcp-run-async": [NIMBLE_PY, "-c", RUN_WATCHED, WATCH_DELAY, "run", str(SERVERS / "nimble_async_server.py"),
                            "--transport", "http", "--log-level", "warning", "--engine", "nimblemcp", "--port"],
    "nimblemcp-run-inline": [NIMBLE_PY, "-c", RUN_WATCHED, WATCH_DELAY, "run", str(SERVERS / "nimble_inline_server.py"),
                             "--transport", "http", "--log-level", "warning", "--engine", "nimblemcp", "--port"],
}


def request(port: int) -> bytes:
    head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(BODY)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in HEADERS.items())
    return (head + "\r\n").encode() + BODY.encode()


def drive(port: int, total: int, conns: int) -> None:
    """`total` requests over `conns` connections, each in lock-step."""
    req = request(port)
    sel = selectors.DefaultSelector()
    left: dict[socket.socket, list[int | bytes]] = {}
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(req)
        s.setblocking(False)
        left[s] = [total // conns - 1, b""]
        sel.register(s, selectors.EVENT_READ)
    while sel.get_map():
        for key, _ in sel.select(timeout=120):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            data = s.recv(65536)
            if not data:
                raise RuntimeError("the server closed a connection")
            state = left[s]
            buf = state[1] + data  # type: ignore[operator]
            while (end := buf.find(b"\r\n\r\n")) >= 0:
                head = buf[:end].lower()
                if not head.startswith(b"http/1.1 200"):
                    raise RuntimeError(f"unexpected answer: {head[:200]!r}")
                at = head.index(b"content-length:") + 15
                size = int(head[at:head.find(b"\r\n", at) if b"\r\n" in head[at:] else None])
                if len(buf) < end + 4 + size:
                    break
                buf = buf[end + 4 + size:]
                if state[0]:
                    state[0] -= 1  # type: ignore[operator]
                    s.sendall(req)
                else:
                    sel.unregister(s)
                    s.close()
            state[1] = buf


def count(name: str, requests: int, conns: int, keep: str | None = None, watch_delay: float = 5.0) -> float:
    port = free_port()
    out = os.path.join(tempfile.mkdtemp(prefix="cg-"), "callgrind.out")
    env = dict(os.environ, PYTHONHASHSEED="0")
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                             *(repr(watch_delay) if a == WATCH_DELAY else a for a in SERVERS_ARGV[name]), str(port)], cwd=str(SERVERS), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 900  # a loaded box: valgrind starts slowly
        while True:
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start under valgrind") from None
                time.sleep(0.2)
        drive(port, max(256, conns * 8), conns)  # warm-up: caches, specialisation
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, stdout=subprocess.DEVNULL)
        drive(port, requests, conns)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, stdout=subprocess.DEVNULL)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
    dump = sorted(f for f in glob.glob(out + ".*"))[0]
    with open(dump) as f:
        total = next(int(ln.split()[1]) for ln in f if ln.startswith(("totals:", "summary:")))
    if keep is not None:  # for `callgrind_annotate` (PYTHONHASHSEED=0 makes runs comparable)
        os.makedirs(keep, exist_ok=True)
        shutil.copy(dump, os.path.join(keep, f"callgrind.{name}.out"))
    shutil.rmtree(os.path.dirname(out), ignore_errors=True)
    return total / requests


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2048)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--only", nargs="*", help="subset of " + ",".join(SERVERS_ARGV))
    ap.add_argument("--keep", metavar="DIR", help="copy each server's callgrind dump there")
    ap.add_argument("--watch-delay", type=float, default=5.0,
                    help="WATCH_DELAY for the nimblemcp-run* servers (library: 0.02; see the docstring)")
    args = ap.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: apt-get install -y valgrind")
    assert json.loads(BODY) == call_request(1)
    results = {}
    for name in SERVERS_ARGV:
        if not args.only or name in args.only:
            results[name] = count(name, args.requests, args.connections, args.keep, args.watch_delay)
            say(f"{name}: {results[name]:,.0f} instructions/request")
    out = (f"Instructions per tools/call echo request (callgrind, server only; {args.requests} requests over "
           f"{args.connections} keep-alive connections after a warm-up; WATCH_DELAY {args.watch_delay} s "
           f"for the nimblemcp-run rows)\n\n"
           + table(["server", "instructions/request"], [[n, f"{v:,.0f}"] for n, v in results.items()]))
    say(out)
    save("engine_instructions", out, {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
