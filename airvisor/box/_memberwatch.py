"""The members of prime-rl's launcher (launcher mode): found in its tree (`_members.py`), recorded
with the run, each watched for its exit directly, and a member's death acted on at once.
"""

from __future__ import annotations

from airvisor.box._base import BoxSupervisorBase
from airvisor.box._hooks import VIEWED, describe_exit
from airvisor.box._stop import launcher_first_report
from airvisor.box._takeover import component_alive
from airvisor.core import MemberExited
from airvisor.policy import Phase
from airvisor.primerl import FINISH_MILESTONES, LAUNCHER
from airvisor.proc import identity_of
from airvisor.proc._deathwatch import Death

# Seconds between looks into the launcher's tree (its descendants in the process table: a few
# ms) until the members are found: a member's death is seen at once only once it is found, and
# a short run's members may live for a second only.
MEMBER_SCAN_INTERVAL = 0.25
MEMBER_RESCAN_INTERVAL = 60.0  # once inference, trainer and orchestrator are found


class MemberWatch(BoxSupervisorBase):
    """prime-rl's launcher's members: found, recorded, watched (issue 22 item 4)."""

    def _close_death_watch(self) -> None:
        if self._death_watch is not None:
            self._death_watch.close()
            self._death_watch = None

    @property
    def members(self) -> dict[str, int]:
        """Launcher mode: the components found in prime-rl's launcher's tree, name -> pid."""
        return dict(self._members)

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
