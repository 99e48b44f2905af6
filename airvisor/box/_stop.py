"""Stopping an attempt, on a worker: its component trees (all but the kept server's when it is
kept) and its containers. When prime-rl's launcher reaped the member whose death began the
recovery, it still says that member's exit status: the rest is stopped at once by identity
and the launcher left to say it and exit (bounded), or the stop waits for its line. The
stop's end is reported to the core.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

from airvisor._logfile import LogTail, tail_lines
from airvisor._logging import get_logger
from airvisor.box._base import BoxSupervisorBase
from airvisor.box._hooks import INFERENCE, ComponentHandle, OldLauncher, TaskOutcome, pool_status
from airvisor.core import ComponentExited, Task, TaskDone
from airvisor.policy import Phase
from airvisor.primerl import LAUNCHER, ChildFailure, child_failure_from_line
from airvisor.proc import ProcessIdentity
from airvisor.stacks import with_stacks_first
from airvisor.store import ComponentRecord

log = get_logger("airvisor.box")

# prime-rl's launcher reaps a member in its monitor thread at once and says so ("Trainer failed
# with exit code N") from its main loop, which looks once a second (v0.4 rl.py:539-552,780-803;
# main utils/process.py:96-105, entrypoints/rl.py:376-388): seconds a stop waits for that line
# when the member's status was its to collect, before SIGTERM ends the launcher unsaid.
LAUNCHER_REPORT_WAIT = 1.5

LAUNCHER_REPORT_LOOK = 0.05  # seconds between looks at the launcher's log meanwhile
# Seconds at least a failed attempt's launcher is given to exit by itself once its held members
# are ended (then its tree is stopped): its clean-up joins each monitor thread for up to 5 s
# and waits for each child still running (main utils/process.py:58-93, v0.4 rl.py:524-536);
# the stop's grace, when longer.
OLD_LAUNCHER_EXIT_WAIT = 10.0


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


def _wait_until(done: Callable[[], bool], seconds: float) -> bool:
    """Whether `done()` came true within `seconds` (looked at every LAUNCHER_REPORT_LOOK, on
    the calling worker). The simulation answers it in sim time (airvisor.sim `_patched`)."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(LAUNCHER_REPORT_LOOK)
    return True


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
    _wait_until(lambda: launcher_report(old.handle.log.path, old.component) is not None
                or not old.handle.identity.alive(), LAUNCHER_REPORT_WAIT)
    if old.held:
        end_held_trees(old.held)
    waited = max(grace, OLD_LAUNCHER_EXIT_WAIT)
    _wait_until(lambda: not old.handle.identity.alive(), waited)
    if old.handle.identity.alive() or any(i.alive() for i in old.held):
        log.info("the failed attempt's launcher did not exit by itself: stopped", run=run_id,
                 attempt=old.attempt, waited=waited)
        stop_tree([old.handle.identity, *old.held], [old.handle.pgid], run_id, 0.0,
                  sweep=False)


def _alive_members(records: list[ComponentRecord]) -> list[ProcessIdentity]:
    """The recorded members of an attempt still running, each under its recorded start time
    (a pid reused since is another process, never named)."""
    return [i for c in records if c.kind == "member" and c.pid is not None
            and c.create_time is not None
            and (i := ProcessIdentity(c.pid, c.create_time)).alive()]


def _end_left_held(held: list[ProcessIdentity], grace: float,
                   stop_tree: Callable[..., str],
                   end_held_trees: Callable[[list[ProcessIdentity]], list[int]],
                   run_id: str) -> None:
    """Held members whose launcher is gone (`_end_held_of_dead_launchers`): SIGTERM and
    SIGCONT (`proc.end_held`), then, after `grace`, what is left stopped by identity (its
    SIGKILL), never by the run's marker (the next attempt's processes carry it too)."""
    end_held_trees(held)
    if not _wait_until(lambda: not any(i.alive() for i in held), grace):
        stop_tree([i for i in held if i.alive()], [], run_id, 0.0, sweep=False)


