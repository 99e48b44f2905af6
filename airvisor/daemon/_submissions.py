"""The submissions a daemon is working on, and those it refused, by request id.

A run that a submission created is in the store (its `request_id` column, unique): that is the
record that lasts. What is kept here, in memory, is what has no run: a submission still being
checked (the profile's preflight may take long; a client that timed out asks about it) and the
answer to one that was refused. A daemon that restarts has neither, and rightly: a submission
it was checking died with it, and created nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

# Refusals remembered (oldest forgotten first): enough for any client still asking.
KEEP_REFUSED = 1000


@dataclass(frozen=True)
class Refusal:
    status: int
    detail: str


@dataclass(frozen=True)
class Known:
    """What this daemon knows of a request id apart from the store."""

    state: Literal["in_progress", "refused"]
    refusal: Refusal | None = None


class Submissions:
    def __init__(self, keep_refused: int = KEEP_REFUSED) -> None:
        self._lock = threading.Lock()
        self._in_progress: set[str] = set()
        self._refused: OrderedDict[str, Refusal] = OrderedDict()
        self._keep_refused = keep_refused

    def begin(self, request_id: str) -> bool:
        """Mark it in progress; False when it already is (the same request twice at once).
        An earlier refusal is forgotten: it created nothing, so trying again is a new try."""
        with self._lock:
            if request_id in self._in_progress:
                return False
            self._in_progress.add(request_id)
            self._refused.pop(request_id, None)
            return True

    def end(self, request_id: str, refusal: Refusal | None = None) -> None:
        """It is done: its run is in the store, or (with `refusal`) it was refused. One step,
        so a lookup never finds it neither in progress nor ended."""
        with self._lock:
            self._in_progress.discard(request_id)
            if refusal is not None:
                self._refused[request_id] = refusal
                while len(self._refused) > self._keep_refused:
                    self._refused.popitem(last=False)

    def known(self, request_id: str) -> Known | None:
        with self._lock:
            if request_id in self._in_progress:
                return Known("in_progress")
            refusal = self._refused.get(request_id)
        return None if refusal is None else Known("refused", refusal)
