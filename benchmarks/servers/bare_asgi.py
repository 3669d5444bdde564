"""The ceiling: a bare ASGI app that reads the body and returns a canned tools/call result.

    uvicorn bare_asgi:http_app --factory ...   # the `bare-asgi` row of http_throughput.py
    python bare_asgi.py PORT                   # the same app on nimblemcp's own engine (`bare-asgi-engine`)
"""

import sys

BODY = (b'{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete",'
        b'"content":[{"type":"text","text":"hello"}],"isError":false}}')
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:
        msg = await receive()
        more = msg.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


def http_app():
    return app


if __name__ == "__main__":
    from nimblemcp.transports.h1.engine_server import EngineConfig, run

    try:  # on uvloop when it is installed, as `nimblemcp run --engine nimblemcp` serves
        import uvloop
    except ImportError:
        uvloop = None
    run(app, EngineConfig(port=int(sys.argv[1])), loop_factory=uvloop.new_event_loop if uvloop else None)
