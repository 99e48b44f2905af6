"""RunManager: every run this process supervises, and the loop that drives them.

Other threads (the API, signal flags) only enqueue; `tick()` on the main thread dispatches events
to the run supervisors and fires their timers. Exits are noticed at once because the waiter
threads post into the same queue the loop blocks on.
"""

from __future__ import annotations

import functools
import os
import queue
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import psutil

from airvisor._logfile import LogTail
from airvisor._logging import get_logger
from airvisor.box._supervisor import ComponentHandle, Hooks, RunSupervisor
from airvisor.box._takeover import (
    finish_if_completed,
    record_accepted,
    refresh_adopted,
    unfinished_commands,
)
from airvisor.core import Command, Event, recorded_failure
from airvisor.core._logview import written_before
from airvisor.policy import (
    BootAction,
    Failure,
    Phase,
    RunState,
    choose_resume_step,
    decide_takeover,
    phase_of_record,
)
from airvisor.primerl import (
    archive_run_dir,
    prepare_run,
    run_dir_used,
    run_layout,
    step_from_log_line,
    with_stable_tracker_ids,
)
from airvisor.proc import ProcessIdentity, process_alive, terminate_tree
from airvisor.proc._hold import end_held, hold_trees
from airvisor.profile import ProfileError
from airvisor.profile._schema import Profile
from airvisor.reaper import prepare_machine as reaper_prepare
from airvisor.slurm import SlurmRunSupervisor, is_slurm_profile
from airvisor.store import AlreadySubmitted, RunRecord, Store

log = get_logger("airvisor.box")

StartMode = Literal["auto", "resume", "fresh"]


class Supervisor(Protocol):
    """What the manager drives: a one-box `RunSupervisor`, or a Slurm mode supervisor
    (`airvisor.slurm.SlurmRunSupervisor`)."""

    run_id: str
    profile: Profile
    attempt: int
    step: int | None
    finished: threading.Event

    @property
    def state(self) -> RunState: ...

    @property
    def members(self) -> dict[str, int]: ...

    def begin(self) -> None: ...

    def handle(self, event: Event) -> None: ...

    def on_tick(self) -> None: ...

    def detach(self) -> None: ...

    def on_internal_error(self, message: str) -> None: ...


class RunConflict(Exception):
    """The run cannot start (or be restarted) given what is already running or on disk."""


class UnknownRun(Exception):
    pass


def new_run_id(name: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    # ASCII only, starting with a letter or digit: the API's run-id pattern accepts exactly these.
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_" else "-"
                   for c in name)[:40].lstrip("-_") or "run"
    return f"{safe}-{stamp}-{secrets.token_hex(2)}"


def profile_gpus(profile: Profile) -> set[int]:
    gpus = profile.gpus
    container_gpus = profile.containers.gpus or gpus.containers
    return set(gpus.inference) | set(gpus.trainer) | (
        set(container_gpus) if profile.containers.enabled else set())


def run_ports(profile: Profile) -> dict[int, tuple[str, str]]:
    """The fixed ports a run listens on: port -> (what, how to pick another)."""
    ports: dict[int, tuple[str, str]] = {}
    if profile.trainer.rdzv_port is not None:
        ports[profile.trainer.rdzv_port] = (
            "trainer's torchrun rendezvous port ([trainer] rdzv_port)",
            "set [trainer] rdzv_port in the profile to a free port")
    if profile.inference.port is not None:
        ports[profile.inference.port] = (
            "inference server's port", "set inference.server.port in the prime-rl config "
            "to another port")
    return ports


def supervisor_alive(run: RunRecord) -> bool:
    """Is the process recorded as this run's supervisor still that process?"""
    return process_alive(run.supervisor_pid, run.supervisor_started)


def _own_create_time() -> float:
    return psutil.Process().create_time()


