"""One supervised run: its attempts, components, progress, failures and recovery.

All decisions run on the main loop's thread, in `handle()` (an event) and `on_tick()` (timers).
Anything that blocks (preflight, stopping a tree with its grace period, Docker) runs on a worker
thread and reports back with a `TaskDone` event, so one run's slow stop never delays another
run's failure detection or the API.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil

from airvisor._logfile import LogTail, tail_lines
from airvisor._logging import get_logger
from airvisor.box._members import launcher_members
from airvisor.box._probe import InferenceProber, inference_base_url, probe_kept_server
from airvisor.box._rollouts import RolloutWatcher, event_of
from airvisor.box._takeover import component_alive, ended_by_a_reboot
from airvisor.core import (
    Background,
    ComponentExited,
    Event,
    InferenceReady,
    LogView,
    MemberExited,
    ProbeFailed,
    ProcessEvent,
    SupervisorCore,
    Task,
    TaskDone,
    recorded_failure,
    run_on_thread,
)
from airvisor.policy import Phase
from airvisor.policy._disk import disk_error
from airvisor.policy._rollouts import NeedsPerson
from airvisor.policy._scope import InferenceHealth, ScopeDecision
from airvisor.policy._transition import (
    Abort,
    AttemptBegins,
    Failure,
    Launched,
    MachineBusy,
    PreparationEnded,
    Preparing,
    Ready,
    RecoveryResumed,
    RecoveryTakenOver,
    TakenOver,
)
from airvisor.policy._watchdog import Healthy
from airvisor.primerl import (
    FINISH_MILESTONES,
    LAUNCHER,
    TRAINING_FINISHED,
    AttemptError,
    ChildFailure,
    PreparedAttempt,
    child_failure_from_line,
    milestone_from_log_line,
    plan_ahead,
    prepare_attempt,
    prepare_run,
    run_layout,
    step_from_log_line,
)
from airvisor.primerl._split import (
    SplitPlan,
    component_keep_refusals,
    plan_split,
    resolve_split,
    split_of,
)
from airvisor.proc import ProcessIdentity, containment, identity_of, launch
from airvisor.proc._deathwatch import Death, DeathWatch
from airvisor.proc._hold import group_members
from airvisor.profile._schema import Profile
from airvisor.stacks import with_stacks_first

log = get_logger("airvisor.box")

PROCESS_ORDER = ("inference", "trainer", "orchestrator")
INFERENCE = "inference"  # the kept server's component name in the split (issue 22)
VIEWED = ("inference", "trainer", "orchestrator")
FINISH_TIMEOUT = 150.0  # seconds for the launcher to exit once training has finished
# Seconds between looks into the launcher's tree (its descendants in the process table: a few
# ms) until the members are found: a member's death is seen at once only once it is found, and
# a short run's members may live for a second only.
MEMBER_SCAN_INTERVAL = 0.25
MEMBER_RESCAN_INTERVAL = 60.0  # once inference, trainer and orchestrator are found
# Seconds between looks ahead at the next attempt's resolution (issue 30 item 4): a look is a
# checkpoint listing and a hash; prime-rl resolves only when a newer checkpoint completed (a
# real run's come minutes apart).
PLAN_AHEAD_INTERVAL = 10.0
ADOPT_CATCH_UP_LINES = 200  # of each log's end, read when a live attempt is adopted


@dataclass(frozen=True)
class TaskOutcome:
    """What a stop or a container check reports: its summary (or changes) and the containers'
    status, read on the worker thread (Docker is never asked on the main loop)."""

    summary: Any
    containers: tuple[Any, ...] = ()


def _pool_status(pool: ContainerPoolLike | None) -> tuple[Any, ...]:
    if pool is None:
        return ()
    try:
        return tuple(pool.status())
    except Exception as exc:  # Docker trouble is reported, never fatal for the record
        log.warning("container status unavailable", error=str(exc))
        return ()


def _describe_containment() -> str:
    return containment().describe()


@dataclass(frozen=True)
class MachineCondition:
    """What a preflight reports when the machine cannot host the attempt now: not a crash of
    the run, so not counted; the run waits and tries again."""

    reason: str


MACHINE_RETRY_MAX = 60.0  # seconds between looks while waiting for the machine


@dataclass(frozen=True)
class SplitPrepared:
    """A preflight's attempt with its split (issue 22): `plan` when the inference server runs
    as its own supervised process beside prime-rl's `rl` without [inference], else why not
    (`refusals`, as the scope policy reads them)."""

    prepared: PreparedAttempt
    plan: SplitPlan | None
    refusals: tuple[str, ...]
    prl_run_id: str | None = None


def _plan_split(prepared: PreparedAttempt, attempt_dir: Path,
                prl_run_id: str | None, container_names: list[str]) -> SplitPrepared:
    """The attempt's two halves, derived by prime-rl (`resolve_split`), their files written;
    or the refusals (the attempt then runs exactly as before: the one `rl`)."""
    profile = prepared.profile
    assert prepared.plan is not None
    resolution = prepared.plan.resolution  # resolved with the halves (`prepare_attempt`)
    if resolution.split is None:
        resolution = resolve_split(profile, resume_step=prepared.choice.step,
                                   scratch=attempt_dir)
    split = split_of(resolution, mode=profile.prime_rl.mode)
    if not split.supported:
        return SplitPrepared(prepared, None, tuple(str(r) for r in split.refusals)
                             or ("not_resolved: no halves",))
    # main: the kept server and every rest share one PRL_RUN_ID (the tracker's, when set).
    run_id = prl_run_id or profile.prime_rl.env.get("PRL_RUN_ID") or uuid.uuid4().hex
    plan = plan_split(profile, split, attempt_dir=attempt_dir, prl_run_id=run_id,
                      container_names=container_names)
    for spec in (plan.inference, plan.rest):
        for path, text in spec.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return SplitPrepared(prepared, plan, (), run_id)


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
    # the stop waits for the line (`_after_launcher_report`), as the simulation's world does
    # (the daemon's hooks, `runs.default_hooks`, give `proc.hold_trees` and `proc.end_held`).
    hold_trees: Callable[[list[ProcessIdentity]], list[ProcessIdentity]] | None = None
    end_held: Callable[[list[ProcessIdentity]], list[int]] | None = None
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


# prime-rl's launcher reaps a member in its monitor thread at once and says so ("Trainer failed
# with exit code N") from its main loop, which looks once a second (v0.4 rl.py:539-552,780-803;
# main utils/process.py:96-105, entrypoints/rl.py:376-388): seconds a stop waits for that line
# when the member's status was its to collect, before SIGTERM ends the launcher unsaid.
LAUNCHER_REPORT_WAIT = 1.5
FAILURE_LINES = 40  # a failed component's last log lines looked at (as many as a LogTail keeps)
LAUNCHER_REPORT_LOOK = 0.05  # seconds between looks at the launcher's log meanwhile
# Seconds at least a failed attempt's launcher is given to exit by itself once its held members
# are ended (then its tree is stopped): its clean-up joins each monitor thread for up to 5 s
# and waits for each child still running (main utils/process.py:58-93, v0.4 rl.py:524-536);
# the stop's grace, when longer.
OLD_LAUNCHER_EXIT_WAIT = 10.0


@dataclass
class OldLauncher:
    """prime-rl's launcher of a failed attempt, left to say its failed member's exit status and
    exit by itself while the next attempt is prepared and launched (issue 30 item 4): its
    attempt, handle, the member whose status it is to say, the members held still for it."""

    attempt: int
    handle: ComponentHandle
    component: str
    held: list[ProcessIdentity]


def held_for_report(failed: str, members: Mapping[str, ProcessIdentity]) -> list[str]:
    """The members a stop holds still (SIGSTOP) instead of ending, so that prime-rl's launcher
    still says `failed`'s exit status. Its main loop looks once a second and runs only while
    not both of the orchestrator and the trainer have ended; when both have, it logs the
    orchestrator's status first (main entrypoints/rl.py:378-401, v0.4 rl.py:779-802). So the
    orchestrator is held unless it is the one that failed; every other member may end at once
    (their own "failed" lines queue after the failed member's, whose monitor thread queued its
    line first: main utils/process.py:96-105, v0.4 rl.py:539-552)."""
    if failed == "orchestrator" or "orchestrator" not in members:
        return []
    return ["orchestrator"]


def launcher_report(log_path: Path, component: str) -> ChildFailure | None:
    """The launcher's line naming `component`'s exit status, among its log's last lines."""
    try:
        lines, _ = tail_lines(log_path, 50)
    except OSError:
        return None
    for line in reversed(lines):
        child = child_failure_from_line(line)
        if child is not None and child.component == component:
            return child
    return None


