from nimblemcp.server._workers import _workers
_workers.max_workers = 1
from nimble_server import *  # noqa
