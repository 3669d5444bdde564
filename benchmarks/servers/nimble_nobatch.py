from nimblemcp.server._workers import _workers
_workers.batch_wait = False
from nimble_server import *  # noqa
