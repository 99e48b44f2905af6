"""Following a run in the terminal: its events as lines, and on a terminal one progress line
kept below them (rich's Live display). The same for a foreground `start` (read from the store)
and `start --follow` (read from the daemon's API)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rich.console import Console
from rich.live import Live
from rich.text import Text

from airvisor.store import Store
from airvisor.view._model import EventView, RunView, build_run_view, event_view
from airvisor.view._render import event_detail, event_line, progress_line

REFRESH_SECONDS = 0.25
# Without a terminal, the progress line between state changes: at most once a minute.
PIPE_PROGRESS_SECONDS = 60.0


class RunSource(Protocol):
    """Where a followed run is read from."""

    def events_after(self, after: int) -> list[EventView]: ...

    def run(self) -> RunView | None: ...


class StoreSource:
    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id

    def events_after(self, after: int) -> list[EventView]:
        return [event_view(e) for e in self.store.events(self.run_id, after_id=after)]

    def run(self) -> RunView | None:
        record = self.store.get_run(self.run_id)
        return None if record is None else build_run_view(self.store, record)


class ApiSource:
    """A run the daemon supervises, through airvisor.daemon.DaemonClient."""

    def __init__(self, client: Any, run_id: str) -> None:
        self.client = client
        self.run_id = run_id

    def events_after(self, after: int) -> list[EventView]:
        return [EventView.model_validate(e) for e in self.client.events(self.run_id, after)]

    def run(self) -> RunView | None:
        return RunView.model_validate(self.client.get_run(self.run_id))


@dataclass(frozen=True)
class Shown:
    """The progress line as last printed without a terminal, and when."""

    state: str
    attempt: int
    text: str
    at: float


def pipe_progress_due(shown: Shown | None, run: RunView, text: str, now: float,
                      every: float) -> bool:
    """Whether a view without a terminal (a pipe, a file) prints the progress line now: from
    the first step on, at once when the run's state or attempt changed, else when the line
    changed and `every` seconds have passed since it was last printed (a step a second would
    otherwise fill a log file with one line a second)."""
    if run.step is None:
        return False
    if shown is None or (shown.state, shown.attempt) != (run.state, run.attempt):
        return True
    return text != shown.text and now - shown.at >= every


class ProgressView:
    """Events as lines; on a terminal also the progress line, redrawn in place.

    Without a terminal (a log file, a pipe) milestones are left out, no line is wrapped
    (a long message stays one line, whatever the width rich guesses), and the progress line is
    printed as a line of its own only when `pipe_progress_due` says so.
    """

    def __init__(self, source: RunSource, *, live: bool, console: Console | None = None,
                 progress_every: float = PIPE_PROGRESS_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.console = console or Console(highlight=False)
        self.live = live
        self.progress_every = progress_every
        self._clock = clock
        self._display: Live | None = None
        self._last_event = 0
        self._shown: Shown | None = None
        self._next = 0.0

    def _print(self, text: Text) -> None:
        # On a terminal rich wraps at its width; elsewhere a line is a line (soft_wrap).
        self.console.print(text, soft_wrap=not self.live)

    def note(self, text: str) -> None:
        self._print(Text(f"{time.strftime('%H:%M:%S')} {text}"))

    def refresh(self, *, final: bool = False) -> RunView | None:
        """Print new events and redraw the progress line (at most every REFRESH_SECONDS,
        unless `final`); the run as last read, or None when unchanged or unknown."""
        now = self._clock()
        if not final and now < self._next:
            return None
        self._next = now + REFRESH_SECONDS
        for event in self.source.events_after(self._last_event):
            self._last_event = max(self._last_event, event.id)
            if event.kind == "milestone" and not self.live:
                continue
            self._print(event_line(event))
            for line in event_detail(event):
                self._print(line)
        run = self.source.run()
        if run is None:
            return None
        status = progress_line(run)
        if self.live and not final:
            if self._display is None:
                self._display = Live(status, console=self.console, auto_refresh=False,
                                     transient=True)
                self._display.start()
            self._display.update(status, refresh=True)
        elif not self.live and pipe_progress_due(self._shown, run, status.plain, now,
                                                 self.progress_every):
            self._print(Text(f"{time.strftime('%H:%M:%S')} ") + status)
            self._shown = Shown(run.state, run.attempt, status.plain, now)
        if final:
            self.close()
        return run

    def close(self) -> None:
        """Take the progress line away (the terminal is left as the events made it)."""
        if self._display is not None:
            self._display.stop()
            self._display = None
