"""Logging under the ``axon`` logger, a JSON formatter, and an access log that is off by default.

Terminal logging alone halved a server's throughput in one of our seeds (seed 001), so the access
log is opt-in and, when on, costs one ``isEnabledFor`` check and one record per response.
"""

from __future__ import annotations

import json
import logging
import sys
import time

logger = logging.getLogger("axon")
access_logger = logging.getLogger("axon.access")
# Off unless asked for, whatever the root logger's level: an application's
# logging.basicConfig(level=INFO) must not turn on a line per response.
access_logger.setLevel(logging.WARNING)


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and any ``extra`` fields."""

    _standard = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in self._standard:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure(level: str = "warning", *, json_format: bool = False, access_log: bool = False) -> None:
    """Set up the ``axon`` loggers for a command-line run (libraries leave this to the user)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if json_format else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
    access_logger.setLevel(logging.INFO if access_log else logging.WARNING)
    if access_log:
        access_handler = logging.StreamHandler(sys.stdout)
        access_handler.setFormatter(JSONFormatter() if json_format else logging.Formatter("%(message)s"))
        access_logger.handlers[:] = [access_handler]
        access_logger.propagate = False