def launcher_first_report(log_path: Path) -> ChildFailure | None:
    """The launcher's first line naming a child that failed, among its log's last lines."""
    try:
        lines, _ = tail_lines(log_path, 200)
    except OSError:
        return None
    for line in lines:
        child = child_failure_from_line(line)
        if child is not None:
            return child
    return None


def _after_launcher_report(job: Callable[[], TaskOutcome], log_path: Path,
                           component: str) -> Callable[[], TaskOutcome]:
    """`job` (the stop), once the launcher has said `component`'s status, or after
    LAUNCHER_REPORT_WAIT at most (on the stop's worker: the main loop never waits)."""
    def run() -> TaskOutcome:
        deadline = time.monotonic() + LAUNCHER_REPORT_WAIT
        while launcher_report(log_path, component) is None and time.monotonic() < deadline:
            time.sleep(LAUNCHER_REPORT_LOOK)
        return job()

    return run


def _finish_old_launcher(old: OldLauncher, grace: float,
                         stop_tree: Callable[..., str],
                         end_held_trees: Callable[[list[ProcessIdentity]], list[int]],
                         run_id: str) -> None:
    """A failed attempt's launcher, its members gone or held (`_stop_rest_at_once`): wait for
    its line naming the failed member's status (LAUNCHER_REPORT_WAIT at most), then end the
    held members, then let it exit by itself (its clean-up then finds its children gone: main
    utils/process.py:83-93 and v0.4 rl.py:529-536 signal only a child not yet reaped, so
    never a process of the next attempt); after `grace`, what is left of its tree (its process
    group, the held) is stopped as before, never by the run's marker (the next attempt's
    processes carry it too). Runs on its own thread: nothing of the next attempt waits."""
    deadline = time.monotonic() + LAUNCHER_REPORT_WAIT
    while launcher_report(old.handle.log.path, old.component) is None \
            and time.monotonic() < deadline and old.handle.identity.alive():
        time.sleep(LAUNCHER_REPORT_LOOK)
    if old.held:
        end_held_trees(old.held)
    began = time.monotonic()
    ends = began + max(grace, OLD_LAUNCHER_EXIT_WAIT)
    while old.handle.identity.alive() and time.monotonic() < ends:
        time.sleep(LAUNCHER_REPORT_LOOK)
    if old.handle.identity.alive() or any(i.alive() for i in old.held):
        log.info("the failed attempt's launcher did not exit by itself: stopped", run=run_id,
                 attempt=old.attempt, waited=round(time.monotonic() - began, 3))
        stop_tree([old.handle.identity, *old.held], [old.handle.pgid], run_id, 0.0,
                  sweep=False)


def _last_lines_of(path: Path | None, read: list[str]) -> list[str]:
    """A failed component's last log lines: the file's end, not only the lines this daemon
    read (an adopted attempt's logs are read from the adoption on: what the component said
    while no daemon watched, its dying words among them, is in the file only)."""
    if path is not None:
        try:
            lines, _ = tail_lines(path, FAILURE_LINES)
        except OSError:
            lines = []
        if lines:
            return [line.rstrip("\n") for line in lines]
    return read


def _last_step_of(path: Path | None, began: float | None) -> tuple[int, float] | None:
    """The last `Step N` of a log written since `began` (wall time), and its last write."""
    if path is None:
        return None
    try:
        written = path.stat().st_mtime
        lines, _ = tail_lines(path, FAILURE_LINES)
    except OSError:
        return None
    if began is not None and written < began:
        return None  # an earlier attempt's
    steps = [s for line in lines if (s := step_from_log_line(line)) is not None]
    return (max(steps), written) if steps else None


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


