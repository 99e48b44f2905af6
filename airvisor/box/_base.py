"""The box backend's shared state and the contract between its concerns.

RunSupervisor (`_supervisor.py`) is composed of one mixin per concern over BoxSupervisorBase:
Launching (`_launch.py`), KeptServer (`_kept.py`), Adoption (`_adopt.py`), MemberWatch
(`_memberwatch.py`), Stopping (`_stop.py`). The base holds the state they share (set in
`__init__`, typed there) and declares the methods one concern calls of another; the mixin that
owns each overrides it (a declaration here only raises).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from airvisor._logfile import LogTail
from airvisor.box._hooks import (
    ComponentHandle,
    ContainerPoolLike,
    DeathWatchLike,
    Hooks,
    OldLauncher,
    ProberLike,
)
from airvisor.box._rollouts import RolloutWatcher
from airvisor.core import LogView, SupervisorCore
from airvisor.policy._scope import ScopeDecision
from airvisor.primerl._split import SplitPlan
from airvisor.proc import ProcessIdentity

FAILURE_LINES = 40  # a failed component's last log lines looked at (as many as a LogTail keeps)


class BoxSupervisorBase(SupervisorCore):
    """A run on this box: the state every concern of the box backend reads and writes."""

    def __init__(self, *, hooks: Hooks, **core: Any) -> None:
        """`core`: SupervisorCore's arguments (run_id, profile, store, post, clock, wall,
        phase)."""
        super().__init__(hooks=hooks, background=hooks.background, **core)
        self._hooks: Hooks = hooks
        self.run_dir = Path(self.profile.run.output_dir or ".")
        self.views: dict[str, LogView] = {}
        self.mode = self.profile.prime_rl.mode
        self.components: dict[str, ComponentHandle] = {}
        self._attempt_started = self._clock()
        self._prober: ProberLike | None = None
        self._pool: ContainerPoolLike | None = None
        self._metrics: LogTail | None = None
        self._rollouts: RolloutWatcher | None = None  # the attempt's episode log
        self._pool_lock = threading.Lock()  # one Docker operation on the pool at a time
        self._specs: dict[str, Any] = {}
        self._next_container_check = 0.0
        self._next_member_scan = 0.0
        self._members: dict[str, int] = {}
        # The members' identities (pid and start time) as found: what a stop of the rest
        # signals directly, never the launcher (issue 30 item 4).
        self._member_ids: dict[str, ProcessIdentity] = {}
        # Each failed attempt's launcher while it is left to say its status and exit, by
        # attempt: the next attempt's member may die (and its launcher be left) meanwhile.
        self._old_launchers: dict[int, OldLauncher] = {}
        self._old_launchers_looked = False  # (a new daemon's look for them: once)
        self._death_watch: DeathWatchLike | None = None  # the members' (started at the first)
        self._containment: str | None = None
        # The split (issue 22): this attempt's plan when its inference server runs as its own
        # process (None: the one `rl`, as before); why not, for the scope policy; the next
        # preflight keeps the server; main's PRL_RUN_ID the kept server shares with the rest.
        self._split: SplitPlan | None = None
        self._split_refusals: tuple[str, ...] = (
            "not_resolved: the attempt was not planned in the split",)
        self._prl_run_id: str | None = None
        self._next_plan_ahead = 0.0  # when to look ahead at the next attempt's plan again

    def _on_terminal(self) -> None:
        for view in self.views.values():
            view.close()
        self._close_death_watch()

    def _record_containers(self, statuses: tuple[Any, ...]) -> None:
        for status in statuses:
            self.store.upsert_component(
                self.run_id, self.attempt, status.name, kind="container", state=status.state,
                container_id=status.container_id, health=status.health,
                restarts=status.restarts, gpus=list(status.gpus),
            )

    # -- what one concern calls of another (each overridden by its owner) --------
    def _carry_kept_server(self, kept: ComponentHandle) -> None:
        """The kept server is a member of this attempt too (KeptServer, _kept.py)."""
        raise NotImplementedError

    def _kept_server(self) -> ComponentHandle | None:
        """The inference server, running as its own process (the split, or component mode), and
        alive (KeptServer, _kept.py)."""
        raise NotImplementedError

    def _record_scope(self, scope: ScopeDecision | None, cause: str,
                      kept: ComponentHandle | None) -> None:
        """The attempt record says how this attempt came to be launched (KeptServer, _kept.py)."""
        raise NotImplementedError

    def _recorded_server(self, attempt: int) -> ComponentHandle | None:
        """The inference server the store records running for `attempt`, if it still is (KeptServer,
        _kept.py)."""
        raise NotImplementedError

    def _restore_split(self, attempt: int) -> int | None:
        """What an adopted attempt whose server runs apart needs again (KeptServer, _kept.py)."""
        raise NotImplementedError

    @property
    def split(self) -> bool:
        """The attempt runs its inference server apart from prime-rl's `rl` (issue 22) (KeptServer,
        _kept.py)."""
        raise NotImplementedError

    def _begin_preflight(self, *, keep_inference: bool = False) -> None:
        """Prepare the next attempt on a worker, keeping the inference server when asked (Launching,
        _launch.py)."""
        raise NotImplementedError

    def _start_prober(self) -> None:
        """Start probing the attempt's inference server (none: it is ready) (Launching,
        _launch.py)."""
        raise NotImplementedError

    def _adopt_members(self) -> None:
        """The members the last supervisor recorded for the adopted attempt (MemberWatch,
        _memberwatch.py)."""
        raise NotImplementedError

    def _adopt_old_launchers(self) -> None:
        """Finish the failed attempts' launchers an earlier daemon left (box/_stop.py)."""
        raise NotImplementedError

    def _close_death_watch(self) -> None:
        """Stop watching the members' deaths (MemberWatch, _memberwatch.py)."""
        raise NotImplementedError

    def _read_progress(self, now: float) -> None:
        """Read what the logs wrote since the last look; act on the launcher's failure line
        (RunSupervisor, _supervisor.py)."""
        raise NotImplementedError
