"""JSON-lines log records for `nimblemcp run --log-format json` (one object a line:
time, level, logger, message, and the exception when there is one). Stdlib only."""

from __future__ import annotations

import json
import logging
import time

__all__ = ["JsonFormatter"]


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False)
