"""The simulated world behind the supervisor's adapters (`engine.Hooks`): a clock, a process
table, prime-rl's launcher as a small state machine per version, its logs and checkpoints
(real files, in that version's layout: `primerl.RunLayout`), a disk that fills and clears,
health probes, and the worker jobs the supervisor hands to `Hooks.background`, run when the
world's random choices say. Nothing here sleeps or starts a thread: one seed, one history.

prime-rl's launcher (both versions, the same monitor loop): a monitor thread per child blocks
in `process.wait()` and queues "<Name> failed with exit code N" (v0.4 rl.py:539-552, main
utils/process.py:96-105); the main loop looks once a second, logs `Error: ...`, terminates
every child and exits 1 (v0.4 rl.py:779-787, main entrypoints/rl.py:378-388). That loop runs
only while not both of the orchestrator and the trainer have ended (each monitor thread sets its
stop event as it queues its error); once both have, the launcher logs the orchestrator's status
first, then the trainer's ("<Name> failed with exit code N", exit 1), else its finished line,
and stops the inference server (v0.4 rl.py:779,789-808 "RL training finished!", main
entrypoints/rl.py:378,390-407 "Training finished!"). A member held still (SIGSTOP: the stop
that does not wait for that line, box/_stop.py `_stop_rest_at_once`) has not ended, so the
loop looks on and says the failed member's status; its clean-up's SIGTERM to a held member
acts only once the member is continued (SIGCONT), else its SIGKILL after 60 s does.

The split (restart.scope "auto", primerl/_split.py): airvisor launches the inference server as
its own process (its child, not the launcher's) and `rl` without [inference] beside it (the
rest: its launcher starts only the trainer and the orchestrator, which train against the run's
server: v0.4 rl.py:121-126, main entrypoints/rl.py:132,225-232); a recovery may keep that server
and launch only a new rest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from airvisor.core import Event, InferenceReady, ProbeFailed
from airvisor.primerl import RunLayout
from airvisor.primerl._layout import PROGRESS_FILE, STABLE, TRAINER_MARKER, V04_BUFFER_FILES
from airvisor.proc import ProcessIdentity, identity_of
from airvisor.proc._deathwatch import Death
from airvisor.proc._kill import KillReport
from airvisor.sim._schedule import Member

# Far above any kernel's pid_max (2**22): a simulated pid is never a real process.
PID_BASE = 10_000_000
STEP_SECONDS = 1.0  # one training step
INFERENCE_STARTUP = 2.0  # the server answers /health this long after its start
INFERENCE_SHUTDOWN = 3.0  # the inference server's exit after SIGTERM
CLEANUP_WAIT = 60.0  # the launcher's wait for a child that ignores SIGTERM, then SIGKILL
LAUNCHER_NAMES = {"0.4": "RL training finished!", "main": "Training finished!"}
REST_CONFIG = "rl-rest."
# A launcher whose looks are late (`HoldFault` "says-late"): its status line comes this long
# after the hold, past the daemon's wait for it (box/_stop.py LAUNCHER_REPORT_WAIT).
LATE_LOOK = 8.0  # the rest's config file (primerl/_split.py `plan_split`)

State = Literal["running", "stopped", "exited"]


class Blocked(BaseException):
    """A worker job waits on something not yet true (a process's exit): the world runs it
    again later. A BaseException so the core's task wrapper (`except Exception`) lets it by."""


@dataclass
class Proc:
    pid: int
    name: str  # launcher | inference | trainer | orchestrator
    run_id: str
    attempt: int
    started: float
    parent: int | None = None  # the launcher, for a member; None once re-parented
    state: State = "running"
    code: int | None = None
    generation: int = 0  # the daemon that started it (a later one adopts it: not its child)
    group: int = 0  # its process group: its launcher's for a member (Popen), else its own
    ended_at: float | None = None

    @property
    def alive(self) -> bool:
        return self.state != "exited"

    @property
    def identity(self) -> ProcessIdentity:
        return ProcessIdentity(self.pid, self.started)

    def wait(self) -> int:  # LaunchedLike: the launcher is airvisor's own child
        if self.state != "exited" or self.code is None:
            raise Blocked(self.pid)
        return self.code


@dataclass
class Launcher:
    """One prime-rl `rl` process and what it runs (the members and their training)."""

    proc: Proc
    version: str
    layout: RunLayout
    log: Path
    resume: int | None
    max_steps: int
    interval: int
    members: dict[str, Proc] = field(default_factory=dict)
    done: int = 0  # steps completed
    next_step_at: float = 0.0
    # The monitor threads' queue: (when it was queued, the error).
    errors: list[tuple[float, str]] = field(default_factory=list)
    partial_next: bool = False  # the next checkpoint write dies halfway
    cleanup_until: float | None = None  # stopping its children; exits then with exit_code
    exit_code: int = 1
    rest: bool = False  # `rl` without [inference] (the split): the server is not its child
    # What its monitor threads saw end, by member: (when, exit code). Its loop's condition.
    ended: dict[str, tuple[float, int]] = field(default_factory=dict)
    said_at: float | None = None  # when it logged its status or finished line
    # A `HoldFault`'s launcher: its looks are late ("says-late": its line comes `LATE_LOOK` s
    # after the hold, the next attempt long launched) or its clean-up never ends by itself
    # ("never-exits": stopped once the daemon's wait for its exit is over).
    quiet_until: float = -1.0
    never_exits: bool = False


@dataclass
class Watch:
    on_death: Callable[[Death], None]
    generation: int
    pids: dict[str, int] = field(default_factory=dict)
    closed: bool = False
    world: World | None = None

    def watch(self, key: str, pid: int, create_time: float | None = None) -> bool:
        """`DeathWatch.watch`: a process already gone is reported at once (status unknown)."""
        assert self.world is not None
        proc = self.world.procs.get(pid)
        if proc is None or not proc.alive:
            self.on_death(Death(key, pid, self.world.wall(), "at_watch", None))
            return False
        self.pids[key] = pid
        return True

    def close(self) -> None:
        self.closed = True


@dataclass
class Prober:
    run_id: str
    attempt: int
    interval: float
    failures: int
    post: Callable[[Event], None]
    generation: int
    ready: bool = False
    failed: int = 0
    next_at: float = 0.0
    active: bool = True

    def start(self) -> None:
        self.active = True

    def stop(self) -> None:
        self.active = False


@dataclass
class Job:
    name: str
    run: Callable[[], None]
    generation: int
    # Its waits (`World.wait_until`), in the order it made them: the deadline of each and,
    # once over, what it returned. A job let by (`Blocked`) runs again from its start, and
    # each wait it made already answers at once what it answered then.
    waits: list[tuple[float, bool | None]] = field(default_factory=list)
    cursor: int = 0


@dataclass(frozen=True)
class Launch:
    """A launch the supervisor asked for, with what the world knew at that moment."""

    at: float
    attempt: int
    name: str
    resume: int | None
    newest_complete: int | None


@dataclass(frozen=True)
class Kept:
    """A rest launched beside a server an earlier attempt started: a kept server."""

    at: float
    attempt: int
    server: Proc
    pid: int  # the server's pid and start time when it was kept
    started: float


@dataclass(frozen=True)
class Hold:
    """A `Hooks.hold_trees` call: the processes it held (SIGSTOP), of which attempt, when."""

    at: float
    attempt: int
    pids: tuple[int, ...]
    launcher: int  # the pid of that attempt's launcher (left to say the status)
    generation: int  # the daemon that held them


@dataclass(frozen=True)
class StopCall:
    at: float
    grace: float
    pids: tuple[int, ...]


class World:
    def __init__(self, root: Path, seed: int, *, version: str, max_steps: int,
                 interval: int, layout: RunLayout) -> None:
        self.root = root
        self.seed = seed
        self.version = version
        self.max_steps = max_steps
        self.interval = interval
        self.layout = layout
        self.now = 0.0
        self.procs: dict[int, Proc] = {}
        self.launchers: dict[int, Launcher] = {}
        self.watches: list[Watch] = []
        self.probers: list[Prober] = []
        self.jobs: list[Job] = []
        self.running: Job | None = None  # the worker job running now (`wait_until`)
        self.generation = 0  # the daemon's: its jobs, watchers and probers die with it
        self.disk_full_until = -1.0
        self.probe_hung_from: float | None = None
        self.launches: list[Launch] = []
        self.kept: list[Kept] = []  # each rest launched beside an earlier attempt's server
        # Servers (pid, start time) that failed their health: the probe's repeated failures,
        # or a kept-server probe's unhealthy answer. Never to be kept after that.
        self.failed_health: dict[tuple[int, float], float] = {}
        # The next kept-server probe's answer, armed by a KeptFault ("probe-fails" or
        # "probe-hangs"); None: the server's true health.
        self.kept_probe_fault: str | None = None
        self.stops: list[StopCall] = []
        self.holds: list[Hold] = []
        # Held (SIGSTOPped by `hold_trees`) and not continued since: pid -> when held.
        self.held: dict[int, float] = {}
        # A `HoldFault` on the launcher of the next attempt whose members are held.
        self.linger_next: str | None = None
        self.final_step_reached = False
        self.final_step_at: float | None = None
        # The machine's boot, on the clock of a process's start (`Proc.started`): before the
        # first process, until a reboot.
        self.booted_at = -1.0
        self._next_pid = PID_BASE
        self.on_member_exit: Callable[[Proc], None] = lambda proc: None

    # -- time ---------------------------------------------------------------------------------
    def wall(self) -> float:
        return 1_000_000.0 + self.now

    def monotonic(self) -> float:
        return self.now

    def chance(self, purpose: str) -> float:
        """The world's random choice for `purpose` at this moment, in [0, 1): a hash of the
        seed, the purpose and the time, never a draw from a shared stream, so that a choice
        does not shift when an unrelated one (a job a killed daemon never ran) is left out."""
        digest = hashlib.blake2b(f"{self.seed}:{purpose}:{self.now}".encode(), digest_size=8)
        return int.from_bytes(digest.digest(), "big") / 2**64

    def disk_full(self) -> bool:
        return self.now < self.disk_full_until

    # -- files --------------------------------------------------------------------------------
    def write(self, path: Path, line: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            handle.write(line + "\n")
        stamp = self.wall()
        os.utime(path, (stamp, stamp))  # the file's times are the sim's (LogView compares them)

    def newest_complete(self) -> int | None:
        """The newest checkpoint both halves of which are complete, as the world wrote it
        (not read through the layout: the oracle the supervisor's choice is checked against)."""
        best: int | None = None
        for step in self.layout.checkpoint_steps():
            status = self.layout.checkpoint_status(step)
            if status.trainer_complete and status.orchestrator_complete:
                best = step if best is None else max(best, step)
        return best

    def _save_checkpoint(self, launcher: Launcher, step: int, *, partial: bool) -> None:
        """Both halves in this version's layout, each in its writer's order (the trainer's DCP
        `.metadata` last; v0.4's orchestrator progress.pt in place, then the buffer with
        rollout_buffer last; main's progress.pt by rename). `partial`: stop halfway."""
        layout = launcher.layout
        trainer = layout.trainer_half(step)
        trainer.mkdir(parents=True, exist_ok=True)
        (trainer / "__0_0.distcp").write_text("w")
        orchestrator = layout.orchestrator_half(step)
        orchestrator.mkdir(parents=True, exist_ok=True)
        if partial:
            if self.version == "0.4" and self.chance(f"partial {step}") < 0.5:
                (orchestrator / PROGRESS_FILE).write_text("p")  # the buffer never written
            return
        (trainer / TRAINER_MARKER).write_text("m")
        (orchestrator / PROGRESS_FILE).write_text("p")
        if self.version == "0.4":
            (orchestrator / "buffer").mkdir(exist_ok=True)
            for name in V04_BUFFER_FILES:
                (orchestrator / "buffer" / name).write_text("")
            weights = layout.orchestrator_ckpt_dir() / f"step_{step}"
            (weights / "weight").mkdir(parents=True, exist_ok=True)
            (weights / STABLE).write_text("")

    # -- processes ----------------------------------------------------------------------------
    def _spawn(self, name: str, run_id: str, attempt: int, parent: int | None) -> Proc:
        self._next_pid += 1
        proc = Proc(self._next_pid, name, run_id, attempt, self.now, parent,
                    generation=self.generation,
                    group=parent if parent is not None else self._next_pid)
        self.procs[proc.pid] = proc
        return proc

    def launch(self, argv: list[str], *, log_path: Path, run_id: str, component: str,
               **_: Any) -> Proc:
        """`Hooks.launch`: prime-rl's `rl` (launcher mode); its members start at once."""
        attempt = int(re.search(r"attempt_(\d+)", str(log_path)).group(1))  # type: ignore[union-attr]
        rest = component == "launcher" and any(REST_CONFIG in arg for arg in argv)
        resume = _rest_resume(argv) if rest else _resume_flag(argv)
        self.launches.append(Launch(self.now, attempt, component, resume,
                                    self.newest_complete()))
        server = self.server(run_id) if rest else None
        proc = self._spawn(component, run_id, attempt, None)
        if component != "launcher":
            return proc
        if server is not None and server.attempt != attempt:
            # Kept: it now serves this attempt (a fault of it lands here).
            self.kept.append(Kept(self.now, attempt, server, server.pid, server.started))
            server.attempt = attempt
        self.launchers[proc.pid] = Launcher(proc, self.version, self.layout, log_path, resume,
                                            self.max_steps, self.interval, done=resume or 0,
                                            rest=rest)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.touch()
        return proc

    def _start_members(self, launcher: Launcher) -> None:
        """The launcher's start-up, a moment after its own start: its clean, then each child
        with its log opened "w" (v0.4 rl.py:573-598,617,695,747; main entrypoints/rl.py:176,
        199,257)."""
        layout, proc = launcher.layout, launcher.proc
        self._launcher_clean(layout, launcher.resume)
        launcher.next_step_at = self.now + INFERENCE_STARTUP + STEP_SECONDS
        names: tuple[Member, ...] = ("inference", "trainer", "orchestrator")
        for member in names[1 if launcher.rest else 0:]:
            launcher.members[member] = self._spawn(member, proc.run_id, proc.attempt, proc.pid)
            path = layout.log_file(member)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("")
                os.utime(path, (self.wall(), self.wall()))

    def _launcher_clean(self, layout: RunLayout, resume: int | None) -> None:
        """What each version's `rl` does to its run directory before starting the children:
        v0.4 deletes its logs, rollouts and broadcasts (RULES["0.4"]["clean"], rl.py:573-598);
        main opens a new `logs/attempt_<n>` and points `logs/latest` at it
        (RULES["main"]["logs"], utils/pathing.py:14-39)."""
        deleted, recreated = layout.launch_clean(clean=True, resume_step=resume,
                                                 broadcast_type="filesystem")
        for path in deleted:
            shutil.rmtree(path, ignore_errors=True)
        for path in recreated:
            path.mkdir(parents=True, exist_ok=True)
        if self.version == "main":
            logs = layout.run_dir / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            numbers = [int(p.name[8:]) for p in logs.iterdir()
                       if p.name.startswith("attempt_") and p.name[8:].isdigit()]
            name = f"attempt_{max(numbers, default=0) + 1}"
            (logs / name).mkdir()
            latest = logs / "latest"
            if latest.is_symlink():
                latest.unlink()
            latest.symlink_to(name)

    def exit(self, proc: Proc, code: int, *, reaped_first: bool = True) -> None:
        """`proc` ends with `code`: its watcher hears of it (the status only when airvisor's
        read came before its parent's reap), its launcher's monitor thread queues the error."""
        if not proc.alive:
            return
        proc.state, proc.code, proc.ended_at = "exited", code, self.now
        for watch in self.watches:
            for key, pid in list(watch.pids.items()):
                if pid == proc.pid and not watch.closed:
                    del watch.pids[key]
                    watch.on_death(Death(key, pid, self.wall(), "pidfd",
                                         None if reaped_first and proc.parent else code))
        self.held.pop(proc.pid, None)
        launcher = self.launchers.get(proc.parent) if proc.parent is not None else None
        if launcher is not None and launcher.proc.alive:
            launcher.ended.setdefault(proc.name, (self.now, code))
            if code != 0:
                launcher.errors.append(
                    (self.now, f"{proc.name.capitalize()} failed with exit code {code}"))
        if proc.pid in self.launchers:
            for member in self.launchers[proc.pid].members.values():
                member.parent = None  # re-parented: they keep running
        self.on_member_exit(proc)

    def kill_tree(self, pid: int, grace: float) -> None:
        proc = self.procs.get(pid)
        if proc is None:
            return
        for child in [p for p in self.procs.values() if p.parent == pid]:
            self.kill_tree(child.pid, grace)
        self.exit(proc, -9 if proc.state == "stopped" else -15)

    # -- the supervisor's hooks ------------------------------------------------------------------
    def stop_tree(self, identities: list[ProcessIdentity], pgids: list[int], run_id: str,
                  grace: float, sweep: bool = True) -> str:
        self.stops.append(StopCall(self.now, grace, tuple(i.pid for i in identities)))
        for identity in identities:
            self.kill_tree(identity.pid, grace)
        self._end_groups(pgids, grace)
        if sweep:  # every carrier of the run's marker
            for proc in list(self.procs.values()):
                if proc.run_id == run_id and proc.alive:
                    self.exit(proc, -9 if proc.state == "stopped" else -15)
        return "sim stop"

    def terminate_tree(self, pids: list[int], *, marker_run_id: str | None = None,
                       grace: float, pgids: Iterable[int] = (), **_: Any) -> KillReport:
        """`proc.terminate_tree` (what a takeover calls directly, outside the hooks): the
        given trees, process groups and every carrier of the run's marker."""
        self.stops.append(StopCall(self.now, grace, tuple(pids)))
        before = {p.pid for p in self.procs.values() if p.alive}
        for pid in pids:
            self.kill_tree(pid, grace)
        self._end_groups(pgids, grace)
        for proc in list(self.procs.values()):
            if marker_run_id is not None and proc.run_id == marker_run_id and proc.alive:
                self.exit(proc, -9 if proc.state == "stopped" else -15)
        gone = sorted(before - {p.pid for p in self.procs.values() if p.alive})
        return KillReport(terminated=gone)

    def _end_groups(self, pgids: Iterable[int], grace: float) -> None:
        """The process groups a stop names, as `proc.terminate_tree` ends them: every live
        member of each and its tree, a group whose leader is gone too (`collect_targets`:
        "gone: nothing to confuse it with (a group may still have members)"). A held member
        ends there (terminate_tree sends the group SIGTERM and SIGCONT, then SIGKILL after
        the grace): a dead launcher's held orchestrator, re-parented, is reached only so when
        the stop spares the run's marker (seed 8229: it was left held for ever)."""
        for pgid in pgids:
            for proc in [p for p in self.procs.values() if p.alive and p.group == pgid]:
                self.kill_tree(proc.pid, grace)

    def members(self, launcher_pid: int) -> dict[str, int]:
        launcher = self.launchers.get(launcher_pid)
        if launcher is None:
            return {}
        return {name: p.pid for name, p in launcher.members.items()
                if p.alive and p.parent == launcher_pid}

    def death_watch(self, on_death: Callable[[Death], None]) -> Watch:
        watch = Watch(on_death, self.generation, world=self)
        self.watches.append(watch)
        return watch

    def prober(self, *, run_id: str, attempt: int, interval: float, failures: int,
               post: Callable[[Event], None], **_: Any) -> Prober:
        prober = Prober(run_id, attempt, interval, failures, post, self.generation,
                        next_at=self.now)
        self.probers.append(prober)
        return prober

    def background(self, name: str, job: Callable[[], None]) -> None:
        self.jobs.append(Job(name, job, self.generation))

    def wait_until(self, done: Callable[[], bool], seconds: float) -> bool:
        """`box._stop._wait_until` in sim time, for the job running now (`running`): whether
        `done()` came true within `seconds`; not yet known, the job is let by (`Blocked`) and
        run again at a later step (its earlier waits answered as they were)."""
        job = self.running
        assert job is not None, "a wait outside a worker job"
        index, job.cursor = job.cursor, job.cursor + 1
        if index == len(job.waits):
            job.waits.append((self.now + seconds, None))
        deadline, answer = job.waits[index]
        if answer is not None:
            return answer
        if done():
            answer = True
        elif self.now >= deadline:
            answer = False
        else:
            raise Blocked(0)
        job.waits[index] = (deadline, answer)
        return answer

    def alive(self, pid: int | None, create_time: float | None) -> bool | None:
        """`process_alive` for a simulated pid (None: not one of the world's)."""
        if pid is None or pid <= PID_BASE:
            return None
        proc = self.procs.get(pid)
        return proc is not None and proc.alive and (
            create_time is None or abs(proc.started - create_time) < 0.01)

    def identity(self, pid: int) -> ProcessIdentity | None:
        """`proc.identity_of` for a simulated pid (the real one for any other)."""
        proc = self.procs.get(pid)
        if proc is None:
            return identity_of(pid) if pid <= PID_BASE else None
        return proc.identity if proc.alive else None

    def hold_trees(self, roots: list[ProcessIdentity]) -> list[ProcessIdentity]:
        """`Hooks.hold_trees` (`proc.hold_trees`): SIGSTOP each root that is still the process
        its identity names, then its descendants; every process held, with its start time."""
        held: list[ProcessIdentity] = []
        for root in roots:
            proc = self.procs.get(root.pid)
            if proc is None or not self.alive(root.pid, root.create_time):
                continue
            for target in (proc, *self._descendants(proc.pid)):
                if target.alive:
                    target.state = "stopped"
                    self.held.setdefault(target.pid, self.now)
                    held.append(target.identity)
        if held:
            proc = self.procs[held[0].pid]
            launcher = next((x for x in self.launchers.values()
                             if x.proc.pid == proc.group), None)
            self.holds.append(Hold(self.now, proc.attempt, tuple(i.pid for i in held),
                                   launcher.proc.pid if launcher is not None else 0,
                                   self.generation))
            if launcher is not None and self.linger_next is not None:
                # The fault armed for the next hold's launcher (`HoldFault`).
                if self.linger_next == "says-late":
                    launcher.quiet_until = self.now + LATE_LOOK
                else:
                    launcher.never_exits = True
                self.linger_next = None
        return held

    def end_held(self, held: list[ProcessIdentity]) -> list[int]:
        """`Hooks.end_held` (`proc.end_held`): SIGTERM, then SIGCONT, to each held process still
        that process: it acts on the SIGTERM as it runs again (it ends, -15)."""
        ended = []
        for identity in held:
            proc = self.procs.get(identity.pid)
            if proc is not None and self.alive(identity.pid, identity.create_time):
                ended.append(proc.pid)
                self.exit(proc, -15)
        return ended

    def group_members(self, pgid: int) -> list[ProcessIdentity]:
        """`Hooks.group_members` (`proc._hold.group_members`): every live process of the
        process group, with its start time."""
        return [p.identity for p in self.procs.values() if p.alive and p.group == pgid]

    def _descendants(self, pid: int) -> list[Proc]:
        children = [p for p in self.procs.values() if p.parent == pid]
        return children + [d for c in children for d in self._descendants(c.pid)]

    def boot_time(self) -> float:
        """`Hooks.boot_time`: psutil's boot time, in the process table's terms."""
        return self.booted_at

    def reboot(self) -> None:
        """The machine reboots (the daemon's death is `daemon_died`'s): every process ends and
        nobody reads its status, nor does its launcher's monitor log it; the files (and a
        full disk) stay."""
        for proc in self.procs.values():
            if proc.alive:
                proc.state, proc.code, proc.ended_at = "exited", None, self.now
        self.booted_at = self.now

    def daemon_died(self) -> None:
        """SIGKILL: the daemon's threads (jobs, watchers, probers) are gone with it; its
        children (the launchers) are re-parented and run on."""
        self.jobs = []
        self.watches = []
        self.probers = []
        self.generation += 1

    # -- one step of the world -------------------------------------------------------------------
    def advance(self) -> None:
        """What the processes do in this second: training steps and checkpoints, the
        launcher's monitor loop, the health probes."""
        for launcher in list(self.launchers.values()):
            if launcher.proc.alive and not launcher.members:
                self._start_members(launcher)
            elif launcher.proc.alive:
                self._train(launcher)
                self._monitor(launcher)
        self._probe()

    def _train(self, launcher: Launcher) -> None:
        trainer = launcher.members["trainer"]
        orchestrator = launcher.members["orchestrator"]
        # The rest trains against the run's server launched apart (kept or new).
        inference = self.server(launcher.proc.run_id) if launcher.rest \
            else launcher.members["inference"]
        if not (trainer.state == "running" and orchestrator.state == "running"
                and inference is not None and inference.alive
                and self.now >= inference.started + INFERENCE_STARTUP) \
                or self.now < launcher.next_step_at:
            return
        launcher.next_step_at = self.now + STEP_SECONDS
        launcher.done += 1
        step = launcher.done
        base = launcher.layout.step_base
        # v0.4 prints iteration k (0-based) for the step that makes k + 1 done; main prints
        # the number done (RULES[v]["step_base"]).
        shown = step - 1 + base
        for name in ("trainer", "orchestrator"):
            path = launcher.layout.log_file(name)
            if path is not None:
                self.write(path, f"SUCCESS Step {shown} | Time: 1.00s")
        metrics = launcher.layout.metrics_file()
        if metrics is not None:
            self.write(metrics, f'{{"step": {shown}}}')
        if step % launcher.interval == 0 or step >= launcher.max_steps:
            if self.disk_full() or launcher.partial_next:
                self._save_checkpoint(launcher, step, partial=True)
                path = launcher.layout.log_file("trainer")
                if path is not None:
                    why = "No space left on device" if self.disk_full() else "killed"
                    self.write(path, f"OSError: [Errno 28] {why}")
                self.exit(trainer, 1 if self.disk_full() else -9,
                          reaped_first=self.chance("reap") < 0.7)
                return
            self._save_checkpoint(launcher, step, partial=False)
        if step >= launcher.max_steps:
            self.final_step_reached = True
            self.final_step_at = self.now
            for path, line in ((launcher.layout.log_file("trainer"),
                                "SUCCESS RL trainer finished!"),
                               (launcher.layout.log_file("orchestrator"),
                                "SUCCESS Orchestrator finished.")):
                if path is not None:
                    self.write(path, line)
            self.exit(trainer, 0)
            self.exit(orchestrator, 0)

    def _monitor(self, launcher: Launcher) -> None:
        """The launcher's main loop, once a second (see the module's docstring), and its
        `cleanup_processes`: SIGTERM to each child, then up to 60 s for it to exit before a
        SIGKILL (v0.4 rl.py:529-536, main utils/process.py:83-93). The trainer and the
        orchestrator go at once; the inference server's shutdown takes a few seconds; a
        stopped (SIGSTOP) child the whole 60 s, unless it is continued meanwhile (`end_held`).
        (Its `cleanup_threads` first joins each monitor thread for up to 5 s: not modelled.)"""
        if launcher.cleanup_until is not None:
            self._clean_up(launcher)
            return
        if self.now < launcher.quiet_until:
            return
        # Its loop sleeps a second between looks: what a monitor thread queued this second
        # (an error, with its stop event) is seen at the next look, after airvisor's own
        # watcher may have seen the death; the clean exits of training's end (this second's
        # `_train`, before this look) at this one.
        seen = {name: code for name, (at, code) in launcher.ended.items()
                if code == 0 or at < self.now}
        if {"trainer", "orchestrator"} <= seen.keys():
            # The loop's condition: both ended. The orchestrator's status first (v0.4
            # rl.py:789-802, main entrypoints/rl.py:390-401).
            failed = next((name for name in ("orchestrator", "trainer") if seen[name] != 0),
                          None)
            if failed is not None:
                self.write(launcher.log, f"ERROR {failed.capitalize()} failed with exit code "
                                         f"{seen[failed]}")
                launcher.exit_code = 1
            else:
                self.write(launcher.log, f"SUCCESS {LAUNCHER_NAMES[launcher.version]}")
                launcher.exit_code = 0
        elif launcher.errors and launcher.errors[0][0] < self.now:
            self.write(launcher.log, f"ERROR Error: {launcher.errors[0][1]}")
            self.write(launcher.log, "ERROR Terminating all processes...")
            launcher.exit_code = 1
        else:
            return
        launcher.said_at = self.now
        stopped = False
        for member in launcher.members.values():
            if not member.alive or member.parent != launcher.proc.pid:
                continue
            if member.state == "stopped":
                stopped = True
            elif member.name != "inference":
                self.exit(member, -15)
        # (The rest has no server of its own to wait for: it exits at its next look.)
        serving = any(m.alive and m.name == "inference" for m in launcher.members.values())
        launcher.cleanup_until = self.now + (CLEANUP_WAIT if stopped else
                                             INFERENCE_SHUTDOWN if serving else 0.0)

    def _clean_up(self, launcher: Launcher) -> None:
        """The launcher's clean-up under way: it waits for each child it signalled (a held one
        acts on the SIGTERM once continued), SIGKILLs what is left after the wait, then exits
        (never, with `never_exits`: until stopped)."""
        own = [m for m in launcher.members.values()
               if m.alive and m.parent == launcher.proc.pid]
        assert launcher.cleanup_until is not None
        if own and self.now < launcher.cleanup_until:
            return
        for member in own:
            self.exit(member, -9 if member.state == "stopped" else -15)
        if not launcher.never_exits:
            self.exit(launcher.proc, launcher.exit_code)

    def _probe(self) -> None:
        for prober in self.probers:
            if not prober.active or self.now < prober.next_at:
                continue
            server = self.server(prober.run_id)
            hung = self.probe_hung_from is not None
            answers = server is not None and not hung \
                and self.now >= server.started + INFERENCE_STARTUP
            if not prober.ready:
                if answers:
                    prober.ready = True
                    prober.post(InferenceReady(prober.run_id, prober.attempt, self.wall()))
                    prober.next_at = self.now + prober.interval
                continue
            prober.next_at = self.now + prober.interval
            if answers:
                prober.failed = 0
                continue
            prober.failed += 1
            if prober.failed >= prober.failures:
                prober.failed = 0
                if server is not None:
                    self.failed_health.setdefault((server.pid, server.started), self.now)
                prober.post(ProbeFailed(prober.run_id, prober.attempt,
                                        "GET /health: ReadTimeout", self.wall()))

    def server(self, run_id: str) -> Proc | None:
        for proc in self.procs.values():
            if proc.run_id == run_id and proc.name == "inference" and proc.alive:
                return proc
        return None

    def live(self, run_id: str) -> list[Proc]:
        return [p for p in self.procs.values() if p.run_id == run_id and p.alive]


def _rest_resume(argv: list[str]) -> int | None:
    """The resume step in the rest's config file (`rl @ rl-rest.toml|json`, as `plan_split`
    writes it: v0.4 `[ckpt] resume_step`, main `resume.step`), else its flags."""
    path = Path(argv[argv.index("@") + 1]) if "@" in argv else None
    if path is None or not path.exists():
        return _resume_flag(argv)
    text = path.read_text()
    config = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    step = (config.get("ckpt") or {}).get("resume_step")
    if step is None:
        step = (config.get("resume") or {}).get("step")
    return int(step) if step is not None else _resume_flag(argv)


def _resume_flag(argv: list[str]) -> int | None:
    for flag in ("--ckpt.resume-step", "--resume.step"):
        if flag in argv:
            return int(argv[argv.index(flag) + 1])
    return None

