import collections, signal
from nimble_server import server
from nimblemcp.server import _workers as W
hist = collections.Counter()
orig = W._Inbox.drain
def drain(self):
    hist[len(self.items)] += 1
    orig(self)
W._Inbox.drain = drain
def dump(*a):
    tot = sum(hist.values()); items = sum(k*v for k,v in hist.items())
    with open("/tmp/prof/wk.txt","w") as f:
        f.write(f"drains={tot} items={items} avg={items/max(tot,1):.1f} threads={W._workers.threads}\n")
        f.write(" ".join(f"{k}:{v}" for k,v in sorted(hist.items())[:40]) + "\n")
def http_app():
    from nimblemcp.transports.http import asgi_app
    signal.signal(signal.SIGUSR1, dump)
    return asgi_app(server, path="/mcp", freeze_gc=True)
