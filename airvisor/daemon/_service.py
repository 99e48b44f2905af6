"""What the daemon needs from the supervision engine (`airvisor.runs.RunManager`).

The API and the main loop depend only on this Protocol, so tests can drive them with a small
in-memory implementation and the engine can change behind it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from airvisor.runs._manager import StartMode as StartMode  # one definition: the engine's

if TYPE_CHECKING:
    from airvisor.profile._schema import Profile
    from airvisor.store import RunRecord


class RunService(Protocol):
    # Where clients reach this daemon (recorded with each run it supervises, so `airvisor stop`
    # asks it, never signals it); set before adopt_on_boot.
    address: str | None

    def submit(self, profile: Profile, *, start_mode: StartMode = "auto",
               request_id: str | None = None) -> RunRecord: ...

    def request_stop(self, run_id: str) -> None: ...

    def request_restart(self, run_id: str) -> None: ...

    def tick(self, timeout: float) -> None: ...

    def adopt_on_boot(self) -> list[str]: ...

    def shutdown(self, *, stop_runs: bool) -> None: ...

    def status_line(self) -> str: ...

    def live_run_ids(self) -> set[str]: ...
