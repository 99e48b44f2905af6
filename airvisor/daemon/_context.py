"""What the API's handlers share (`ApiContext`). Its own module, below the app: the run page
(airvisor.daemon.web) takes it too, and must not import the app that installs it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from airvisor.daemon._machine import CachedGPUs
from airvisor.daemon._profiles import ProfileCatalog
from airvisor.daemon._service import RunService
from airvisor.daemon._views import CurrentRunSnapshot
from airvisor.profile._schema import StateSection
from airvisor.store import Store


@dataclass
class ApiContext:
    """What the handlers share. `token` None means auth is off (loopback + --no-auth only)."""

    store: Store
    service: RunService
    catalog: ProfileCatalog
    token: str | None = field(repr=False)  # never in logs or tracebacks
    state_dir: Path
    started_at: float = field(default_factory=time.time)
    snapshot: CurrentRunSnapshot = field(init=False)
    gpus: CachedGPUs = field(default_factory=CachedGPUs)
    # Retention and log caps (<state dir>/settings.toml [state]), shown by GET /state.
    state_settings: StateSection = field(default_factory=StateSection)

    def __post_init__(self) -> None:
        self.snapshot = CurrentRunSnapshot(self.store)
