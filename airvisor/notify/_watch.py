"""Reads the events table from a cursor and hands what needs a person to the Dispatcher.

The engine is not involved: it already records every event; this runs on the web background
thread. The cursor is stored, so a restarted daemon neither repeats nor skips notifications
(and the delivery rows' unique key guards against repeats as well).
"""

from __future__ import annotations

from collections.abc import Callable

from airvisor._logging import get_logger
from airvisor.notify._config import Target, run_targets
from airvisor.notify._decide import decide
from airvisor.notify._deliver import Dispatcher
from airvisor.notify._payload import json_payload
from airvisor.profile._schema import NotifySection
from airvisor.store import DeliveryStore, Store

log = get_logger("airvisor.notify")

CURSOR = "notify.events"
HISTORY = 60  # earlier events of a run that `decide` looks back on


class EventWatcher:
    def __init__(self, store: Store, dispatcher: Dispatcher,
                 default: Callable[[], NotifySection],
                 page_url: Callable[[str], str | None] = lambda _run_id: None) -> None:
        self._store = store
        self._deliveries = DeliveryStore(store)
        self._dispatcher = dispatcher
        self._default = default
        self._page_url = page_url

    def start(self) -> None:
        """Begin at the events table's end on first use (history is not notified), and resume
        deliveries an earlier daemon left pending."""
        if self._deliveries.cursor(CURSOR) is None:
            self._deliveries.set_cursor(CURSOR, self._deliveries.last_event_id())
        targets: dict[str, Target] = {}
        for run in self._store.list_runs(limit=1000):
            try:
                for target in run_targets(run.profile, self._default()):
                    targets[target.id] = target
            except ValueError:
                continue
        self._dispatcher.resume(targets)

    def poll(self, limit: int = 500) -> int:
        """Handle new events; returns how many notifications were queued."""
        cursor = self._deliveries.cursor(CURSOR) or 0
        events = self._deliveries.events_after(cursor, limit)
        queued = 0
        for event in events:
            run = self._store.get_run(event.run_id)
            earlier = self._deliveries.events_before(event.run_id, event.id, HISTORY)
            notification = decide(event, earlier, run)
            if notification is not None and run is not None:
                try:
                    targets = run_targets(run.profile, self._default())
                except ValueError as err:  # the stored profile predates a schema change
                    log.error("run's [notify] section unreadable", run=run.id, error=str(err))
                    targets = []
                body = json_payload(notification, run, self._page_url(run.id))
                queued += self._dispatcher.submit(run_id=run.id, key=notification.key,
                                                  event=notification.kind, body=body,
                                                  targets=targets)
            cursor = event.id
        if events:
            self._deliveries.set_cursor(CURSOR, cursor)
        return queued
