"""Signals and exits shared by the stand-ins."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType

SIGTERM_EXIT = 128 + signal.SIGTERM  # 143, what a shell reports for a SIGTERM death


class Terminated(BaseException):
    """Raised by SIGTERM/SIGINT in the main thread; BaseException: `except Exception` misses it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def install_termination_handlers(*, ignore_sigterm: bool, on_ignored: Callable[[], None]) -> None:
    """SIGTERM and SIGINT raise Terminated, unless SIGTERM is to be ignored (a fault injection).

    An ignoring process ignores every SIGTERM it gets, like a process with SIG_IGN; `on_ignored`
    runs each time (it records the fault and says so in the log).
    """

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if ignore_sigterm:
            on_ignored()
            return
        raise Terminated(signum)

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, on_sigint)


def print_exception_line(kind: str, message: str) -> None:
    """The last line of a Python traceback, on stderr, as a crashing prime-rl process prints it."""
    sys.stderr.write(f"{kind}: {message}\n")
    sys.stderr.flush()


def set_title(title: str) -> None:
    """The process title, as prime-rl main's `set_proc_title` sets it (`PRIME-RL::<Name>`,
    utils/process.py:47-55)."""
    import setproctitle

    setproctitle.setproctitle(title)