def default_hooks(manager: RunManager) -> Hooks:
    def prepare_machine(profile: Profile, run_id: str, live: set[str],
                        own_pids: frozenset[int] = frozenset()) -> str:
        """`own_pids`: the run's processes the next attempt keeps (its kept inference server):
        never reaped."""
        def on_log(kind: str, data: dict[str, Any]) -> None:
            if kind == "preflight.waiting":
                # The run's page and the gpu_wait notification read this event.
                manager.store.add_event(run_id, "gpu_wait", str(data.get("message", "")),
                                        data={k: v for k, v in data.items() if k != "message"})
            elif kind == "reaper.processes":  # each process the preflight stopped or left
                manager.store.add_event(run_id, "reap", str(data.get("message", "")),
                                        data={k: v for k, v in data.items() if k != "message"})

        report = reaper_prepare(profile, run_id=run_id, live_run_ids=live, own_pids=own_pids,
                                log=on_log)
        return str(getattr(report, "summary", report))

    def stop_tree(identities: list[ProcessIdentity], pgids: list[int], run_id: str,
                  grace: float, sweep: bool = True) -> str:
        """`sweep`: also every carrier of the run's marker and its cgroup (every stop but
        the one that keeps the run's inference server: that stops the given trees only)."""
        report = terminate_tree(
            [i.pid for i in identities], pgids=pgids,
            marker_run_id=run_id if sweep else None, grace=grace,
            identities={i.pid: i.create_time for i in identities},
        )
        text = (f"{len(report.terminated)} exited on SIGTERM, {len(report.killed)} needed "
                f"SIGKILL")
        if report.survivors:
            text += "; still alive: " + ", ".join(
                f"{s.pid} ({s.status}) {s.cmdline[:60]}" for s in report.survivors)
        return text

    def container_pool(profile: Profile, run_id: str) -> Any:
        # lazy: the docker SDK only for a run with task containers
        from airvisor.containers import ContainerPool

        section = profile.containers
        return ContainerPool(section, run_id=run_id, run_name=profile.run.name,
                             gpus=list(section.gpus or profile.gpus.containers))

    # A member's death whose status prime-rl's launcher is to say: the rest is stopped without
    # waiting for that line, the members it needs held still meanwhile (issue 30 item 4).
    return Hooks(prepare_machine=prepare_machine, stop_tree=stop_tree,
                 container_pool=container_pool, live_run_ids=manager.live_run_ids,
                 hold_trees=hold_trees, end_held=end_held)


