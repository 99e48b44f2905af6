"""Persistent state of runs, attempts, components and events (SQLite)."""

from airvisor.store._db import LIVE_STATES, ComponentRecord, EventRecord, RunRecord, Store

__all__ = ["LIVE_STATES", "ComponentRecord", "EventRecord", "RunRecord", "Store"]
