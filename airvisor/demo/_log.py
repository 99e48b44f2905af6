"""Log lines in the shape prime-rl's loguru setup prints them, ANSI colours on.

prime-rl formats `<dim>{time:HH:mm:ss}</dim> <level>{level: >7}</level> <level>{message}</level>`
with `colorize=True`, so its log files carry escape codes; the supervisor must strip them before
parsing, and the stand-ins reproduce that. Every line is flushed at once: the supervisor reads the
log file while the process runs.
"""

from __future__ import annotations

import sys
import time
from typing import Literal, TextIO

Level = Literal["DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR"]

RESET = "\x1b[0m"
NO_BOLD = "\x1b[22m"
DIM = "\x1b[2m"
# loguru's default level styles.
LEVEL_STYLE: dict[Level, str] = {
    "DEBUG": "\x1b[34m\x1b[1m",
    "INFO": "\x1b[1m",
    "SUCCESS": "\x1b[32m\x1b[1m",
    "WARNING": "\x1b[33m\x1b[1m",
    "ERROR": "\x1b[31m\x1b[1m",
}


def format_line(level: Level, message: str, *, now: float) -> str:
    style = LEVEL_STYLE[level]
    clock = time.strftime("%H:%M:%S", time.localtime(now))
    return f"{DIM}{clock}{RESET} {style}{level:>7}{RESET} {style}{NO_BOLD}{message}{RESET}{RESET}"


class StandinLogger:
    """Writes loguru-like lines to a stream (stdout), or nothing when `enabled` is false."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self._stream = stream if stream is not None else sys.stdout
        self._enabled = enabled

    def log(self, level: Level, message: str) -> None:
        if not self._enabled:
            return
        self._stream.write(format_line(level, message, now=time.time()) + "\n")
        self._stream.flush()

    def info(self, message: str) -> None:
        self.log("INFO", message)

    def success(self, message: str) -> None:
        self.log("SUCCESS", message)

    def warning(self, message: str) -> None:
        self.log("WARNING", message)

    def error(self, message: str) -> None:
        self.log("ERROR", message)
