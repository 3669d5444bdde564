"""stdio round trip: one long-lived process per server, sequential `tools/call echo`.

    python benchmarks/stdio_roundtrip.py [--calls 3000] [--rounds 10]
    python benchmarks/stdio_roundtrip.py --callgrind [--calls 2000]
    python benchmarks/stdio_roundtrip.py --no-peers --also main=/path/to/python
    python benchmarks/stdio_roundtrip.py --no-peers --against /other/checkout/src   # A/B

`--no-peers` leaves out mcp and fastmcp (no peers' venv needed; no "vs mcp" column).
`--also LABEL=PY` adds a row `nimblemcp@LABEL`: the sync echo served by interpreter PY
(another tree's venv), interleaved with the others: an A/B of the sync tool's hop.
`--against SRC` adds the three nimblemcp rows again as `...@against`, served from
another checkout's `src/` (first on `PYTHONPATH`, same interpreter): an A/B of two
trees in one interleaved run.

Every server gets the same 2026-07-28 `tools/call` body (all three speak it on
stdio); a peer that rejected `server/discover` would get an `initialize` handshake
first, and the output says so. Calls are sent one at a time (send, wait for the
response, send the next) in interleaved rounds: each round runs calls/rounds calls
on every server in rotated order. Per-call latency is client-observed wall time.

`--callgrind`: instead, nimblemcp's servers (sync, async and inline echo) run one at a
time under `valgrind --tool=callgrind` (PYTHONHASHSEED=0), are warmed up, their counters
zeroed, and `--calls` sequential calls counted: instructions per call, server side
(stable on a busy box, unlike time). `NIMBLE_PY` picks the interpreter.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import tempfile
import time

from _common import (
    INITIALIZED,
    NIMBLE_PY,
    SERVERS,
    call_request,
    discover_request,
    ensure_peers,
    initialize_request,
    line,
    median,
    pct,
    save,
    say,
    spawn,
    stdio_commands,
    table,
)


class Conn:
    def __init__(self, name: str, argv: list[str], src: str | None = None) -> None:
        self.name = name
        self.proc = spawn(argv, name, src)
        self.next_id = 1
        self.wire = "2026-07-28"
        reply = self.request(discover_request(self._id()))
        if "error" in reply:
            self.wire = "2025-11-25 (initialize fallback)"
            reply = self.request(initialize_request(self._id()))
            self.send(INITIALIZED)
        # Pre-encode nothing per server: each call is encoded the same way for all.

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def send(self, msg: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line(msg))
        self.proc.stdin.flush()

    def request(self, msg: dict) -> dict:
        self.send(msg)
        assert self.proc.stdout is not None
        while True:
            raw = self.proc.stdout.readline()
            if not raw:
                raise RuntimeError(f"{self.name} closed stdout")
            try:
                reply = json.loads(raw)
            except ValueError:
                continue
            if reply.get("id") == msg["id"]:
                return reply

    def call_batch(self, n: int, out: list[float]) -> None:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        for _ in range(n):
            data = line(call_request(self._id()))
            t0 = time.perf_counter()
            stdin.write(data)
            stdin.flush()
            raw = stdout.readline()
            out.append(time.perf_counter() - t0)
            if b'"result"' not in raw or b"hello" not in raw:
                raise RuntimeError(f"{self.name}: unexpected reply {raw[:300]!r}")

    def close(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def callgrind(calls: int, warmup: int) -> None:
    rows = []
    for name, script in (("nimblemcp", "nimble_server.py"), ("nimblemcp-async", "nimble_async_server.py"),
                         ("nimblemcp-inline", "nimble_inline_server.py")):
        out = os.path.join(tempfile.mkdtemp(prefix="cg-"), "callgrind.out")
        conn = Conn.__new__(Conn)
        conn.name, conn.next_id, conn.wire = name, 1, "2026-07-28"
        env = dict(os.environ, PYTHONHASHSEED="0")
        env.pop("PYTHONPATH", None)
        conn.proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", NIMBLE_PY,
                                      str(SERVERS / script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=str(SERVERS), bufsize=0)
        try:
            conn.request(discover_request(conn._id()))
            conn.call_batch(warmup, [])
            subprocess.run(["callgrind_control", "-z", str(conn.proc.pid)], check=True, stdout=subprocess.DEVNULL)
            conn.call_batch(calls, [])
            subprocess.run(["callgrind_control", "-d", str(conn.proc.pid)], check=True, stdout=subprocess.DEVNULL)
        finally:
            conn.close()
        dump = sorted(glob.glob(out + ".*"))[0]
        with open(dump) as f:
            total = next(int(ln.split()[1]) for ln in f if ln.startswith(("totals:", "summary:")))
        shutil.rmtree(os.path.dirname(out), ignore_errors=True)
        say(f"{name}: {total / calls:,.0f} instructions/call")
        rows.append([name, f"{total / calls:,.0f}"])
    say(f"stdio, sequential tools/call echo under callgrind ({calls} calls after {warmup})\n\n"
        + table(["server", "instructions/call"], rows))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=3000, help="measured calls per server")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--callgrind", action="store_true", help="instructions per call of nimblemcp's servers")
    ap.add_argument("--no-peers", action="store_true", help="nimblemcp's servers only")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=PY",
                    help="the sync echo on another interpreter too (repeatable)")
    ap.add_argument("--against", metavar="SRC", help="nimblemcp's rows again from another checkout's src/")
    args = ap.parse_args()
    if args.callgrind:
        callgrind(args.calls, min(args.warmup, 200))
        return
    if not args.no_peers:
        ensure_peers()
    cmds = stdio_commands()
    cmds.pop("nimblemcp-cli")  # same process after start-up as the direct run
    if args.no_peers:
        del cmds["mcp"], cmds["fastmcp"]
    for also in args.also:
        label, _, py = also.partition("=")
        cmds[f"nimblemcp@{label}"] = [py, str(SERVERS / "nimble_server.py")]
    # async def echo: isolates the per-call thread hop nimblemcp pays for a sync tool
    cmds["nimblemcp-async"] = [NIMBLE_PY, str(SERVERS / "nimble_async_server.py")]
    cmds["nimblemcp-inline"] = [NIMBLE_PY, str(SERVERS / "nimble_inline_server.py")]
    conns = [Conn(n, a) for n, a in cmds.items()]
    if args.against:
        other = os.path.abspath(args.against)
        conns += [Conn(f"{n}@against", a, other) for n, a in cmds.items() if n.startswith("nimblemcp")
                  and "@" not in n]
    try:
        lat: dict[str, list[float]] = {c.name: [] for c in conns}
        for c in conns:
            c.call_batch(args.warmup, [])
        per_round = args.calls // args.rounds
        for r in range(args.rounds):
            for c in conns[r % len(conns):] + conns[:r % len(conns)]:
                c.call_batch(per_round, lat[c.name])
    finally:
        for c in conns:
            c.close()
    ref = median(lat["mcp"]) if "mcp" in lat else float("nan")
    rows, data = [], {}
    for c in conns:
        v = lat[c.name]
        m, p99 = median(v), pct(v, 99)
        data[c.name] = {"median_us": m * 1e6, "p99_us": p99 * 1e6, "calls": len(v),
                        "calls_per_s": len(v) / sum(v), "wire": c.wire}
        rows.append([c.name, f"{m * 1e6:.0f}", f"{p99 * 1e6:.0f}", f"{len(v) / sum(v):.0f}",
                     f"{ref / m:.2f}x" if ref == ref else "-", c.wire])
    out = (f"stdio round trip, sequential tools/call echo ({args.calls} calls per server, "
           f"{args.rounds} interleaved rounds, {args.warmup} warm-up)\n\n"
           + table(["server", "median us", "p99 us", "calls/s", "speed vs mcp", "wire"], rows)
           + (f"\n\nnimblemcp vs mcp (median): {ref / median(lat['nimblemcp']):.2f}x (target >= 2.5x)"
              if "mcp" in lat else ""))
    say(out)
    save("stdio_roundtrip", out, {"calls": args.calls, "rounds": args.rounds, "results": data})


if __name__ == "__main__":
    main()
