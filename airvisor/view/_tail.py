"""Reading component log files: the last N lines, and following a file as it grows.

The one log reader of `airvisor logs` (with and without a daemon: the API's log endpoint uses
it too) and of the run page.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from airvisor._logfile import LogTail, tail_lines
from airvisor.store import RunRecord, Store
from airvisor.view._logfiles import find_log, log_files

POLL_SECONDS = 0.25  # a followed log is read this often
RECHECK_SECONDS = 1.0  # and its run's record (ended? restarted?) this often


class LogStream:
    """A component's log as `airvisor logs` shows it, with and without a daemon: its last lines,
    then (followed) what is appended until the run ends. Following the current attempt moves
    on to the next attempt's log when the run restarts, with a marker line, so `logs -f`
    survives a recovery; an explicit attempt is followed as it is.

    `poll()` never blocks: the API's async stream and the CLI's loop both drive it.
    """

    def __init__(self, store: Store, run: RunRecord, component: str, *, tail: int,
                 attempt: int | None = None, recheck: float = RECHECK_SECONDS) -> None:
        path = find_log(store, run, component, attempt)  # LogNotFound
        try:
            self.first, end = tail_lines(path, tail)
        except FileNotFoundError:
            self.first, end = [], 0
        self.store = store
        self.run_id = run.id
        self.component = component
        self.attempt = run.attempt if attempt is None else attempt
        self.switch_attempts = attempt is None
        self.recheck = recheck
        self.follower = LogTail(path, offset=end)
        self._next_check = 0.0  # the first poll asks the store at once

    def poll(self) -> tuple[list[str], bool]:
        """What was appended since (lines with their newlines), and whether the stream has
        ended (the run did). Reads the run's record at most every `recheck` seconds."""
        lines = self.follower.read_new_lines(keepends=True)
        if lines:
            return lines, False
        now = time.monotonic()
        if now < self._next_check:
            return [], False
        self._next_check = now + self.recheck
        run = self.store.get_run(self.run_id)
        if run is None or not run.live:
            return self.follower.rest(), True
        if self.switch_attempts and run.attempt != self.attempt:
            newer = log_files(self.store, run)
            if self.component in newer:
                lines = [*self.follower.rest(), f"--- airvisor: attempt {run.attempt} ---\n"]
                self.attempt = run.attempt
                self.follower = LogTail(newer[self.component])
                return lines, False
        return [], False

    def lines(self, *, follow: bool, poll: float = POLL_SECONDS) -> Iterator[str]:
        """The stream as lines (with their newlines), for a synchronous reader."""
        yield from self.first
        while follow:
            lines, ended = self.poll()
            yield from lines
            if ended:
                return
            if not lines:
                time.sleep(poll)