class RunManager:
    def __init__(
        self,
        store: Store,
        *,
        foreground: bool = False,
        hooks: Hooks | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        address: str | None = None,
    ) -> None:
        self.store = store
        self.foreground = foreground
        # Where a client reaches this supervisor (the daemon's URL); None for a foreground run.
        self.address = address
        self._clock = clock
        self._wall_clock = wall_clock
        self._queue: queue.Queue[Event] = queue.Queue()
        self._runs: dict[str, Supervisor] = {}
        self._lock = threading.RLock()
        self.hooks = hooks or default_hooks(self)
        self._pid = os.getpid()
        self._started = _own_create_time()

    # -- queries ---------------------------------------------------------------------------
    def supervisor(self, run_id: str) -> Supervisor | None:
        return self._runs.get(run_id)

    def live_run_ids(self) -> set[str]:
        with self._lock:
            ours = {rid for rid, sup in self._runs.items() if not sup.state.terminal}
        others = {run.id for run in self.store.live_runs()
                  if run.id not in self._runs and supervisor_alive(run)}
        return ours | others

    def status_line(self) -> str:
        with self._lock:
            live = [s for s in self._runs.values() if not s.state.terminal]
        if not live:
            return "idle"
        return "; ".join(
            f"{s.run_id}: {s.state} step {s.step if s.step is not None else '-'} "
            f"attempt {s.attempt}" for s in live)

    # -- commands (any thread) ---------------------------------------------------------------
    def submit(self, profile: Profile, *, start_mode: StartMode = "auto",
               request_id: str | None = None) -> RunRecord:
        """Accept a run; it proceeds on the main loop's ticks.

        A profile not yet bound to prime-rl's resolution is checked first exactly as `airvisor
        check` / `start` check it (prime-rl's own validation, airvisor's checks, this machine):
        raises ProfileError listing the problems, or RunConflict.

        `request_id` names the submission (the CLI sends one): when it already created a run,
        raises AlreadySubmitted with that run before any check or change, so a client that
        timed out and submits again gets its run, not a second one.
        """
        if request_id is not None and (done := self.store.run_by_request(request_id)):
            raise AlreadySubmitted(done)
        if profile.resolved is None:
            prepared = prepare_run(profile)
            if prepared.problems:
                raise ProfileError(prepared.problems)
            profile = prepared.profile
        with self._lock:
            # Again under the lock: the same request may have come twice at once.
            if request_id is not None and (done := self.store.run_by_request(request_id)):
                raise AlreadySubmitted(done)
            self._check_conflicts(profile)
            run_dir = Path(profile.run.output_dir or ".")
            self._prepare_run_dir(profile, run_dir, start_mode)
            run_id = new_run_id(profile.run.name)
            while self.store.get_run(run_id) is not None:
                # Two runs of one name in one second drew the same suffix (1 in 65,536): the
                # store's key would refuse the second with an error the user cannot act on.
                run_id = new_run_id(profile.run.name)
            # One experiment-tracker run across every relaunch (primerl/_tracker.py): ids fixed
            # now, in the profile every attempt (and a later daemon) launches from.
            profile, tracker_ids = with_stable_tracker_ids(profile, run_id)
            record = self.store.create_run(
                run_id=run_id, name=profile.run.name,
                profile_path=str(profile.source) if profile.source else None,
                profile=profile.model_dump(mode="json"), run_dir=str(run_dir),
                gpus=sorted(profile_gpus(profile)), supervisor_pid=self._pid,
                request_id=request_id,
            )
            self._claim(run_id)
            supervisor = self._new_supervisor(run_id, profile)
            self._runs[run_id] = supervisor
            self.store.add_event(run_id, "submitted",
                                 f"run {run_id} accepted (profile {profile.run.name})",
                                 data={"start_mode": start_mode})
            if tracker_ids:
                self.store.merge_run_details(run_id, tracker=tracker_ids)
                shown = ", ".join(f"{k} {v}" for k, v in tracker_ids.items())
                self.store.add_event(run_id, "tracker", "every attempt continues the same "
                                     f"experiment-tracker run: {shown}", data=tracker_ids)
            self._queue.put(Command(run_id, "start"))
            return record

    def request_stop(self, run_id: str) -> None:
        self._command(run_id, "stop")

    def request_restart(self, run_id: str) -> None:
        self._command(run_id, "restart")

    def _command(self, run_id: str, action: str) -> None:
        with self._lock:
            supervisor = self._runs.get(run_id)
            if supervisor is None:
                record = self.store.get_run(run_id)
                if record is None:
                    raise UnknownRun(f"no run with id {run_id!r}")
                if RunState(record.state).terminal:  # released once it ended
                    raise RunConflict(f"run {run_id} has already ended ({record.state})")
                raise RunConflict(f"run {run_id} is not supervised by this process "
                                  "(owned by another airvisor)")
            if supervisor.state.terminal:
                raise RunConflict(f"run {run_id} has already ended ({supervisor.state})")
        record_accepted(self.store, run_id, action)  # the next daemon does it if this one dies
        self._queue.put(Command(run_id, action))

    def post(self, event: Event) -> None:
        self._queue.put(event)

    # -- the loop (main thread) ----------------------------------------------------------------
    def tick(self, timeout: float) -> None:
        try:
            event: Event | None = self._queue.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            event = None
        while event is not None:
            self._dispatch(event)
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                event = None
        with self._lock:
            supervisors = list(self._runs.values())
        for supervisor in supervisors:
            if not supervisor.state.terminal:
                self._guard(supervisor, supervisor.on_tick)
        self._release_finished()

    def _release_finished(self) -> None:
        """A run that ended leaves memory (its history stays in SQLite): a daemon's memory
        does not grow with the number of runs it has seen. One with a worker task still
        reporting is kept until it has."""
        with self._lock:
            for run_id, supervisor in list(self._runs.items()):
                if supervisor.state.terminal and not getattr(supervisor, "busy", False):
                    del self._runs[run_id]

    def _dispatch(self, event: Event) -> None:
        supervisor = self._runs.get(event.run_id)
        if supervisor is None:
            return
        if isinstance(event, Command) and event.action == "start":
            if supervisor.state == RunState.PENDING:
                self._guard(supervisor, supervisor.begin)
            return
        self._guard(supervisor, lambda: supervisor.handle(event))

    def _guard(self, supervisor: Supervisor, action: Callable[[], None]) -> None:
        """A bug in one run's handling must not take the daemon (and every other run) down."""
        try:
            action()
        except Exception as exc:
            log.exception("internal error while supervising", run=supervisor.run_id)
            message = f"internal error: {type(exc).__name__}: {exc}"
            self.store.add_event(supervisor.run_id, "internal_error", message)
            try:
                # Never wedged, whatever the backend: the core's policy decides (the attempt
                # fails, or the run outside an attempt is aborted).
                supervisor.on_internal_error(message)
            except Exception:
                log.exception("internal error while failing the run", run=supervisor.run_id)

    def shutdown(self, *, stop_runs: bool, timeout: float | None = None) -> None:
        """Leave training running (a later daemon adopts it) unless `stop_runs`."""
        with self._lock:
            live = [s for s in self._runs.values() if not s.state.terminal]
        if stop_runs:
            for supervisor in live:
                self._queue.put(Command(supervisor.run_id, "stop"))
            limit = timeout if timeout is not None else max(
                [s.profile.restart.stop_grace for s in live] + [0.0]) + 15.0
            deadline = self._clock() + limit
            while any(not s.state.terminal for s in live) and self._clock() < deadline:
                self.tick(0.1)
        for supervisor in live:
            supervisor.detach()

    # -- boot: adopt or resume -------------------------------------------------------------------
    def adopt_on_boot(self) -> list[str]:
        """Take over runs whose supervisor died, each as its recorded phase says
        (`airvisor.policy.decide_takeover`): finish a stop, adopt a live attempt, resume a
        recovery or a run whose components died, begin one that never started."""
        taken: list[str] = []
        for run in self.store.live_runs():
            if run.id in self._runs or supervisor_alive(run):
                continue
            try:
                profile = Profile.model_validate(run.profile)
            except ValueError as exc:
                self.store.set_phase(run.id, Phase.FAILED,
                                     last_error=f"stored profile unreadable: {exc}")
                continue
            if is_slurm_profile(profile):
                with self._lock:
                    self._claim(run.id)
                    slurm_supervisor = self._new_slurm_supervisor(run.id, profile,
                                                                  Phase.TAKEOVER)
                    self._runs[run.id] = slurm_supervisor
                self._guard(slurm_supervisor, functools.partial(slurm_supervisor.reattach, run))
                taken.append(run.id)
                for action_name in unfinished_commands(self.store, run.id):
                    self._queue.put(Command(run.id, action_name))
                continue
            phase = phase_of_record(run.phase, run.state)
            handles, dead = self._component_handles(run)
            action = decide_takeover(phase, attempt=run.attempt, alive=handles, dead=dead)
            if action in (BootAction.ADOPT, BootAction.RESUME) and \
                    finish_if_completed(self.store, run, profile, claim=self._claim):
                continue  # it ended while no supervisor watched: recorded, not relaunched
            with self._lock:
                self._claim(run.id)
                supervisor = self._new_box_supervisor(run.id, profile, phase=Phase.TAKEOVER)
                supervisor.step = run.step
                self._runs[run.id] = supervisor
            self.store.add_event(run.id, "takeover", f"daemon took over the run, recorded "
                                 f"{phase}: {action.value.replace('_', ' ')}",
                                 data={"phase": str(phase), "action": str(action)})
            self._guard(supervisor, functools.partial(
                self._take_over, supervisor, run, action, phase, handles, dead))
            taken.append(run.id)
            for action_name in unfinished_commands(self.store, run.id):  # accepted, never done
                self._queue.put(Command(run.id, action_name))
        return taken

    def _take_over(self, supervisor: RunSupervisor, run: RunRecord, action: BootAction,
                   phase: Phase, handles: dict[str, ComponentHandle], dead: list[str]) -> None:
        if action == BootAction.FINISH_STOP:
            supervisor.finish_stop(run.attempt, handles, phase)
        elif action == BootAction.BEGIN:
            supervisor.begin()
        elif action == BootAction.RELAUNCH:
            supervisor.relaunch_after_boot(run.attempt)
        elif action == BootAction.CONTINUE_RECOVERY:
            supervisor.resume_after_boot(run.attempt, handles, recorded_failure(
                run, "the daemon restarted during recovery"))
        elif action == BootAction.ADOPT:
            refresh_adopted(self.store, run)  # step and progress time, before any answer
            # The run's step may be an earlier attempt's (the step before a crash): only the
            # attempt's own Step lines say whether it has begun training.
            # (its start on the last supervisor's clock, else the store's record of it)
            began = next(((a.get("details") or {}).get("began_at", a.get("started_at"))
                          for a in self.store.attempts(run.id)
                          if a.get("number") == run.attempt), None)
            own = _step_from_logs(supervisor, handles, began)
            known = max((s for s in (run.step, own) if s is not None), default=None)
            supervisor.adopt(run.attempt, handles, known, resume_step=run.resume_step,
                             attempt_step=own, began=began)
            pids = ", ".join(str(h.identity.pid) for h in handles.values())
            self.store.add_event(run.id, "adopted", f"adopted live run: "
                                 f"{', '.join(sorted(handles))} (pids {pids})")
        else:
            why = (f"components died while no supervisor watched: {', '.join(dead)}"
                   if dead else "the run had not started its components")
            if profile_resumes(supervisor):
                choice = choose_resume_step(supervisor.layout.scan())  # type: ignore[union-attr]
                self.store.add_event(run.id, "boot_resume",
                                     f"{why}; resuming ({choice.describe()})")
            supervisor.resume_after_boot(run.attempt, handles,
                                         Failure(why, "boot", dead[0] if dead else None))

    def _component_handles(self, run: RunRecord) -> tuple[dict[str, ComponentHandle], list[str]]:
        handles: dict[str, ComponentHandle] = {}
        dead: list[str] = []
        for comp in self.store.components(run.id, run.attempt):
            if comp.kind != "process" or comp.state not in ("running", "starting"):
                continue
            if comp.pid is None or comp.create_time is None:
                dead.append(comp.name)
                continue
            identity = ProcessIdentity(comp.pid, comp.create_time)
            if not identity.alive():
                dead.append(comp.name)
                continue
            handles[comp.name] = ComponentHandle(
                name=comp.name, identity=identity, pgid=comp.pgid or comp.pid,
                log=LogTail(Path(comp.log_path or os.devnull), from_end=True),
                argv=comp.argv, gpus=comp.gpus, launched=None,
            )
        return handles, dead

    # -- internals --------------------------------------------------------------------------------
    def _new_supervisor(self, run_id: str, profile: Profile) -> Supervisor:
        """The backend where the run's processes run: a Slurm job when prime-rl's config has
        a [slurm] table, else this box."""
        if is_slurm_profile(profile):
            return self._new_slurm_supervisor(run_id, profile)
        return self._new_box_supervisor(run_id, profile)

    def _new_slurm_supervisor(self, run_id: str, profile: Profile,
                              phase: Phase = Phase.PENDING) -> SlurmRunSupervisor:
        return SlurmRunSupervisor(run_id=run_id, profile=profile, store=self.store,
                                  post=self._queue.put, hooks=self.hooks, clock=self._clock,
                                  wall=self._wall_clock, phase=phase)

    def _new_box_supervisor(self, run_id: str, profile: Profile,
                            phase: Phase = Phase.PENDING) -> RunSupervisor:
        return RunSupervisor(run_id=run_id, profile=profile, store=self.store,
                             post=self._queue.put, hooks=self.hooks, clock=self._clock,
                             wall=self._wall_clock, phase=phase)

    def _claim(self, run_id: str) -> None:
        """Record this process as the run's supervisor: `stop` and the next daemon ask it."""
        self.store.update_run(run_id, supervisor_pid=self._pid, supervisor_started=self._started,
                              supervisor_kind="foreground" if self.foreground else "daemon",
                              supervisor_address=self.address)

    def _check_conflicts(self, profile: Profile) -> None:
        wanted_gpus = profile_gpus(profile)
        run_dir = Path(profile.run.output_dir or ".").resolve()
        ports = run_ports(profile)
        for run in self.store.live_runs():
            supervised_here = run.id in self._runs and not self._runs[run.id].state.terminal
            if not supervised_here and not supervisor_alive(run):
                # Its supervisor is gone and nobody adopted it: the preflight reaper will clear
                # its processes; record that it ended.
                self.store.set_phase(run.id, Phase.FAILED, last_error="abandoned: its "
                                     "supervisor exited and the run was not adopted")
                self.store.add_event(run.id, "abandoned", "run abandoned (supervisor gone)")
                continue
            other = Profile.model_validate(run.profile)
            shared = wanted_gpus & set(run.gpus)
            if shared:
                raise RunConflict(f"run {run.id} is live on GPU(s) {sorted(shared)}; stop it "
                                  f"first (airvisor stop {run.id}) or pick other GPUs")
            if Path(other.run.output_dir or ".").resolve() == run_dir:
                raise RunConflict(f"run {run.id} is live in the same run dir {run_dir}")
            for port, (what, fix) in ports.items():
                if port in run_ports(other):
                    raise RunConflict(f"run {run.id} is live and listens on port {port}, this "
                                      f"run's {what}; {fix}")

    def _prepare_run_dir(self, profile: Profile, run_dir: Path, start_mode: StartMode) -> None:
        """What to do with a run directory an earlier run used, decided before anything
        starts: refuse, resume (only from a complete checkpoint), or start fresh with the
        earlier files moved aside (archive) or deleted (replace). main's `ckpt.output_dir`
        outside the run directory goes with it."""
        layout = run_layout(profile) if profile.resolved else None
        dirs = layout.run_dirs() if layout is not None else [run_dir]
        used = [d for d in dirs if run_dir_used(d)]
        if not used:
            return
        mode = {"resume": "resume", "fresh": "archive"}.get(start_mode, profile.run.on_existing)
        if start_mode == "fresh" and profile.run.on_existing == "replace":
            mode = "replace"
        if mode in ("resume", "refuse"):
            choice = choose_resume_step(layout.scan()) if layout is not None else None
            where = (f"newest complete checkpoint: step {choice.step}"
                     if choice is not None and choice.step is not None
                     else "no complete checkpoint")
            if mode == "resume" and choice is not None and choice.step is not None:
                return
            if mode == "resume":
                skipped = "; ".join(f"step {step}: {why}" for step, why in
                                    (choice.skipped if choice is not None else ()))
                raise RunConflict(
                    f"cannot resume: {', '.join(map(str, used))} holds no complete checkpoint"
                    + (f" ({skipped})" if skipped else "")
                    + ". Start with --fresh to move the earlier files aside and train from "
                    "the beginning")
            raise RunConflict(
                f"output dir {', '.join(map(str, used))} already holds an earlier run ({where})"
                ". Start with --resume to continue from it, or --fresh to move it aside "
                "(or set [run] on_existing in the profile)")
        for directory in used:
            if mode == "replace":
                # A rename under the lock (instant), the delete on a thread of its own: a
                # large run directory must not hold the main loop (and systemd's watchdog).
                trash = archive_run_dir(directory, "deleting")
                threading.Thread(target=shutil.rmtree, args=(trash,),
                                 kwargs={"ignore_errors": True}, name="delete-old-run-dir",
                                 daemon=True).start()
            else:
                archived = archive_run_dir(directory, "old")
                log.info("moved earlier run aside", path=str(archived))


def profile_resumes(supervisor: RunSupervisor) -> bool:
    return supervisor.profile.restart.resume_on_boot and supervisor.layout is not None


def _step_from_logs(supervisor: RunSupervisor, handles: dict[str, ComponentHandle],
                    began: float | None) -> int | None:
    """The newest step the attempt's trainer log shows (written while no supervisor read it);
    None when it shows none yet. A log last written before the attempt `began` (wall time) is
    an earlier attempt's (main names the attempt's log directory only once its `rl` runs)."""
    step: int | None = None
    trainer = handles.get("trainer")
    path = trainer.log.path if trainer is not None else (
        supervisor.layout.log_file("trainer") if supervisor.layout is not None else None)
    if path is None or not path.exists() or (began is not None
                                              and written_before(path, began)):
        return None
    for line in LogTail(path).read_new_lines():
        found = step_from_log_line(line)
        if found is not None:
            step = max(step or 0, found)
    return step