class Stopping(BoxSupervisorBase):
    """The stop of an attempt's processes, carried out for the core's executor."""

    def _old_launcher_exited(self, old: OldLauncher, event: ComponentExited) -> None:
        """The failed attempt's launcher, left to say its failed member's status, exited by
        itself or was stopped: its line (if it said it) completes that attempt's failure, in
        whatever phase the run is now (the next attempt may run: the line is that attempt's,
        `RunMachine.earlier`); its exit is never the current attempt's failure (its attempt
        is an earlier one: `_on_process_event` acts on no other event of it)."""
        self._old_launchers.pop(old.attempt, None)
        self.store.upsert_component(self.run_id, old.attempt, LAUNCHER, state="exited",
                                    exit_code=event.returncode)
        if not old.said:
            child = launcher_report(old.handle.log.path, old.component)
            if child is not None:
                self._exit_status_read(child.component, child.code, attempt=old.attempt)

    def _old_launchers_said(self) -> None:
        """An earlier attempt's launcher, left to say its failed member's status, said it:
        read at the next attempt's looks, not only at its exit (it may linger: the attempt's
        record has its status as soon as it is said; the run machine keeps every earlier
        attempt's failure waiting for it, `RunMachine.earlier`)."""
        for old in self._old_launchers.values():
            if old.said or old.attempt == self.attempt:
                continue
            child = launcher_report(old.handle.log.path, old.component)
            if child is not None:
                old.said = True
                self._exit_status_read(child.component, child.code, attempt=old.attempt)

    def _adopt_old_launchers(self) -> None:
        """A daemon that took the run over finishes the failed attempts' launchers an earlier
        daemon left to say their member's status (recorded "stopping", still running): their
        held members ended once the line is said (or after its wait), each launcher stopped if
        it lingers (`_finish_old_launcher`), its line read at the next attempt's looks
        (`_old_launchers_said`): else the status was never read and a held member waited for
        its launcher's SIGKILL. Looked at once per supervisor (its first preflight or look)."""
        if self._old_launchers_looked:
            return
        self._old_launchers_looked = True
        awaited: dict[int, str] = {}  # attempt -> the member whose status its launcher says
        for number, waiting in self.machine.earlier:
            if waiting.component is not None:
                awaited[number] = waiting.component
        # (the recovery's failure, or the one a machine condition replaced: `RunMachine.unsaid`)
        failure = self.machine.unsaid or self.machine.failure
        if failure is not None and failure.component is not None and not failure.status_known:
            awaited[self.attempt] = failure.component
        end_held_trees = self._hooks.end_held or (lambda held: [])
        grace, run_id, stop_tree = self._stop_grace(), self.run_id, self._hooks.stop_tree
        for number, component in awaited.items():
            if number in self._old_launchers:
                continue
            records = self.store.components(self.run_id, number)
            launcher = next((c for c in records if c.name == LAUNCHER and c.state == "stopping"
                             and c.pid is not None and c.create_time is not None), None)
            if launcher is None or launcher.pid is None or launcher.create_time is None \
                    or not launcher.log_path:
                continue
            identity = ProcessIdentity(launcher.pid, launcher.create_time)
            if not identity.alive():
                # It said its line and exited while no daemon watched (the simulation's seed
                # 610): read it now, or that attempt's failure never gets its status.
                child = launcher_report(Path(launcher.log_path), component)
                if child is not None:
                    self._exit_status_read(child.component, child.code, attempt=number)
                continue
            # Its members still running are the held ones (the others were stopped at once).
            held = _alive_members(records)
            handle = ComponentHandle(
                name=LAUNCHER, identity=identity, pgid=launcher.pgid or launcher.pid,
                log=LogTail(Path(launcher.log_path), from_end=True), argv=launcher.argv,
                gpus=launcher.gpus, launched=None, since=number)
            old = OldLauncher(number, handle, component, held)
            self._old_launchers[number] = old
            self._background(f"old-launcher-{run_id}", lambda old=old: _finish_old_launcher(  # type: ignore[misc]
                old, grace, stop_tree, end_held_trees, run_id))
        self._end_held_of_dead_launchers()

    def _end_held_of_dead_launchers(self) -> None:
        """The members an earlier daemon's stop held still (SIGSTOP) for a launcher that has
        died since (SIGKILLed while no daemon, or before the daemon's `_finish_old_launcher`,
        ended them): nobody else continues them (the launcher's clean-up died with it), and a
        held process acts on SIGTERM only once continued, so they would stay stopped, holding
        their memory and ports, until the run's end. Found from the store: every attempt whose
        launcher is recorded "stopping" (only `_stop_rest_at_once` writes it) and is gone; its
        recorded members still alive under their recorded start times are the held ones (the
        rest was stopped at once), ours by pid and start time. Ended on a worker as any held
        member is (SIGTERM, SIGCONT), then stopped if still there after the grace."""
        end_held_trees = self._hooks.end_held
        if end_held_trees is None:
            return  # (hooks that cannot hold never held anything)
        grace, run_id, stop_tree = self._stop_grace(), self.run_id, self._hooks.stop_tree
        for attempt in self.store.attempts(self.run_id):
            number = int(attempt["number"])
            if number in self._old_launchers:
                continue  # (alive: `_finish_old_launcher` ends its held)
            records = self.store.components(self.run_id, number)
            launcher = next((c for c in records if c.name == LAUNCHER
                             and c.state == "stopping"), None)
            if launcher is None or launcher.pid is None or launcher.create_time is None \
                    or ProcessIdentity(launcher.pid, launcher.create_time).alive():
                continue
            held = _alive_members(records)
            if held:
                log.info("a dead launcher's held members ended", run=run_id, attempt=number,
                         pids=[i.pid for i in held])
                self._background(f"old-held-{run_id}", lambda held=held: _end_left_held(  # type: ignore[misc]
                    held, grace, stop_tree, end_held_trees, run_id))

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
        # A failed attempt's launcher still saying its status (`_stop_rest_at_once`) goes with
        # this stop too, its held members ended first (held, they would wait for the SIGKILL).
        olds = list(self._old_launchers.values())
        held = [identity for old in olds for identity in old.held]
        handles += [old.handle for old in olds
                    if old.handle not in handles and old.handle.identity.alive()]
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
            return TaskOutcome(summary, pool_status(pool))

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
        for old in olds:
            old.stopped = True  # (this stop ends them)
        self._run_task(Task.STOP, job)
        return keep is not None

    def _launcher_left(self) -> bool:
        """A failed attempt's launcher left to say its status (`_stop_rest_at_once`) still
        runs: a run that ends stops it first (`ProcessesDown.launcher_left`)."""
        return any(old.handle.identity.alive() and not old.stopped
                   for old in self._old_launchers.values())

    def _can_stop_rest_at_once(self, launcher: ComponentHandle, failed: str) -> bool:
        """The rest can be stopped without waiting for the launcher's line (issue 30 item 4):
        the launcher is this daemon's child (its exit is seen, with its log read then), the
        failed component is one of its members as found, the hooks can hold one still, and
        this attempt's rest was not stopped so already (a later stop of the same recovery: the
        kept server's, or the run's end, ends the launcher too, its line waited for first)."""
        return launcher.launched is not None and failed in self._member_ids \
            and self._hooks.hold_trees is not None and self._hooks.end_held is not None \
            and self.attempt not in self._old_launchers

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
        members_of_group = self._hooks.group_members
        group, launcher_pid = launcher.pgid, launcher.identity.pid
        old = OldLauncher(self.attempt, launcher, failed, [])
        self._old_launchers[self.attempt] = old
        self.store.upsert_component(self.run_id, self.attempt, LAUNCHER, state="stopping")

        def job() -> TaskOutcome:
            old.held = hold(to_hold)
            held = {i.pid for i in old.held}
            # The launcher's group holds its members and what they left (a SIGKILLed torchrun's
            # workers): all of it but the launcher and the held, by identity.
            rest = [i for i in members_of_group(group)
                    if i.pid not in held and i.pid != launcher_pid]
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
            return TaskOutcome(summary, pool_status(pool))

        if stacks:
            job = with_stacks_first(job, self.store, run_id, self.attempt, self.attempt_dir)
        self._run_task(Task.STOP, job)

    def _after_stop(self, event: TaskDone) -> None:
        keeping = self.machine.keeping  # (the machine forgets it with the stop's end)
        olds = self._old_launchers
        for handle in self.components.values():
            if keeping and handle.name == INFERENCE:
                continue
            if any(handle is old.handle for old in olds.values()):
                continue  # (left to say its status and exit: `_old_launcher_exited`)
            handle.exited = True
            self.store.upsert_component(self.run_id, self.attempt, handle.name, state="stopped")
        for name in self._members:  # stopped with the launcher's tree
            self.store.upsert_component(self.run_id, self.attempt, name, state="stopped")
        outcome: TaskOutcome | None = event.result
        self._record_containers(outcome.containers if outcome is not None else ())
        summary = outcome.summary if outcome is not None else event.error
        self._event("stopped_components", f"components stopped: {summary}")
        # (also the recovery's failure a machine condition replaced, `RunMachine.unsaid`: a
        # stop asked in the condition's wait ends the run; the simulation's seed 5601)
        failure = self.machine.unsaid or self.machine.failure
        launcher_log = self._launcher_log()
        if launcher_log is not None and failure is not None and failure.component is not None \
                and not failure.status_known:
            # The launcher's line naming the exit status of a member whose failure was recorded
            # without it (the launcher reaped it first), also one written before a new daemon
            # adopted the run or took its recovery over: the failure gets its status.
            child = launcher_report(launcher_log, failure.component)
            if child is not None:
                self._exit_status_read(child.component, child.code)
        for old in [o for o in olds.values() if o.attempt != self.attempt
                    and not o.handle.identity.alive()]:
            # An earlier attempt's launcher this stop ended (it had not exited by itself yet):
            # what it said is read now, before the run may end (its exit comes after).
            del olds[old.attempt]
            child = None if old.said else launcher_report(old.handle.log.path, old.component)
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
