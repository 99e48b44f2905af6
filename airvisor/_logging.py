"""airvisor's own logs, through structlog: readable on a terminal, JSON lines when asked, and
journald-native under systemd.

Under systemd (stderr is the journal stream named by $JOURNAL_STREAM) each line starts with a
syslog priority prefix `<N>`, which journald turns into the entry's PRIORITY (its default
SyslogLevelPrefix=yes), so `journalctl -p warning -u airvisor` shows warnings and errors.
journald stamps every entry itself, so no timestamp is written; key=value fields stay in the
message, fields whose value is None are left out. (The stdlib-only way: the libsystemd bindings,
systemd-python / cysystemd, are C extensions that need libsystemd headers or a binary wheel, for
what a prefix already gives.)
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

import structlog

JOURNAL_STREAM_ENV = "JOURNAL_STREAM"
# syslog(3) priorities, which journald reads from the `<N>` prefix.
SYSLOG_PRIORITY = {
    "critical": 2,
    "exception": 3,
    "error": 3,
    "warning": 4,
    "warn": 4,
    "notice": 5,
    "info": 6,
    "debug": 7,
}


def is_journal_stream(env: Mapping[str, str], stream_dev_ino: tuple[int, int] | None) -> bool:
    """True when the stream whose (st_dev, st_ino) is given is the journal stream systemd
    connected (JOURNAL_STREAM="DEV:INODE"), as sd_journal_stream_fd(3) advises: a child whose
    stderr was redirected elsewhere inherits the variable but not the stream."""
    raw = env.get(JOURNAL_STREAM_ENV, "")
    if stream_dev_ino is None or ":" not in raw:
        return False
    dev, _, ino = raw.partition(":")
    try:
        return (int(dev), int(ino)) == stream_dev_ino
    except ValueError:
        return False


def _stderr_dev_ino() -> tuple[int, int] | None:
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return st.st_dev, st.st_ino


def drop_none(_logger: Any, _name: str, event_dict: MutableMapping[str, Any]
              ) -> MutableMapping[str, Any]:
    """Fields without a value (component=None) are noise in a log line."""
    for key in [k for k, v in event_dict.items() if v is None]:
        del event_dict[key]
    return event_dict


def journal_line(level: str, text: str) -> str:
    """`<N>text`, with the prefix on every line, so a traceback keeps its priority."""
    priority = SYSLOG_PRIORITY.get(level, 6)
    return "\n".join(f"<{priority}>{line}" for line in text.split("\n"))


class JournalRenderer:
    """ConsoleRenderer without colours, timestamp or level column (the prefix carries it)."""

    def __init__(self) -> None:
        # No padding of the event column; the argument was renamed in structlog 25.
        params = inspect.signature(structlog.dev.ConsoleRenderer).parameters
        pad: dict[str, Any] = {"pad_event_to" if "pad_event_to" in params else "pad_event": 0}
        self._console = structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback, **pad)

    def __call__(self, logger: Any, name: str, event_dict: MutableMapping[str, Any]) -> str:
        level = str(event_dict.pop("level", "info"))
        event_dict.pop("timestamp", None)
        rendered = self._console(logger, name, event_dict)
        return journal_line(level, str(rendered).rstrip("\n"))


def drop_run_events(_logger: Any, _name: str, event_dict: MutableMapping[str, Any]
                    ) -> MutableMapping[str, Any]:
    """A run's event (its log line carries `run` and `kind`: the supervisors log each event
    they record in the store) is left to the view that prints the run's events, so a warning
    is not shown twice (once here, once as the view's line)."""
    if "run" in event_dict and "kind" in event_dict:
        raise structlog.DropEvent
    return event_dict


def configure_logging(*, json_format: bool = False, verbose: bool = False,
                      quiet: bool = False, env: Mapping[str, str] | None = None) -> None:
    """`quiet` (a foreground `start`, whose view prints every event of the run) keeps only
    warnings, and of those only airvisor's own, not the run's events."""
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    env = os.environ if env is None else env
    processors: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
    ]
    if quiet:
        processors.append(drop_run_events)
    if json_format:
        processors += [structlog.processors.TimeStamper(fmt="iso", utc=True),
                       structlog.processors.JSONRenderer()]
    elif is_journal_stream(env, _stderr_dev_ino()):
        processors += [drop_none, JournalRenderer()]
    else:
        processors += [structlog.processors.TimeStamper(fmt="iso", utc=True),
                       structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
