"""Structured logging: one logfmt line per event.

    ts=2026-11-21T17:00:00.123Z level=INFO logger=pybroker.log msg="rolled segment" topic=t partition=0

Extra fields come from ``logger.info("msg", extra={"fields": {...}})`` or ``event(logger, msg,
**fields)``. Values are quoted when they hold spaces, quotes, '=' or nothing; newlines are
escaped so a traceback stays on its line (``exc="..."``). A field named like a built-in key
(ts, level, logger, msg, exc) is written with a leading underscore.
"""
import logging
import sys
import time

LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "WARNING": logging.WARNING, "ERROR": logging.ERROR}
_RESERVED = ("ts", "level", "logger", "msg", "exc")
_MARK = "_pybroker_handler"


def quote(value) -> str:
    """A logfmt value: bare when safe, otherwise double-quoted with \\ " and control chars escaped."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    text = str(value)
    if text and all(c > " " and c not in '"=\\' and c != "\x7f" for c in text):
        return text
    escaped = (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
               .replace("\r", "\\r").replace("\t", "\\t"))
    return f'"{escaped}"'


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ms = int(record.msecs)
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{ms:03d}Z"
        text = record.getMessage()
        msg = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
        parts = [f"ts={ts}", f"level={record.levelname}", f"logger={quote(record.name)}", f'msg="{msg}"']
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                key = str(key).replace(" ", "_").replace("=", "_") or "_"
                parts.append(f"{'_' + key if key in _RESERVED else key}={quote(value)}")
        if record.exc_info:
            parts.append(f"exc={quote(self.formatException(record.exc_info))}")
        elif record.stack_info:
            parts.append(f"exc={quote(record.stack_info)}")
        return " ".join(parts)


def setup_logging(level: str = "INFO", stream=None) -> logging.Handler:
    """Send every log record (root logger) to ``stream`` (default stderr) as logfmt; idempotent."""
    numeric = LEVELS.get(str(level).upper())
    if numeric is None:
        raise ValueError(f"log level {level!r}: expected one of DEBUG, INFO, WARNING, ERROR")
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    setattr(handler, _MARK, True)
    handler.setFormatter(LogfmtFormatter())
    root.addHandler(handler)
    root.setLevel(numeric)
    return handler


def event(logger: logging.Logger, msg: str, /, level: int = logging.INFO, **fields) -> None:
    """Log ``msg`` with ``fields`` as logfmt key=value pairs."""
    if logger.isEnabledFor(level):
        logger.log(level, msg, extra={"fields": fields}, stacklevel=2)
