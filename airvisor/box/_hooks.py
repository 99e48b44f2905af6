"""The box backend's view of the world: its hooks (the I/O beyond the supervisor's own logic,
injectable for tests and the simulation), the protocols of what they return, a component's
handle, and the values its worker tasks report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import psutil

from airvisor._logfile import LogTail
from airvisor._logging import get_logger
from airvisor.box._members import launcher_members
from airvisor.box._probe import InferenceProber
from airvisor.core import Background, run_on_thread
from airvisor.primerl import plan_ahead
from airvisor.proc import ProcessIdentity, containment, launch
from airvisor.proc._deathwatch import Death, DeathWatch
from airvisor.proc._hold import group_members
from airvisor.profile._schema import Profile

log = get_logger("airvisor.box")


INFERENCE = "inference"  # the kept server's component name in the split (issue 22)
VIEWED = ("inference", "trainer", "orchestrator")


@dataclass(frozen=True)
class TaskOutcome:
    """What a stop or a container check reports: its summary (or changes) and the containers'
    status, read on the worker thread (Docker is never asked on the main loop)."""

    summary: Any
    containers: tuple[Any, ...] = ()


def pool_status(pool: ContainerPoolLike | None) -> tuple[Any, ...]:
    if pool is None:
        return ()
    try:
        return tuple(pool.status())
    except Exception as exc:  # Docker trouble is reported, never fatal for the record
        log.warning("container status unavailable", error=str(exc))
        return ()


def _describe_containment() -> str:
    return containment().describe()


class ContainerPoolLike(Protocol):
    """What the supervisor needs of `airvisor.containers.ContainerPool`."""

    @property
    def names(self) -> list[str]: ...

    def preflight(self) -> None: ...

    def up(self, attempt: int | None = None) -> list[Any]: ...

    def check(self) -> list[Any]: ...

    def down(self) -> None: ...

    def status(self) -> list[Any]: ...


class LaunchedLike(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def identity(self) -> ProcessIdentity: ...

    def wait(self) -> int: ...


class ProberLike(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


class DeathWatchLike(Protocol):
    def watch(self, key: str, pid: int, create_time: float | None = None) -> bool: ...

    def close(self) -> None: ...


@dataclass
class Hooks:
    """The supervisor's I/O beyond process launch, injectable for tests."""

    # Reap stale processes and wait for GPU memory; returns a one-line summary. Called
    # (profile, run_id, live run ids), and with `own_pids=` (processes of the run it keeps:
    # the kept inference server) on a relaunch that keeps it.
    prepare_machine: Callable[..., str]
    # Stop a set of processes as whole trees: (identities, pgids, marker run id, grace), and
    # `sweep=False` when the run's kept inference server must survive (no marker/cgroup sweep).
    stop_tree: Callable[..., str]
    container_pool: Callable[[Profile, str], ContainerPoolLike] | None = None
    # Run ids that count as live (for the reaper), provided by the manager.
    live_run_ids: Callable[[], set[str]] = field(default=lambda: set())
    # The process constructor and the inference prober: real by default, replaced in the
    # policy tests that replay histories without processes.
    launch: Callable[..., LaunchedLike] = launch
    prober: Callable[..., ProberLike] = InferenceProber
    # The components below prime-rl's launcher, by name (launcher mode).
    members: Callable[[int], dict[str, int]] = launcher_members
    # Watches those members directly (their exit seen at once, issue 22 item 4): called with
    # the callback a death is reported to (on the watcher's thread).
    death_watch: Callable[[Callable[[Death], None]], DeathWatchLike] = DeathWatch
    # How this supervisor contains the processes it starts ("cgroup v2 (...)" or "subreaper
    # fallback (...)"), shown in the run's events and so in `airvisor status`.
    containment: Callable[[], str] = field(default=lambda: _describe_containment())
    # Runs a blocking job off the main loop (worker tasks, the wait for a component's exit):
    # a daemon thread; the deterministic simulation (airvisor.sim) runs each when it chooses.
    background: Background = run_on_thread
    # Has prime-rl resolve the next attempt ahead, on a thread of its own
    # (`primerl.plan_ahead`); the simulation answers every preflight from its own cache.
    plan_ahead: Callable[..., bool] = plan_ahead
    # Hold a member's tree still (SIGSTOP) and end it later (SIGTERM, SIGCONT): the stop that
    # does not wait for prime-rl's launcher's exit-status line (`_stop_rest_at_once`). None:
    # the stop waits for the line (`_after_launcher_report`), as the simulation's world does in
    # a schedule without `hold` (the daemon's hooks, `runs.default_hooks`, give
    # `proc.hold_trees` and `proc.end_held`; the simulation's world its own otherwise).
    hold_trees: Callable[[list[ProcessIdentity]], list[ProcessIdentity]] | None = None
    end_held: Callable[[list[ProcessIdentity]], list[int]] | None = None
    # Every live process of a process group (the failed launcher's, which that stop ends but
    # for the launcher and the held): psutil's process table; the simulation's world's.
    group_members: Callable[[int], list[ProcessIdentity]] = group_members
    # The machine's boot time, on the clock of a process's create time (psutil's): a takeover
    # tells a reboot (every process of the run started before it) from a crash with it.
    boot_time: Callable[[], float] = psutil.boot_time


@dataclass
class ComponentHandle:
    name: str
    identity: ProcessIdentity
    pgid: int
    log: LogTail
    argv: list[str]
    gpus: list[int]
    launched: LaunchedLike | None = None  # None when adopted from an earlier supervisor
    exit_code: int | None = None
    exited: bool = False
    # Saw its own "finished" line: an adopted process (not our child, exit status unknowable)
    # that then disappears is taken to have exited 0.
    finished: bool = False
    since: int = 0  # the attempt that started it (earlier than the run's for a kept server)


@dataclass
class OldLauncher:
    """prime-rl's launcher of a failed attempt, left to say its failed member's exit status and
    exit by itself while the next attempt is prepared and launched (issue 30 item 4): its
    attempt, handle, the member whose status it is to say, the members held still for it."""

    attempt: int
    handle: ComponentHandle
    component: str
    held: list[ProcessIdentity]
    said: bool = False  # its line was read (at a look meanwhile, or at its exit)
    stopped: bool = False  # a stop was given it (`_stop_processes`): not left any more


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exited (status unknown: adopted process)"
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"
