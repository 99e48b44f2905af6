"""airvisor's own logs, through structlog: readable on a terminal, JSON lines when asked."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(*, json_format: bool = False, verbose: bool = False,
                      quiet: bool = False) -> None:
    """`quiet` keeps only warnings: the foreground view already shows every event."""
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if json_format
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
