"""Webhook deliveries (one row per notification and target) and named cursors.

A delivery row is created once per (notification key, target): `add_delivery` returns False for
a key already recorded, which is what makes each notification go out once even when the daemon
restarts and reads the events table again. Targets are stored as a hash of the URL plus a
redacted label: the URL itself may carry a secret (a Slack webhook's path is one).
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from airvisor.store._db import EventRecord, Store

PENDING = "pending"
DELIVERED = "delivered"
FAILED = "failed"


@dataclass(frozen=True)
class DeliveryRecord:
    id: int
    run_id: str
    key: str
    event: str
    target: str
    target_label: str
    payload: dict[str, Any]
    status: str
    tries: int
    error: str | None
    created_at: float
    updated_at: float


def _delivery(row: sqlite3.Row) -> DeliveryRecord:
    return DeliveryRecord(
        id=row["id"], run_id=row["run_id"], key=row["key"], event=row["event"],
        target=row["target"], target_label=row["target_label"],
        payload=json.loads(row["payload_json"]), status=row["status"], tries=row["tries"],
        error=row["error"], created_at=row["created_at"], updated_at=row["updated_at"],
    )


def _event(row: sqlite3.Row) -> EventRecord:
    return EventRecord(id=row["id"], run_id=row["run_id"], at=row["at"], kind=row["kind"],
                       component=row["component"], message=row["message"],
                       data=json.loads(row["data_json"]))


class DeliveryStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    # -- cursors ----------------------------------------------------------------------------
    def cursor(self, name: str) -> int | None:
        row = self.store._conn().execute("SELECT value FROM cursors WHERE name = ?",
                                         (name,)).fetchone()
        return None if row is None else int(row[0])

    def set_cursor(self, name: str, value: int) -> None:
        with self.store._tx() as db:
            db.execute("INSERT INTO cursors (name, value) VALUES (?, ?) ON CONFLICT(name) "
                       "DO UPDATE SET value = excluded.value", (name, value))

    def events_after(self, after_id: int, limit: int = 500) -> list[EventRecord]:
        """Events of every run with a larger id, oldest first."""
        rows = self.store._conn().execute(
            "SELECT id, run_id, at, kind, component, message, data_json FROM events "
            "WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit)).fetchall()
        return [_event(r) for r in rows]

    def events_before(self, run_id: str, before_id: int, limit: int = 60) -> list[EventRecord]:
        """The run's `limit` events before `before_id`, oldest first."""
        rows = self.store._conn().execute(
            "SELECT id, run_id, at, kind, component, message, data_json FROM events "
            "WHERE run_id = ? AND id < ? ORDER BY id DESC LIMIT ?",
            (run_id, before_id, limit)).fetchall()
        return [_event(r) for r in reversed(rows)]

    def last_event_id(self) -> int:
        row = self.store._conn().execute("SELECT MAX(id) FROM events").fetchone()
        return int(row[0] or 0)

    # -- deliveries -------------------------------------------------------------------------
    def add_delivery(self, *, run_id: str, key: str, event: str, target: str,
                     target_label: str, payload: dict[str, Any]) -> int | None:
        """The new row's id, or None when this notification already went to this target."""
        now = time.time()
        with self.store._tx() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO notifications (run_id, key, event, target, target_label, "
                "payload_json, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, key, event, target, target_label, json.dumps(payload, default=str),
                 PENDING, now, now))
            return int(cur.lastrowid) if cur.rowcount and cur.lastrowid else None

    def record_try(self, delivery_id: int, *, status: str, error: str | None) -> None:
        with self.store._tx() as db:
            db.execute("UPDATE notifications SET status = ?, tries = tries + 1, error = ?, "
                       "updated_at = ? WHERE id = ?", (status, error, time.time(), delivery_id))

    def deliveries(self, run_id: str, limit: int = 100) -> list[DeliveryRecord]:
        rows = self.store._conn().execute(
            "SELECT * FROM notifications WHERE run_id = ? ORDER BY id DESC LIMIT ?",
            (run_id, limit)).fetchall()
        return [_delivery(r) for r in reversed(rows)]

    def pending(self) -> list[DeliveryRecord]:
        rows = self.store._conn().execute(
            "SELECT * FROM notifications WHERE status = ? ORDER BY id", (PENDING,)).fetchall()
        return [_delivery(r) for r in rows]