class RunSupervisor(SupervisorCore):
    """A run whose processes run on this box: prime-rl's launcher (or, v0.4's component mode,
    its three processes) started by airvisor, contained, watched through their logs, their
    exits and the inference server's health. The supervisor core decides; this backend
    launches, stops and watches."""

    stop_waits_for = frozenset({Task.STOP, Task.PREFLIGHT})

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
        self._attempt_wall_start = self._wall()
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
        # The failed attempt's launcher while it is left to say its status and exit.
        self._old_launcher: OldLauncher | None = None
        self._death_watch: DeathWatchLike | None = None  # the members' (started at the first)
        self._containment: str | None = None
        self._container_recreates = 0
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

    def _close_death_watch(self) -> None:
        if self._death_watch is not None:
            self._death_watch.close()
            self._death_watch = None

    @property
    def members(self) -> dict[str, int]:
        """Launcher mode: the components found in prime-rl's launcher's tree, name -> pid."""
        return dict(self._members)

    def _failure_lines(self, component: str | None) -> list[str]:
        if component in self.views:
            view = self.views[component]
            return _last_lines_of(view.tail.path if view.tail is not None else None,
                                  view.last_lines)
        if component in self.components:
            log = self.components[component].log
            return _last_lines_of(log.path, list(log.last_lines))
        return []

    def _relaunch(self, cause: str) -> None:
        self._begin_preflight()

    def _relaunch_rest(self, cause: str) -> None:
        self._begin_preflight(keep_inference=True)

    @property
    def split(self) -> bool:
        """The attempt runs its inference server apart from prime-rl's `rl` (issue 22)."""
        return self.mode == "launcher" and INFERENCE in self.components

    def _kept_server(self) -> ComponentHandle | None:
        """The inference server, running as its own process (the split, or component mode),
        and alive: what a recovery may keep."""
        handle = self.components.get(INFERENCE)
        if handle is None or handle.exited:
            return None
        return handle

    def _inference_left(self) -> bool:
        return self._kept_server() is not None

    def _scope_refusals(self) -> tuple[str, ...]:
        if self.split:
            return ()
        return self._split_refusals

    def _can_probe_kept_server(self) -> bool:
        return self._kept_server() is not None and self.profile.inference.port is not None

    def _probe_kept_server(self, failure: Failure) -> None:
        """The kept server's health now (`probe_kept_server`, on a worker): its process alive,
        /health and /v1/models, its engine answering in time, its log since the failure."""
        server = self._kept_server()
        port = self.profile.inference.port
        if server is None or port is None:
            return
        try:
            offset = server.log.path.stat().st_size
        except OSError:
            offset = 0
        members = [(server.identity.pid, server.identity.create_time)]
        base_url = inference_base_url(self.profile.inference.host, port)
        log_path, version = server.log.path, self.profile.prime_rl.version
        self._run_task(Task.SCOPE, lambda: probe_kept_server(
            members=members, base_url=base_url, version=version, log_path=log_path,
            log_offset=offset))

    # -- lifecycle -------------------------------------------------------------------------
    def begin(self) -> None:
        """Start the first attempt (after preflight)."""
        if self.phase in (Phase.PENDING, Phase.TAKEOVER):
            self._begin_preflight()

    def _begin_preflight(self, *, keep_inference: bool = False) -> None:
        kept = self._kept_server() if keep_inference else None
        self._decide(Preparing(keep_inference=kept is not None))
        profile, run_id = self.profile, self.run_id
        live = self._hooks.live_run_ids() - {run_id}
        want_split = profile.prime_rl.mode == "launcher" and profile.restart.scope == "auto"
        # Component mode keeps its own server unless prime-rl's split derivation refuses:
        # both are resolved with the halves, in the attempt's one run of prime-rl's resolver.
        with_halves = profile.restart.scope == "auto"
        prl_run_id = self._prl_run_id if kept is not None else None
        machine_profile = profile
        own: frozenset[int] = frozenset()
        old = self._old_launcher
        if old is not None and old.handle.identity.alive():
            # The failed attempt's launcher, left to say its status and exit by itself (its
            # members are gone or held): not the preflight's to reap meanwhile.
            own = frozenset({old.handle.identity.pid})
        if kept is not None:
            # The kept server is the run's own: never reaped, and its GPUs' memory is in use by
            # it (the GPU wait is for the rest's GPUs).
            own = own | {kept.identity.pid}
            machine_profile = profile.model_copy(update={"gpus": profile.gpus.model_copy(
                update={"inference": []})})
        number = self.attempt + 1
        attempt_dir = self.attempt_dir_of(number)
        layout = self.layout
        pool_factory = (self._hooks.container_pool
                        if profile.containers.enabled else None)
        if pool_factory is not None and self._pool is None:
            self._pool = pool_factory(profile, run_id)  # constructing it does no I/O
        pool, pool_lock = self._pool, self._pool_lock

        def job() -> PreparedAttempt | SplitPrepared | MachineCondition:
            summary = (self._hooks.prepare_machine(machine_profile, run_id, live, own_pids=own)
                       if own else self._hooks.prepare_machine(machine_profile, run_id, live))
            names: list[str] = []
            if pool is not None:
                with pool_lock:
                    pool.preflight()
                    pool.up(attempt=number)
                names = list(pool.names)
                summary += f"; {len(names)} container(s) up"
            try:
                prepared = prepare_attempt(profile, layout, number=number,
                                           attempt_dir=attempt_dir, container_names=names,
                                           summary=summary, split=with_halves)
            except AttemptError as exc:
                if not exc.machine:
                    raise
                if pool is not None:  # nothing of the attempt stays up while it waits
                    with pool_lock:
                        pool.down()
                return MachineCondition(str(exc))
            prepared = dataclasses.replace(prepared, containers=_pool_status(pool))
            if not want_split or prepared.complete or prepared.plan is None:
                return prepared
            return _plan_split(prepared, attempt_dir, prl_run_id, names)

        self._run_task(Task.PREFLIGHT, job)

    def _launch_attempt(self, prepared: PreparedAttempt,
                        split: SplitPrepared | None = None) -> None:
        machine = self.machine
        cause = machine.failure.kind if machine.failure is not None else "first"
        scope = machine.scope
        kept = self._kept_server() if machine.keep_next else None
        # (The recovery is over; the failed attempt's number: its launcher may say its
        # failure's status after this launch.)
        self._decide(AttemptBegins(failed=self.attempt or None))
        self.attempt = prepared.number
        self.profile = prepared.profile
        self.layout = run_layout(prepared.profile)
        self.run_dir = self.layout.run_dir
        choice = prepared.choice
        assert prepared.plan is not None  # a complete run is never launched
        self._repoint_earlier_logs(prepared.number - 1, prepared.kept_logs)
        self.store.start_attempt(self.run_id, self.attempt, choice.step, cause=cause)
        self.store.merge_run_details(self.run_id, recovery=None)
        self._event("attempt", f"attempt {self.attempt}: {choice.describe()}",
                    attempt=self.attempt, resume_step=choice.step, cause=cause,
                    skipped=[list(s) for s in choice.skipped],
                    checked_by=prepared.plan.resolution.source)
        if self.attempt == 1 or self._containment is None:
            self._containment = self._hooks.containment()
            self._event("containment", f"processes contained by {self._containment}",
                        mode=self._containment.split(" ", 1)[0])
        plan = split.plan if split is not None else None
        if self.mode == "components":
            # airvisor starts the server itself: kept unless prime-rl's settings forbid it.
            self._split_refusals = tuple(
                str(r) for r in component_keep_refusals(prepared.plan.resolution))
        else:
            self._split_refusals = split.refusals if split is not None and plan is None else (
                () if plan is not None else ("not_resolved: the split was not asked for "
                                             f"(restart.scope = {self.profile.restart.scope!r})",))
        self._split = plan
        if plan is not None:
            self._prl_run_id = split.prl_run_id if split is not None else None
            self._specs = {INFERENCE: plan.inference, LAUNCHER: plan.rest}
        else:
            self._specs = dict(prepared.plan.processes)
        self.components = {INFERENCE: kept} if kept is not None else {}
        self._record_scope(scope, cause, kept)
        self._on_terminal()  # (the last attempt's views)
        self.views = {}
        self._attempt_started = self._clock()
        self._attempt_wall_start = self._wall()
        self._new_attempt_progress(choice.step)
        self._members = {}
        self._member_ids = {}
        self._next_member_scan = 0.0
        self._close_death_watch()  # the last attempt's members (their deaths are expected)
        metrics = self.layout.metrics_file()
        self._metrics = LogTail(metrics, from_end=True) if metrics is not None else None
        self._rollouts = RolloutWatcher.for_attempt(self.attempt_dir, self.profile,
                                                    clock=self._clock)
        self._decide(Launched())
        if plan is not None:
            if kept is None:
                self._start_component(INFERENCE)
            else:
                self._carry_kept_server(kept)
            self._start_component(LAUNCHER)
            layout = self.layout
            for name in ("trainer", "orchestrator"):
                self.views[name] = LogView(
                    lambda name=name: layout.log_file(name))  # type: ignore[misc]
        elif self.mode == "launcher":
            self._start_component(LAUNCHER)
            layout = self.layout
            for name in VIEWED:
                # Before the launch: whatever the path names now is an earlier attempt's file.
                self.views[name] = LogView(
                    lambda name=name: layout.log_file(name))  # type: ignore[misc]
        else:
            # The trainer loads its model while the inference server starts; the orchestrator
            # starts only once the server answers /health and /v1/models (a kept one at once).
            if kept is not None:
                self._carry_kept_server(kept)
            for name in ("inference", "trainer"):
                if name in self._specs and name not in self.components:
                    self._start_component(name)
        self._start_prober()
        self._record_containers(prepared.containers)

    def _record_scope(self, scope: ScopeDecision | None, cause: str,
                      kept: ComponentHandle | None) -> None:
        """The attempt record says how this attempt came to be launched: the recovery's scope
        and why (`airvisor status`, the API, the page), and whether its server runs apart."""
        details: dict[str, Any] = {"split": self._split is not None,
                                   "prl_run_id": self._prl_run_id,
                                   # why its server cannot be kept (a new daemon reads them)
                                   "keep_refusals": list(self._split_refusals),
                                   # its start on this supervisor's wall clock (the store's
                                   # started_at is the store's own time.time()): a new daemon
                                   # runs the adopted attempt's grace and clocks from it
                                   "began_at": self._wall()}
        if self.attempt > 1 or scope is not None:
            if kept is not None:
                reason, detail = "kept", scope.detail if scope is not None else ""
            elif scope is not None and scope.keep_inference:
                reason, detail = "inference_dead", "the kept server was gone at the relaunch"
            elif scope is not None:
                reason, detail = scope.reason, scope.detail
            else:  # (an operator's restart, a daemon's resume: no scope was decided)
                reason, detail = cause, f"a {cause} restart relaunches everything"
            details |= {"scope": "keep_inference" if kept is not None else "full",
                        "scope_reason": reason, "scope_detail": detail,
                        "scope_at": self._wall()}
            if kept is not None:
                details["inference_kept_from"] = kept.since
        self.store.merge_attempt_details(self.run_id, self.attempt, **details)

    def _carry_kept_server(self, kept: ComponentHandle) -> None:
        """The kept server is a member of this attempt too: status, stop (without a
        supervisor), and a later daemon's adoption find it with the attempt's components."""
        self.store.upsert_component(
            self.run_id, self.attempt, INFERENCE, kind="process", state="running",
            pid=kept.identity.pid, pgid=kept.pgid, create_time=kept.identity.create_time,
            argv=list(kept.argv), gpus=list(kept.gpus), log_path=str(kept.log.path),
            exit_code=None)
        self._event("inference_kept", f"inference server kept (pid {kept.identity.pid}, "
                    f"started in attempt {kept.since}): only {self._rest_name()} "
                    "relaunched", component=INFERENCE, pid=kept.identity.pid,
                    since=kept.since)

    def _rest_name(self) -> str:
        return ("prime-rl's rl without [inference] is" if self.mode == "launcher"
                else "the trainer and orchestrator are")

    def _repoint_earlier_logs(self, earlier: int, kept: tuple[tuple[Path, Path], ...]) -> None:
        """The earlier attempt's components name log paths this launch rewrites (v0.4's
        `logs/*.stdout`): point them at the copies kept aside, so `airvisor logs --attempt N`
        and the API serve attempt N's own lines."""
        moved = {str(old): str(new) for old, new in kept}
        if not moved or earlier < 1:
            return
        for comp in self.store.components(self.run_id, earlier):
            if comp.log_path in moved:
                self.store.upsert_component(self.run_id, earlier, comp.name,
                                            log_path=moved[comp.log_path])

    def _start_prober(self) -> None:
        if self.profile.inference.port is None:
            # `rl` starts no inference server (the user runs one elsewhere): nothing to gate on.
            self._post(InferenceReady(self.run_id, self.attempt, self._wall()))
            return
        self._prober = self._hooks.prober(
            run_id=self.run_id, attempt=self.attempt,
            base_url=inference_base_url(self.profile.inference.host, self.profile.inference.port),
            interval=self.profile.health.probe_interval,
            failures=self.profile.health.probe_failures, post=self._post,
        )
        self._prober.start()

    def _start_component(self, name: str) -> None:
        spec = self._specs[name]
        log_path = self.attempt_dir / f"{name}.log"
        launched = self._hooks.launch(spec.argv, env=spec.env, cwd=spec.cwd, log_path=log_path,
                                      run_id=self.run_id, component=name)
        gpus = (sorted({*([] if self._split is not None else self.profile.gpus.inference),
                        *self.profile.gpus.trainer})
                if name == LAUNCHER else list(getattr(self.profile.gpus, name, [])))
        handle = ComponentHandle(
            name=name, identity=launched.identity, pgid=launched.pid,
            log=LogTail(log_path), argv=list(spec.argv), gpus=gpus, launched=launched,
            since=self.attempt,
        )
        self.components[name] = handle
        self.store.upsert_component(
            self.run_id, self.attempt, name, kind="process", state="running",
            pid=launched.pid, pgid=launched.pid, create_time=launched.identity.create_time,
            argv=list(spec.argv), gpus=gpus, log_path=str(log_path), exit_code=None,
        )
        self._event("component_started", f"{name} started (pid {launched.pid})",
                    component=name, pid=launched.pid)
        attempt = self.attempt

        def wait_for_exit() -> None:
            code = launched.wait()
            self._post(ComponentExited(self.run_id, attempt, name, code, self._wall()))

        self._background(f"wait-{name}-{self.run_id}", wait_for_exit)

    # -- boot takeover (the manager decides which, from the recorded phase) -------------------
    def adopt(self, attempt: int, handles: dict[str, ComponentHandle], step: int | None,
              *, resume_step: int | None = None, attempt_step: int | None = None,
              began: float | None = None) -> None:
        """Take over a live attempt from an earlier supervisor (no restart): its processes, its
        logs from where they are now, its prober and containers, and what it still needs to
        launch (component mode: the orchestrator, once inference is ready). `began`: the
        attempt's start (wall time): a log last written before it is an earlier attempt's."""
        self.attempt = attempt
        self.components = handles
        if INFERENCE in handles:  # its own process (the split, or component mode)
            kept_from = self._restore_split(attempt)
            handles[INFERENCE].since = kept_from or attempt
        self.step = step
        # Its clocks run from its own start, as they did under the dead supervisor (the same
        # outcome with or without the daemon's death): `began` in this clock's terms.
        self._attempt_started = self._clock() - (max(0.0, self._wall() - began)
                                                 if began is not None else 0.0)
        # No step of this attempt seen yet (`attempt_step`: its own log's; `step` may be an
        # earlier attempt's): it keeps its first-step grace (from its start), not the stall
        # timeout a step in progress gets.
        self._attempt_progress = self._clock() if attempt_step is not None else None
        self._attempt_max_step = max(attempt_step or 0, resume_step or 0)
        if attempt_step is not None:  # the trainer's own, as its log says
            self._component_steps["trainer"] = (attempt_step, self._clock())
        layout = self.layout
        if attempt_step is not None and layout is not None:
            # The orchestrator's own last step too, each as of its log's last write: the
            # stall names the one silent the longest, not the one whose log this daemon has
            # not read yet (a trainer hung before the adoption was named the orchestrator).
            for name in ("trainer", "orchestrator"):
                seen = _last_step_of(layout.log_file(name), began)
                if seen is not None:
                    step, written = seen
                    self._component_steps[name] = (
                        step, self._clock() - max(0.0, self._wall() - written))
            # The attempt's last progress is its newest step's, as of the logs' writes (not
            # the adoption): the stall then fires when it would have under the dead daemon
            # (it fired a stall timeout after the adoption: the sweep's seed 6041, where a
            # stop then found the relaunch still training instead of finished).
            self._attempt_progress = max(t for _, t in self._component_steps.values())
        metrics = layout.metrics_file() if layout is not None else None
        self._metrics = LogTail(metrics, from_end=True) if metrics is not None else None
        self._rollouts = RolloutWatcher.for_attempt(self.attempt_dir_of(attempt), self.profile,
                                                    from_end=True, clock=self._clock)
        logs = [h.log.path for h in handles.values()]
        if self.mode == "launcher" and layout is not None:
            # The split: the server's log is its own component's (not the launcher's file).
            viewed = [n for n in VIEWED if not (self.split and n == INFERENCE)]
            self.views = {name: LogView(lambda name=name: layout.log_file(name),  # type: ignore[misc]
                                        from_end=True, written_since=began)
                          for name in viewed}
            logs += [path for name in viewed if (path := layout.log_file(name)) is not None]  # type: ignore[arg-type]
        self._catch_up_milestones(logs)
        waiting = ("orchestrator" not in handles if self.mode == "components"
                   else step is None)
        # The old supervisor died before the server was ready: wait for it again.
        self._decide(TakenOver(Phase.STARTING if waiting else Phase.RUNNING))
        launcher = handles.get(LAUNCHER)
        named = launcher_first_report(launcher.log.path) if launcher is not None else None
        if named is not None:
            # prime-rl's launcher said a child failed while no supervisor watched (its log is
            # read from the adoption on): that is the attempt's failure, with the status the
            # line says, whatever its clean-up has stopped or not stopped since.
            self._fail(f"{named.describe()} while no supervisor watched (reported by "
                       "prime-rl's launcher)",
                       named.component if named.component in self.views else LAUNCHER)
        if self.mode == "launcher":
            self._adopt_members()
        if self.mode == "components" and "orchestrator" not in handles:
            self._rebuild_specs(resume_step)
        if self.profile.containers.enabled and self._hooks.container_pool is not None:
            self._pool = self._hooks.container_pool(self.profile, self.run_id)
        self._start_prober()

    def _catch_up_milestones(self, paths: list[Path]) -> None:
        """What the logs said while no supervisor read them (their ends: a finished line is
        among a log's last): a run that finished meanwhile is seen as finished, not hung."""
        for path in paths:
            try:
                lines, _ = tail_lines(path, ADOPT_CATCH_UP_LINES)
            except OSError:
                continue
            for line in lines:
                milestone = milestone_from_log_line(line)
                if milestone in (*FINISH_MILESTONES.values(), TRAINING_FINISHED):
                    self._finished.add(milestone)

    def _rebuild_specs(self, resume_step: int | None) -> None:
        """The launch specs of an adopted attempt, resolved again by prime-rl exactly as the
        attempt was (same resume step), on a worker: the orchestrator is still to start."""
        profile, number = self.profile, self.attempt
        attempt_dir = self.attempt_dir_of(number)

        def job() -> dict[str, Any]:
            prepared = prepare_run(profile, resume_step=resume_step, attempt_dir=attempt_dir,
                                   container_names=[], machine=False)
            if prepared.problems or prepared.plan is None:
                raise AttemptError("; ".join(str(p) for p in prepared.problems)
                                   or "the attempt could not be planned again")
            for spec in prepared.plan.processes.values():
                for path, text in spec.files.items():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
            return dict(prepared.plan.processes)

        self._run_task(Task.RESPEC, job)

    def resume_after_boot(self, attempt: int, survivors: dict[str, ComponentHandle],
                          failure: Failure) -> None:
        """Boot takeover of an attempt that cannot be adopted (components died unsupervised, or
        it was recovering): stop what is left, then the restart policy decides, from the
        recorded restart history; with `restart.resume_on_boot` off the run ends failed."""
        self.attempt = attempt
        self.components = survivors
        self._take_over_stop(self.store.get_run(self.run_id))
        if failure.kind == "boot" and not self.profile.restart.resume_on_boot:
            self._decide(Abort(f"{failure.reason}; restart.resume_on_boot is off"))
            return
        child = self._unwatched_failure(attempt) if failure.kind == "boot" else None
        if child is not None:
            # A member failed while no supervisor watched and prime-rl's launcher said which,
            # with its status: that crash is the attempt's failure, recorded now (not a boot).
            reason = (f"{child.describe()} while no supervisor watched (reported by prime-rl's "
                      "launcher)")
            machine = disk_error(self._unwatched_lines(child.component))
            self._decide(RecoveryResumed(Failure(
                f"{reason}; {machine}: the machine's condition, not a crash of the run (not "
                "counted)" if machine else reason, "machine" if machine else "crash",
                child.component), record=True))
            return
        if failure.kind == "boot" and failure.component is not None:
            # A component died while no supervisor watched and the launcher (if it was not
            # the one) named no child. When what it started still runs, or it started in
            # this boot of the machine (its recorded start is after the boot time: no reboot
            # ended it), this is no reboot that took everything (that resume is uncounted)
            # but that component's crash, whose status this daemon cannot know (it is not its
            # child). Its members need not be recorded to tell (the last daemon may have died
            # before it recorded them: seeds 6511, 7032, 9629 of the simulation).
            survived = self._attempt_survived(attempt, survivors)
            if survived or not self._ended_by_a_reboot(attempt, failure.component):
                why = ("the rest of the attempt still ran" if survived else
                       "it started after the machine's last boot: no reboot ended it")
                self._decide(RecoveryResumed(Failure(
                    f"{failure.component} exited while no supervisor watched (status unknown: "
                    f"not this daemon's child; {why})", "crash", failure.component),
                    record=True))
                return
        # A hang the last daemon decided but died before stopping: its stacks, unless taken.
        taken = any(a.get("number") == attempt and "stacks" in (a.get("details") or {})
                    for a in self.store.attempts(self.run_id))
        self._decide(RecoveryResumed(failure, stacks=failure.kind == "hang" and not taken))

    def _attempt_survived(self, attempt: int, survivors: dict[str, ComponentHandle]) -> bool:
        """Something of the attempt still runs: a component, or a member of its launcher."""
        return bool(survivors) or any(
            comp.kind == "member" and comp.state in ("running", "starting")
            and component_alive(comp, self.run_id)
            for comp in self.store.components(self.run_id, attempt))

    def _ended_by_a_reboot(self, attempt: int, component: str) -> bool:
        """The recorded `component` of `attempt` started before the machine's current boot."""
        created = next((c.create_time for c in self.store.components(self.run_id, attempt)
                        if c.name == component), None)
        return ended_by_a_reboot(created, self._hooks.boot_time())

    def _unwatched_lines(self, component: str) -> list[str]:
        """The last lines of `component`'s log where this prime-rl version writes it."""
        if self.layout is None or component not in VIEWED:
            return []
        path = self.layout.log_file(component)  # type: ignore[arg-type]
        if path is None:
            return []
        try:
            lines, _ = tail_lines(path, 15)  # (as many as a failure event keeps)
        except OSError:
            return []
        return [line.rstrip("\n") for line in lines]

    def _unwatched_failure(self, attempt: int) -> ChildFailure | None:
        """The child prime-rl's launcher of `attempt` said failed (its log's line), if any."""
        for comp in self.store.components(self.run_id, attempt):
            if comp.name == LAUNCHER and comp.log_path:
                return launcher_first_report(Path(comp.log_path))
        return None

    def relaunch_after_boot(self, attempt: int) -> None:
        """Boot takeover of a run that was backing off or preparing its next attempt: the
        failed attempt is down and its restart is recorded; prepare the next one now, or, when
        the backoff's deadline the last daemon persisted is still ahead, at that deadline
        (`_wait_out_backoff`). A recovery that kept the inference server finds it among the
        attempt's components (recorded running, alive) and keeps it."""
        self.attempt = attempt
        recorded = self.store.get_run(self.run_id)
        failure = (recorded_failure(recorded, "the daemon restarted during recovery")
                   if recorded is not None
                   else Failure("the daemon restarted during recovery", "boot"))
        pending = ((recorded.details or {}).get("recovery") or {}) if recorded else {}
        server = self._recorded_server(attempt)
        if pending.get("scope") == "keep_inference" and server is not None:
            self.components = {INFERENCE: server}
            server.since = self._restore_split(attempt) or attempt
            # (the scope the persisted machine kept the server in, when it has one)
            restored = self.machine.scope
            kept = restored if restored is not None and restored.keep_inference \
                and restored.settled else ScopeDecision(
                    "keep_inference", "kept", "the inference server was kept by the recovery "
                    "the last daemon began")
            self._decide(RecoveryTakenOver(failure, kept))
            if not self._wait_out_backoff():
                self._begin_preflight(keep_inference=True)
            return
        # The scope the restored machine holds stays (a run an older airvisor wrote has
        # none), unless it kept a server that is gone now: everything restarts.
        restored = self.machine.scope
        self._decide(RecoveryTakenOver(failure, None if restored is None
                                       or restored.keep_inference else restored))
        if not self._wait_out_backoff():
            self._begin_preflight()

    def _recorded_server(self, attempt: int) -> ComponentHandle | None:
        """The inference server the store records running for `attempt`, if it still is."""
        for comp in self.store.components(self.run_id, attempt):
            if comp.name != INFERENCE or comp.kind != "process" or comp.state != "running" \
                    or comp.pid is None or comp.create_time is None:
                continue
            identity = ProcessIdentity(comp.pid, comp.create_time)
            if identity.alive():
                return ComponentHandle(
                    name=INFERENCE, identity=identity, pgid=comp.pgid or comp.pid,
                    log=LogTail(Path(comp.log_path) if comp.log_path else self.attempt_dir_of(
                        attempt) / "inference.log", from_end=True),
                    argv=comp.argv, gpus=comp.gpus, launched=None, since=attempt)
        return None

    def _restore_split(self, attempt: int) -> int | None:
        """What an adopted attempt whose server runs apart needs again: main's shared
        PRL_RUN_ID, why its server cannot be kept (if so); returns the attempt that started
        its kept server (None: this one)."""
        for row in self.store.attempts(self.run_id):
            if row.get("number") == attempt:
                details = row.get("details") or {}
                self._prl_run_id = details.get("prl_run_id")
                refusals = details.get("keep_refusals")
                if isinstance(refusals, list):
                    self._split_refusals = tuple(str(r) for r in refusals)
                kept_from = details.get("inference_kept_from")
                return kept_from if isinstance(kept_from, int) else None
        return None

    def finish_stop(self, attempt: int, survivors: dict[str, ComponentHandle],
                    target: Phase) -> None:
        """Boot takeover of a run that was stopping: finish the stop, end as it was to end."""
        self.attempt = attempt
        self.components = survivors  # (only what still runs: gone processes need no grace)
        run = self.store.get_run(self.run_id)
        self._take_over_stop(run)
        if run is not None and (run.details or {}).get("recovery"):
            # A stop asked during a recovery: that failure is still the attempt's (its status
            # may yet come with the launcher's line; the attempt stays failed).
            self._decide(RecoveryTakenOver(recorded_failure(
                run, "the daemon restarted during recovery")))
        self._decide(TakenOver(target))

    def detach(self) -> None:
        """Stop watching (the daemon is going away); the components keep running."""
        if self._prober is not None:
            self._prober.stop()
        self._close_death_watch()

    # -- events ----------------------------------------------------------------------------
    def _on_process_event(self, event: ProcessEvent) -> None:
        old = self._old_launcher
        if old is not None and isinstance(event, ComponentExited) \
                and event.attempt == old.attempt and event.component == LAUNCHER:
            self._old_launcher_exited(old, event)
            if event.attempt != self.attempt:
                return  # (that attempt is over: nothing else of it is acted on)
        if event.attempt != self.attempt and not self._kept_exit(event):
            return  # an echo of an earlier attempt
        if isinstance(event, ComponentExited):
            self._on_exit(event)
        elif isinstance(event, MemberExited):
            self._on_member_exit(event)
        elif isinstance(event, InferenceReady):
            self._on_ready()
        elif isinstance(event, ProbeFailed) and self.phase == Phase.RUNNING:
            if self._training_finished():
                # prime-rl's launcher stops the inference server once training finished (v0.4
                # rl.py:804-808, main entrypoints/rl.py:403-407, utils/process.py:83-93).
                self._note_once("inference_stopped_after_training",
                                "inference server stopped after training finished (expected)")
                return
            self._fail(f"inference health check failed: {event.detail}", "inference")

    def _old_launcher_exited(self, old: OldLauncher, event: ComponentExited) -> None:
        """The failed attempt's launcher, left to say its failed member's status, exited by
        itself or was stopped: its line (if it said it) completes that attempt's failure, in
        whatever phase the run is now (the next attempt may run: the line is that attempt's,
        `RunMachine.earlier`); its exit is never the current attempt's failure (its attempt
        is an earlier one: `_on_process_event` acts on no other event of it)."""
        self._old_launcher = None
        self.store.upsert_component(self.run_id, old.attempt, LAUNCHER, state="exited",
                                    exit_code=event.returncode)
        child = launcher_report(old.handle.log.path, old.component)
        if child is not None:
            self._exit_status_read(child.component, child.code, attempt=old.attempt)

    def _kept_exit(self, event: Event) -> bool:
        """The exit of the kept server, started by an earlier attempt: not an echo."""
        if not isinstance(event, ComponentExited):
            return False
        handle = self.components.get(event.component)
        return handle is not None and handle.since == event.attempt and handle.since > 0

    def _on_ready(self) -> None:
        if self.phase != Phase.STARTING:
            return
        if self.profile.inference.port is not None:
            self._event("inference_ready", "inference server ready (/health, /v1/models)",
                        component="inference")
        if self.mode == "components" and "orchestrator" not in self.components:
            if "orchestrator" not in self._specs:
                return  # adopted: started once its spec is rebuilt ("respec" task)
            self._start_component("orchestrator")
        self._decide(Ready())

    def _on_exit(self, event: ComponentExited) -> None:
        handle = self.components.get(event.component)
        if handle is None or handle.exited:
            return
        handle.exited = True
        self._read_progress(self._clock())  # the last lines may hold its final step
        returncode = event.returncode
        if returncode is None and (handle.finished or self._training_done()):
            returncode = 0  # adopted (not our child): its end is read from the logs
        handle.exit_code = returncode
        self.store.upsert_component(self.run_id, self.attempt, handle.name, state="exited",
                                    exit_code=returncode)
        if self.phase not in (Phase.STARTING, Phase.RUNNING):
            return  # expected: we are stopping it
        what = describe_exit(returncode)
        if event.component == LAUNCHER:
            self._on_launcher_exit(handle, returncode, what)
            return
        if returncode == 0 and event.component in ("trainer", "orchestrator"):
            self._event("component_finished", f"{event.component} finished", component=handle.name)
            others = [self.components.get(n) for n in ("trainer", "orchestrator")]
            if all(h is not None and h.exited and h.exit_code == 0 for h in others):
                self._succeed("trainer and orchestrator finished: run complete")
            return
        self._fail(f"{event.component} {what}", event.component)

    def _on_member_exit(self, event: MemberExited) -> None:
        """A process prime-rl's launcher started exited. The launcher learns of it in its monitor
        loop, up to a second later (v0.4 `rl.py:779-786`, main `entrypoints/rl.py:378-399`: a
        `time.sleep(1)` between looks), and a failure line is read after that: here it is acted
        on at once. A normal end (its "finished" line, training done, status 0) is left to the
        launcher, which ends the run."""
        if self.phase not in (Phase.STARTING, Phase.RUNNING) \
                or self._members.get(event.member) != event.pid:
            return
        self._read_progress(self._clock())  # its last lines may say it finished (or the
        if self.phase not in (Phase.STARTING, Phase.RUNNING):  # launcher already reported)
            return
        finished = FINISH_MILESTONES.get(event.member)
        if event.returncode == 0 or (finished is not None and finished in self._finished) \
                or self._training_done():
            return
        latency_ms = max(0.0, (self._wall() - event.at) * 1000.0)
        if event.returncode is not None:
            reason = f"{event.member} {describe_exit(event.returncode)} (seen at once by airvisor)"
        else:
            # Its status comes with the launcher's "failed with exit code N" line, read when
            # the stop ends (`_after_stop`): it completes this failure (`_exit_status_read`).
            reason = (f"{event.member} exited (seen at once by airvisor; prime-rl's launcher "
                      "reaped it, so its status is the launcher's to know)")
        self._event("member_exited", f"{event.member} (pid {event.pid}) exited: seen at once, "
                    "before prime-rl's launcher reported it", component=event.member,
                    pid=event.pid, returncode=event.returncode, seen_at=event.at,
                    acted_after_ms=round(latency_ms, 3))
        self._fail(reason, event.member, status_known=event.returncode is not None)

    def _on_launcher_exit(self, handle: ComponentHandle, returncode: int | None,
                          what: str) -> None:
        """prime-rl's `rl` ended: 0 after trainer and orchestrator finished (v0.4 rl.py:804-808,
        main entrypoints/rl.py:403-407); otherwise it names the child that failed first and
        stops the rest."""
        if returncode == 0:
            self._succeed("prime-rl's launcher finished (trainer and orchestrator done): run "
                          "complete", LAUNCHER)
            return
        if self._training_finished():
            # Trainer and orchestrator exited 0; only the launcher's clean-up of the inference
            # server went wrong. Training is complete: relaunching would retrain nothing.
            self._succeed(f"trainer and orchestrator finished; prime-rl's launcher then {what} "
                          "while stopping the rest: run complete", LAUNCHER)
            return
        child: ChildFailure | None = None
        for line in reversed(list(handle.log.last_lines)):
            child = child_failure_from_line(line)
            if child is not None:
                break
        if child is not None:
            reason = f"{child.describe()}; prime-rl's launcher stopped the run ({what})"
            self._fail(reason, child.component if child.component in self.views else LAUNCHER)
        else:
            self._fail(f"prime-rl's launcher {what}", LAUNCHER)

    def _task_handlers(self) -> Mapping[Task, Callable[[TaskDone], None]]:
        return {Task.PREFLIGHT: self._after_preflight, Task.STOP: self._after_stop,
                Task.SCOPE: self._after_scope_probe, Task.RESPEC: self._after_respec,
                Task.CONTAINERS: self._after_container_check}

    def _after_scope_probe(self, event: TaskDone) -> None:
        self._scope_probed(event.result if isinstance(event.result, InferenceHealth) else None)

    def _after_respec(self, event: TaskDone) -> None:
        if self.phase not in (Phase.STARTING, Phase.RUNNING) or event.attempt != self.attempt:
            return
        if event.error is not None:
            self._fail(f"cannot rebuild the adopted attempt's launch: {event.error}", None)
            return
        self._specs = dict(event.result or {})
        if self.phase == Phase.STARTING and self._prober is None:
            self._start_prober()

    def _after_container_check(self, event: TaskDone) -> None:
        if self.phase != Phase.RUNNING or event.attempt != self.attempt:
            return
        outcome = event.result if isinstance(event.result, TaskOutcome) else None
        changes = list(outcome.summary or []) if outcome is not None else []
        for change in changes:
            self._event(getattr(change, "kind", "container"), str(change),
                        component="containers")
        if event.error is not None:
            self._fail(f"task containers: {event.error}", "containers")
        else:
            self._record_containers(outcome.containers if outcome is not None else ())
            if any(getattr(c, "kind", "") == "container_gave_up" for c in changes):
                self._fail("a task container could not be recovered", "containers")

    def _after_preflight(self, event: TaskDone) -> None:
        if self.phase.stopping:
            self._decide(PreparationEnded())  # a stop arrived while preparing: undo it now
            return
        if self.phase != Phase.PREFLIGHT:
            return
        if event.error is not None:
            # (hopeless when nothing ever ran: the core's one rule)
            self._preparation_failed(f"preflight failed: {event.error}")
            return
        if isinstance(event.result, MachineCondition):
            self._wait_for_machine(event.result.reason)
            return
        split: SplitPrepared | None = None
        if isinstance(event.result, SplitPrepared):
            split = event.result
            prepared: PreparedAttempt = split.prepared
        else:
            prepared = event.result
        if prepared.summary:
            self._event("preflight", f"preflight: {prepared.summary}")
        if self.machine.keep_next and self.mode == "launcher" \
                and (split is None or split.plan is None) and not prepared.complete:
            # The rest cannot be planned apart from the kept server any more (prime-rl now
            # refuses the split): a failure of this preflight (keeping nothing), whose full
            # stop takes the kept server too, then a full relaunch.
            why = "; ".join(split.refusals) if split is not None else "no split was planned"
            self._fail(f"the rest could not be planned against the kept inference server: "
                       f"{why}", INFERENCE)
            return
        if prepared.complete:
            self._succeed(f"the newest complete checkpoint, step {prepared.choice.step}, is the "
                          f"final one (max_steps = {self.profile.run.max_steps}): run complete, "
                          "nothing relaunched")
            return
        try:
            self._launch_attempt(prepared, split)
        except OSError as exc:
            # ENOENT / EACCES when spawning: a failure of this attempt, with the reason.
            self._fail(f"launch failed: {exc.strerror or exc} ({exc.filename or ''})", None)

    def _wait_for_machine(self, reason: str) -> None:
        """The machine cannot host the next attempt now (a full or read-only disk): not a
        crash of the run. Said once per cause (a warning event, `last_error`), then the
        preflight is tried again every restart.backoff_max, uncounted, until it passes or
        the run is stopped."""
        # (Whether it is new, and the scope the wait keeps: the machine's.)
        self._decide(MachineBusy(reason, self._machine_retry()))

    def _machine_retry(self) -> float:
        """How often a waiting run looks again: restart.backoff_max, at most a minute (a
        person who freed the disk should not wait long)."""
        r = self.profile.restart
        return max(min(r.backoff_max, MACHINE_RETRY_MAX), r.backoff_initial)

    # -- stopping ---------------------------------------------------------------------------
    def _stop_processes(self, *, keep_inference: bool = False,
                        stacks: bool = False) -> bool | None:
        """Stop every component tree (but the kept server's, when `keep_inference` and it
        still runs: prime-rl's `rl` without [inference], its tree) and the containers, on a
        worker thread; the phase says what follows (a restart decision, or the end the stop
        leads to)."""
        if Task.STOP in self._tasks:
            return None  # one stop at a time: the running one ends in the current phase
        # (No server left to keep: the recovery stops what is there.)
        keep = INFERENCE if keep_inference and self._kept_server() is not None else None
        if self._prober is not None:
            self._prober.stop()
        handles = [h for h in self.components.values() if h.name != keep]
        old = self._old_launcher
        # A failed attempt's launcher still saying its status (`_stop_rest_at_once`) goes with
        # this stop too, its held members ended first (held, they would wait for the SIGKILL).
        held = list(old.held) if old is not None else []
        if old is not None and old.handle not in handles and old.handle.identity.alive():
            handles.append(old.handle)
        end_held_trees = self._hooks.end_held
        grace = self._stop_grace()  # (the rest of it, for a stop taken over)
        pool = self._pool
        pool_lock = self._pool_lock
        run_id = self.run_id
        stop_tree = self._hooks.stop_tree

        def job() -> TaskOutcome:
            if held and end_held_trees is not None:
                end_held_trees(held)
            if keep is not None:
                # Only the rest's trees: the run's marker and cgroup hold the kept server too.
                summary = stop_tree([h.identity for h in handles], [h.pgid for h in handles],
                                    run_id, grace, sweep=False)
            else:
                summary = stop_tree([h.identity for h in handles], [h.pgid for h in handles],
                                    run_id, grace)
            if pool is not None:
                # Containers go with the attempt; the next attempt creates fresh ones.
                with pool_lock:
                    pool.down()
                summary += "; containers removed"
            return TaskOutcome(summary, _pool_status(pool))

        if stacks:
            # Where each process hung, looked at before the kill (bounded; airvisor.stacks):
            # the hung attempt's first stop only (the core decides), never a later one.
            job = with_stacks_first(job, self.store, run_id, self.attempt, self.attempt_dir)
        launcher = self.components.get(LAUNCHER)
        failure = self.machine.failure
        if failure is not None and not failure.status_known and failure.component is not None \
                and self.phase == Phase.RECOVERY_STOPPING \
                and launcher is not None and not launcher.exited:
            if self._can_stop_rest_at_once(launcher, failure.component):
                self._stop_rest_at_once(launcher, failure.component, keep, stacks)
                return keep is not None
            # The member's status is the launcher's (it reaped it): let it say it before its
            # tree is stopped; the line is read when the stop ends (`_after_stop`).
            job = _after_launcher_report(job, launcher.log.path, failure.component)
        self._run_task(Task.STOP, job)
        return keep is not None

    def _can_stop_rest_at_once(self, launcher: ComponentHandle, failed: str) -> bool:
        """The rest can be stopped without waiting for the launcher's line (issue 30 item 4):
        the launcher is this daemon's child (its exit is seen, with its log read then), the
        failed component is one of its members as found, and the hooks can hold one still."""
        return launcher.launched is not None and failed in self._member_ids \
            and self._hooks.hold_trees is not None and self._hooks.end_held is not None

    def _stop_rest_at_once(self, launcher: ComponentHandle, failed: str, keep: str | None,
                           stacks: bool) -> None:
        """The stop of a member's death whose status prime-rl's launcher is to say (it reaped
        the member), without waiting for that line (issue 30 item 4): the members that must
        not end before the launcher's next look are held still (`held_for_report`), every
        other process of the attempt (the launcher's process group but the launcher and the
        held, and the attempt's other components but the kept server) is stopped directly by
        identity, never the launcher; the stop then ends, and the next attempt is prepared at
        once. The launcher is left to say the status and exit by itself (`_finish_old_launcher`,
        bounded); its exit, reported as its attempt's, completes that attempt's failure
        (`_old_launcher_exited`)."""
        assert self._hooks.hold_trees is not None and self._hooks.end_held is not None
        hold, end_held_trees = self._hooks.hold_trees, self._hooks.end_held
        held_names = held_for_report(failed, self._member_ids)
        to_hold = [self._member_ids[name] for name in held_names]
        handles = [h for h in self.components.values() if h.name not in (keep, LAUNCHER)]
        grace = self._stop_grace()
        pool, pool_lock = self._pool, self._pool_lock
        run_id, stop_tree = self.run_id, self._hooks.stop_tree
        group, launcher_pid = launcher.pgid, launcher.identity.pid
        old = OldLauncher(self.attempt, launcher, failed, [])
        self._old_launcher = old
        self.store.upsert_component(self.run_id, self.attempt, LAUNCHER, state="stopping")

        def job() -> TaskOutcome:
            old.held = hold(to_hold)
            held = {i.pid for i in old.held}
            # The launcher's group holds its members and what they left (a SIGKILLed torchrun's
            # workers): all of it but the launcher and the held, by identity.
            rest = [i for i in group_members(group) if i.pid not in held and i.pid != launcher_pid]
            rest += [h.identity for h in handles]
            summary = stop_tree(rest, [h.pgid for h in handles], run_id, grace, sweep=False)
            summary += (f"; {len(held)} held for prime-rl's launcher to say {failed}'s status"
                        if held else "")
            if pool is not None:
                with pool_lock:
                    pool.down()
                summary += "; containers removed"
            self._background(f"old-launcher-{run_id}", lambda: _finish_old_launcher(
                old, grace, stop_tree, end_held_trees, run_id))
            return TaskOutcome(summary, _pool_status(pool))

        if stacks:
            job = with_stacks_first(job, self.store, run_id, self.attempt, self.attempt_dir)
        self._run_task(Task.STOP, job)

    def _after_stop(self, event: TaskDone) -> None:
        keeping = self.machine.keeping  # (the machine forgets it with the stop's end)
        old = self._old_launcher
        for handle in self.components.values():
            if keeping and handle.name == INFERENCE:
                continue
            if old is not None and handle is old.handle:
                continue  # (left to say its status and exit: `_old_launcher_exited`)
            handle.exited = True
            self.store.upsert_component(self.run_id, self.attempt, handle.name, state="stopped")
        for name in self._members:  # stopped with the launcher's tree
            self.store.upsert_component(self.run_id, self.attempt, name, state="stopped")
        outcome: TaskOutcome | None = event.result
        self._record_containers(outcome.containers if outcome is not None else ())
        summary = outcome.summary if outcome is not None else event.error
        self._event("stopped_components", f"components stopped: {summary}")
        failure = self.machine.failure
        launcher_log = self._launcher_log()
        if launcher_log is not None and failure is not None and failure.component is not None \
                and not failure.status_known:
            # The launcher's line naming the exit status of a member whose failure was recorded
            # without it (the launcher reaped it first), also one written before a new daemon
            # adopted the run or took its recovery over: the failure gets its status.
            child = launcher_report(launcher_log, failure.component)
            if child is not None:
                self._exit_status_read(child.component, child.code)
        if old is not None and old.attempt != self.attempt \
                and not old.handle.identity.alive():
            # An earlier attempt's launcher this stop ended (it had not exited by itself yet):
            # what it said is read now, before the run may end (its exit comes after).
            self._old_launcher = None
            child = launcher_report(old.handle.log.path, old.component)
            if child is not None:
                self._exit_status_read(child.component, child.code, attempt=old.attempt)
        self._decide(self._down_event())

    def _launcher_log(self) -> Path | None:
        """The attempt's launcher's log: its handle's, or (a recovery a new daemon took over
        after the launcher died) where the store recorded it."""
        launcher = self.components.get(LAUNCHER)
        if launcher is not None:
            return launcher.log.path
        for comp in self.store.components(self.run_id, self.attempt):
            if comp.name == LAUNCHER and comp.log_path:
                return Path(comp.log_path)
        return None

    # -- timers and progress -----------------------------------------------------------------
    def _check_rollouts(self) -> bool:
        """What the environment reported of its episodes (airvisor.box._rollouts): warnings
        in the run's events; True when the run stops for a person."""
        if self._rollouts is None or self.phase not in (Phase.STARTING, Phase.RUNNING):
            return False
        for notice in self._rollouts.poll():
            kind, message, data = event_of(notice)
            self._event(kind, message, **data)
            if isinstance(notice, NeedsPerson):
                self.store.merge_run_details(self.run_id, needs_person=data)
                self._fail(notice.message, None, hopeless=True)
                return True
        return False

    def _watch(self, now: float) -> None:
        self._poll_adopted()
        self._read_progress(now)
        self._plan_next_attempt(now)
        if self._check_rollouts():
            return
        if self.mode == "launcher" and now >= self._next_member_scan:
            self._record_members()
            # A look into the tree reads the whole process table: often until the three are
            # found, then rarely (a relaunch inside prime-rl is not a thing; this only refreshes).
            wanted = {"trainer", "orchestrator"} if self.split else set(VIEWED)
            found = wanted <= set(self._members)
            self._next_member_scan = now + (MEMBER_RESCAN_INTERVAL if found
                                            else MEMBER_SCAN_INTERVAL)
        if not isinstance(self._watchdogs(now), Healthy):
            return  # (acted on, or training finished: the launcher is ending)
        if self._pool is not None and not self._tasks \
                and self.phase == Phase.RUNNING and now >= self._next_container_check:
            self._next_container_check = now + self.profile.containers.health_interval
            pool, pool_lock = self._pool, self._pool_lock

            def check() -> TaskOutcome:
                with pool_lock:
                    changes = pool.check()
                return TaskOutcome(changes, _pool_status(pool))

            self._run_task(Task.CONTAINERS, check)

    def _plan_next_attempt(self, now: float) -> None:
        """Have prime-rl resolve, ahead and on its own worker, the attempt a failure now would
        launch (the newest complete checkpoint's): the preflight then finds it done. Looked at
        every PLAN_AHEAD_INTERVAL while the attempt lives: a look whose inputs (checkpoint,
        profile, config files, hashed) are unchanged resolves nothing."""
        if self.layout is None or now < self._next_plan_ahead:
            return
        self._next_plan_ahead = now + PLAN_AHEAD_INTERVAL
        self._hooks.plan_ahead(self.profile, self.layout,
                               split=self.profile.restart.scope == "auto")

    # The watchdogs' facts (the core's `_watchdogs`).
    def _stall_clock_from(self, now: float) -> float:
        return self._attempt_started

    def _started_at(self) -> float:
        return self._attempt_started

    def _ready_timeout(self) -> float | None:
        return self.profile.health.ready_timeout

    def _training_over(self) -> bool:
        # The finished lines: prime-rl's launcher then ends the run itself.
        return self._training_finished()

    def _finish_limit(self) -> float:
        # The launcher's own clean-up time (v0.4 rl.py:529-536 waits 60 s per child) plus ours.
        return FINISH_TIMEOUT + self.profile.restart.stop_grace

    def _finish_overdue_reason(self) -> str:
        return ("trainer and orchestrator finished; prime-rl's launcher did not exit by itself "
                "and is stopped")

    def _poll_adopted(self) -> None:
        for handle in self.components.values():
            if handle.launched is None and not handle.exited and not handle.identity.alive():
                self._post(ComponentExited(self.run_id, self.attempt, handle.name, None,
                                           self._wall()))

    def _read_progress(self, now: float) -> None:
        children: list[ChildFailure] = []

        def launcher_line(source: str, line: str) -> None:
            if source == LAUNCHER and not children:
                child = child_failure_from_line(line)
                if child is not None:
                    children.append(child)

        sources: list[tuple[str, LogView | LogTail]] = [
            (h.name, h.log) for h in self.components.values()]
        sources += list(self.views.items())
        self._scan_logs(now, sources, self._metrics, launcher_line)
        if children and self._training_finished():
            # The inference server ended badly while the launcher stopped it after training.
            self._note_once("child_failed_after_training",
                            f"{children[0].describe()} after training finished (not a failure "
                            "of the run)")
        elif children and self.phase in (Phase.STARTING, Phase.RUNNING):
            # prime-rl's launcher names the child that failed, then spends up to a minute per
            # child stopping the rest (v0.4 rl.py:529-536): act on its line, not on its exit.
            child = children[0]
            self._fail(f"{child.describe()} (reported by prime-rl's launcher)",
                       child.component if child.component in self.views else LAUNCHER)

    def _on_milestone(self, source: str, milestone: str) -> None:
        super()._on_milestone(source, milestone)
        handle = self.components.get(source)
        if handle is not None and milestone in self._finished:
            handle.finished = True

    def _record_members(self) -> None:
        """Record the components prime-rl's launcher started (pid, log, GPUs) as the run's
        members, for status, `airvisor logs` and the run page. Not adopted or stopped one by one:
        the launcher's tree (its process group and marker) is stopped as a whole."""
        launcher = self.components.get(LAUNCHER)
        if launcher is None or launcher.exited or self.layout is None:
            return
        found = self._hooks.members(launcher.identity.pid)
        for name, pid in found.items():
            if self._members.get(name) == pid:
                continue
            self._members[name] = pid
            # With its start time: a new daemon tells it from a later process with its pid.
            identity = identity_of(pid)
            create_time = identity.create_time if identity is not None else None
            if identity is not None:
                self._member_ids[name] = identity
            self._watch_member(name, pid, create_time)
            log_path = self.layout.log_file(name) if name in VIEWED else None  # type: ignore[arg-type]
            gpus = list(getattr(self.profile.gpus, name, [])) if name in VIEWED else []
            self.store.upsert_component(
                self.run_id, self.attempt, name, kind="member", state="running", pid=pid,
                pgid=launcher.pgid, create_time=create_time, argv=[], gpus=gpus,
                log_path=str(log_path) if log_path is not None else None, exit_code=None)

    def _adopt_members(self) -> None:
        """The members the last supervisor recorded for the adopted attempt: each still alive
        (pid and start time) is watched again; one already dead (it died while no supervisor
        watched, its launcher still alive) is that member's failure now, decided as for a
        death seen live (its scope too: a healthy kept server is kept), not left to show as
        running until some unrelated exit is acted on."""
        dead = []
        for comp in self.store.components(self.run_id, self.attempt):
            if comp.kind != "member" or comp.state not in ("running", "starting") \
                    or comp.pid is None:
                continue
            self._members[comp.name] = comp.pid
            if component_alive(comp, self.run_id):
                self._watch_member(comp.name, comp.pid, comp.create_time)
            else:
                dead.append(comp)
        # Several may be dead (the launcher's clean-up stops the rest after the first failed):
        # the one its line names failed, with the status it says; it is acted on first (the
        # rest's deaths are then the recovery's, not failures of their own).
        launcher = self.components.get(LAUNCHER)
        named = launcher_first_report(launcher.log.path) if launcher is not None else None
        dead.sort(key=lambda c: named is None or c.name != named.component)
        for comp in dead:
            assert comp.pid is not None
            self.store.upsert_component(self.run_id, self.attempt, comp.name, state="exited")
            # Its status was its parent's to collect while nobody watched: the launcher's line
            # says it, else it is unknown (and the stop waits for that line).
            code = int(named.code) if named is not None and named.component == comp.name \
                else None
            self._post(MemberExited(self.run_id, self.attempt, comp.name, comp.pid, code,
                                    self._wall()))

    def _watch_member(self, name: str, pid: int, create_time: float | None = None) -> None:
        """Watch a member's exit directly: the report is posted as a MemberExited event, so the
        main loop wakes for it at once."""
        if self._death_watch is None:
            run_id, attempt, post = self.run_id, self.attempt, self._post

            def on_death(death: Death) -> None:  # the watcher's thread: hand it over only
                post(MemberExited(run_id, attempt, death.key, death.pid, death.returncode,
                                  death.seen_at))

            self._death_watch = self._hooks.death_watch(on_death)
        self._death_watch.watch(name, pid, create_time)

    def _record_containers(self, statuses: tuple[Any, ...]) -> None:
        for status in statuses:
            self.store.upsert_component(
                self.run_id, self.attempt, status.name, kind="container", state=status.state,
                container_id=status.container_id, health=status.health,
                restarts=status.restarts, gpus=list(status.gpus),
            )
