"""The chaos run's server (benchmarks/chaos.py): three of these run behind nginx, sharing
Redis (`NIMBLEMCP_REDIS_URL`, through a TCP proxy per instance that the run can cut).

- `echo`: idempotent (`idempotentHint`), so the client may re-send it.
- `charge(op)`: not idempotent: its side effect is one Redis transaction that counts the
  executions of `op` (`chaos:exec:<op>`) and notes who ran it (`chaos:who:<op>`:
  instance, pid, JSON-RPC id). Its own Redis client never retries, so a count above 1
  can only come from the request itself running twice.
- `wizard`: two MRTR rounds (two elicitations), then the answers.
- `job(seconds)`: a task (tasks extension) that sleeps; leases of 4 s (heartbeat 1 s).
"""

import asyncio
import os

import nimblemcp as m

INSTANCE = os.environ.get("INSTANCE", "?")
server = m.Server("chaos", "1.0.0", task_options=m.TaskOptions(lease=4.0, heartbeat=1.0))
ANSWER = {"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]}
_counter = None


@server.tool(annotations=m.ToolAnnotations(idempotentHint=True))
def echo(text: str) -> str:
    return text


@server.tool(annotations=m.ToolAnnotations(idempotentHint=False))
async def charge(op: str, ctx: m.Context) -> int:
    global _counter
    if _counter is None:
        import redis.asyncio
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        _counter = redis.asyncio.Redis.from_url(os.environ["NIMBLEMCP_REDIS_URL"], retry=Retry(NoBackoff(), 0),
                                                socket_connect_timeout=2.0, socket_timeout=5.0)
    pipe = _counter.pipeline(transaction=True)
    pipe.incr(f"chaos:exec:{op}")
    pipe.rpush(f"chaos:who:{op}", f"{INSTANCE}:{os.getpid()}:{ctx.request_id}")
    pipe.expire(f"chaos:exec:{op}", 7200)
    pipe.expire(f"chaos:who:{op}", 7200)
    count, *_ = await pipe.execute()
    return int(count)


@server.tool(annotations=m.ToolAnnotations(idempotentHint=True))
async def wizard(ctx: m.Context) -> str:
    first = await ctx.elicit("first", "First?", ANSWER)
    second = await ctx.elicit("second", "Second?", ANSWER)
    return f"{first.content['v']}+{second.content['v']}"


@server.tool(task="required")
async def job(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return f"done on {INSTANCE}"


@server.resource("chaos://events")
def events() -> str:
    return "the chaos run's listen topic"
