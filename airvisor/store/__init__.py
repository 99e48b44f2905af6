"""Persistent state of runs, attempts, components and events (SQLite), plus the run page's
time series and webhook deliveries."""

from airvisor.store._db import (
    LIVE_STATES,
    AlreadySubmitted,
    ComponentRecord,
    EventRecord,
    RestartRecord,
    RunRecord,
    Store,
)
from airvisor.store._deliveries import DELIVERED, FAILED, PENDING, DeliveryRecord, DeliveryStore
from airvisor.store._series import SeriesRead, SeriesStore, merge_pairs

__all__ = [
    "DELIVERED",
    "FAILED",
    "LIVE_STATES",
    "PENDING",
    "AlreadySubmitted",
    "ComponentRecord",
    "DeliveryRecord",
    "DeliveryStore",
    "EventRecord",
    "RestartRecord",
    "RunRecord",
    "SeriesRead",
    "SeriesStore",
    "Store",
    "merge_pairs",
]
