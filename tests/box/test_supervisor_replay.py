"""Supervisor policy replayed without processes: fake launcher, fake prober, injected clock.

Honcho-style: the supervisor consumes typed events (exited, ready, lines in the log files) and
decides; here the test plays the history and advances the clock by hand, so stall timeouts,
backoff delays and crash loops are checked exactly and instantly.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from airvisor.box import RunSupervisor
from airvisor.box._supervisor import FINISH_TIMEOUT, LogView
from airvisor.core import InferenceReady, ProbeFailed
from airvisor.policy import RunState
from airvisor.primerl import LAUNCHER
from airvisor.proc import ProcessIdentity
from airvisor.proc._deathwatch import Death
from airvisor.profile import Profile, load_profile
from airvisor.runs import RunConflict, RunManager
from airvisor.store import Store

from ..primerl.test_layout import v04_full_step
from .conftest import demo_profile_dict, write_profile

# How long settle() waits for a worker thread's report on a loaded machine (a bound, not a
# timing assertion: the state is reached as soon as the thread reports).
SETTLE_LIMIT = 30.0

_pids = itertools.count(900_000)


class FakeProcess:
    def __init__(self, component: str, log_path: Path) -> None:
        self.component = component
        self.log_path = log_path
        self._pid = next(_pids)
        self._code: int | None = None
        self._done = threading.Event()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.touch()

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def identity(self) -> ProcessIdentity:
        return ProcessIdentity(self._pid, 1.0)

    def wait(self) -> int:
        self._done.wait()
        assert self._code is not None
        return self._code

    def exit(self, code: int) -> None:
        if not self._done.is_set():
            self._code = code
            self._done.set()

    def say(self, line: str) -> None:
        with open(self.log_path, "a") as handle:
            handle.write(line + "\n")


class FakeProber:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class Replay:
    def __init__(self, tmp_path: Path, **profile_extra: Any) -> None:
        self.now = 1000.0
        self.store = Store(tmp_path / "state.sqlite3")
        self.processes: list[FakeProcess] = []
        self.stops = 0
        self.preflights = 0
        self.launch_error: OSError | None = None
        self.preflight_error: Exception | None = None
        self.manager = self._new_manager()
        self.run_dir = tmp_path / "run"
        # Nothing is launched here: the demo's launcher command (resolved without prime-rl).
        profile_extra.setdefault("launcher", "demo")
        data = demo_profile_dict(self.run_dir, **profile_extra)
        self.profile: Profile = load_profile(write_profile(tmp_path / "p.toml", data))
        self.run_id = self.manager.submit(self.profile).id
        supervisor = self.manager.supervisor(self.run_id)
        assert supervisor is not None
        self.sup: RunSupervisor = supervisor  # type: ignore[assignment]

    def _new_manager(self) -> RunManager:
        """A manager (a daemon, as far as the engine knows) with the fake I/O, on the fake
        clocks (monotonic and wall: the restart history is kept in wall-clock time)."""
        manager = RunManager(self.store, clock=lambda: self.now, wall_clock=lambda: self.now)
        hooks = manager.hooks

        def prepare_machine(profile: Profile, run_id: str, live: set[str]) -> str:
            self.preflights += 1
            if self.preflight_error is not None:
                raise self.preflight_error
            return "fake preflight"

        hooks.prepare_machine = prepare_machine
        hooks.prober = FakeProber
        hooks.launch = self._launch
        hooks.stop_tree = self._stop_tree
        hooks.members = lambda pid: {}
        return manager

    def reboot(self, *, components_alive: bool = False) -> None:
        """The daemon dies (SIGKILL: nothing is cleaned up or recorded) and a new one starts on
        the same state file. `components_alive`: the attempt's processes survived it (they are
        given this test process's identity, which is alive)."""
        self.sup.detach()
        self.store.update_run(self.run_id, supervisor_started=1.0)  # that process is gone
        if components_alive:
            me = psutil.Process()
            for comp in self.store.components(self.run_id):
                if comp.kind == "process":
                    self.store.upsert_component(self.run_id, comp.attempt, comp.name,
                                                pid=me.pid, create_time=me.create_time())
        self.manager = self._new_manager()
        assert self.manager.adopt_on_boot() == [self.run_id]
        supervisor = self.manager.supervisor(self.run_id)
        assert supervisor is not None
        self.sup = supervisor  # type: ignore[assignment]

    def run(self) -> Any:
        record = self.store.get_run(self.run_id)
        assert record is not None
        return record

    def _launch(self, argv: list[str], *, log_path: Path, component: str, **_: Any) -> FakeProcess:
        if self.launch_error is not None:
            raise self.launch_error
        proc = FakeProcess(component, log_path)
        self.processes.append(proc)
        return proc

    def _stop_tree(self, identities: list[ProcessIdentity], pgids: list[int], run_id: str,
                   grace: float) -> str:
        self.stops += 1
        for proc in self.processes:
            proc.exit(-15)
        return "fake stop"

    def current(self, component: str) -> FakeProcess:
        return next(p for p in reversed(self.processes) if p.component == component)

    def say(self, component: str, line: str) -> None:
        """A line in the log prime-rl v0.4's launcher writes for that child (rl.py:617,695,747)."""
        log = self.run_dir / "logs" / f"{component}.stdout"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as handle:
            handle.write(line + "\n")

    def settle(self, until: RunState | None = None, rounds: int = 50) -> None:
        """Let worker threads report back (real time) without moving the fake clock: `rounds`
        ticks when nothing is awaited; with `until`, as long as it takes a loaded machine's
        worker thread to report (bounded by SETTLE_LIMIT, never a timing assertion)."""
        deadline = time.monotonic() + SETTLE_LIMIT
        done = 0
        while done < rounds or (until is not None and time.monotonic() < deadline):
            self.manager.tick(0.02)
            done += 1
            if until is not None and self.sup.state == until:
                return
        if until is not None:
            raise AssertionError(f"state is {self.sup.state}, expected {until}")

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.manager.tick(0.0)

    def ready(self) -> None:
        self.manager.post(InferenceReady(self.run_id, self.sup.attempt, time.time()))
        self.settle(RunState.RUNNING)

    def events(self, kind: str) -> list[Any]:
        return [e for e in self.store.events(self.run_id) if e.kind == kind]

    def close(self) -> None:
        for proc in self.processes:
            proc.exit(0)


@pytest.fixture
def replay_factory(tmp_path: Path) -> Iterator[Any]:
    made: list[Replay] = []

    def make(**extra: Any) -> Replay:
        replay = Replay(tmp_path, **extra)
        made.append(replay)
        return replay

    yield make
    for replay in made:
        replay.close()


def test_launcher_readiness_then_a_stall_triggers_resume(replay_factory: Any) -> None:
    r = replay_factory(health={"stall_timeout": 60, "first_step_grace": 300},
                       restart={"backoff_initial": 5, "backoff_factor": 2})
    r.settle(RunState.STARTING)
    # One process: prime-rl's own launcher, which starts the three components itself.
    assert [p.component for p in r.processes] == [LAUNCHER]
    r.ready()
    assert [p.component for p in r.processes] == [LAUNCHER]

    r.say("trainer", "\x1b[32mSUCCESS\x1b[0m Step 1 | Time: 1s | Loss: 0.1")
    r.advance(10)
    assert r.sup.step == 1
    v04_full_step(r.run_dir, 2)
    r.say("trainer", "SUCCESS Step 2 | Time: 1s")
    r.say("orchestrator", "SUCCESS Step 3 | Time: 1s")  # (it runs ahead: async_level)
    r.advance(10)
    # 59 s of silence is fine, 61 s is a hang.
    r.advance(59)
    assert r.sup.state == RunState.RUNNING
    r.advance(2)
    assert r.sup.state == RunState.RECOVERING
    # The stall names the component that stopped and its own last step, not the attempt's
    # highest (issue 31: both fell silent at once, the lower step is the one waited on).
    failure = r.events("failure")[0]
    assert failure.component == "trainer"
    assert failure.message == ("hung: step 2 has not advanced for 61 s "
                               "(health.stall_timeout = 60); orchestrator: step 3")
    r.settle()
    assert r.stops == 1
    # Backoff: nothing happens before 5 s have passed on the injected clock.
    r.advance(4.9)
    assert r.sup.attempt == 1
    r.advance(0.2)
    r.settle(RunState.STARTING)
    assert r.sup.attempt == 2
    # The containment mode is said once, with the first attempt.
    assert len(r.events("containment")) == 1
    assert r.events("containment")[0].data["mode"] in ("cgroup", "subreaper")
    # Reap + GPU preflight ran again between the failure and the relaunch.
    assert r.preflights == 2
    assert [a["resume_step"] for a in r.store.attempts(r.run_id)] == [None, 2]
    launcher = next(c for c in r.store.components(r.run_id, 2) if c.name == LAUNCHER)
    assert launcher.argv[-2:] == ["--ckpt.resume-step", "2"]


def test_an_earlier_attempts_log_lines_never_count(replay_factory: Any) -> None:
    r = replay_factory(health={"stall_timeout": 10, "first_step_grace": 100})
    r.say("trainer", "SUCCESS Step 7 | Time: 1s")  # left by an earlier run
    old = r.run_dir / "logs" / "trainer.stdout"
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    r.settle(RunState.STARTING)
    r.ready()
    r.advance(50)
    assert r.sup.step is None


def test_first_step_grace_is_longer_than_stall_timeout(replay_factory: Any) -> None:
    r = replay_factory(health={"stall_timeout": 10, "first_step_grace": 100})
    r.settle(RunState.STARTING)
    r.ready()
    r.advance(99)
    assert r.sup.state == RunState.RUNNING
    r.advance(2)
    assert r.sup.state == RunState.RECOVERING
    assert "no training step within health.first_step_grace = 100 s" in \
        r.events("failure")[0].message


def test_the_launchers_failure_line_is_acted_on_before_it_exits(replay_factory: Any) -> None:
    r = replay_factory()
    r.settle(RunState.STARTING)
    r.ready()
    r.say("trainer", "Traceback (most recent call last): ... CUDA error")
    # v0.4 rl.py:784-786 logs the first failed child, then spends up to 60 s per child stopping.
    r.current(LAUNCHER).say("ERROR Error: Trainer failed with exit code 3")
    r.advance(1)
    assert r.sup.state == RunState.RECOVERING
    failure = r.events("failure")[0]
    assert failure.component == "trainer" and "trainer exited with status 3" in failure.message
    assert any("CUDA error" in line for line in failure.data["last_lines"])


def test_crash_loop_replay_ends_failed(replay_factory: Any) -> None:
    r = replay_factory(restart={"max_restarts": 2, "window": 600, "backoff_initial": 1,
                                "backoff_factor": 2, "backoff_max": 10})
    delays = []
    for _ in range(3):
        r.settle(RunState.STARTING)
        r.current(LAUNCHER).say("Error: Inference failed with exit code 1")
        r.current(LAUNCHER).exit(1)
        r.settle()
        scheduled = r.events("restart_scheduled")
        if r.sup.state == RunState.FAILED:
            break
        delays.append(scheduled[-1].data["delay"])
        r.advance(scheduled[-1].data["delay"])
    assert delays == [1, 2]
    assert r.sup.state == RunState.FAILED
    run = r.store.get_run(r.run_id)
    assert run is not None and run.last_error is not None
    assert run.last_error.startswith("crash loop: 2 restarts within 600 s")
    assert "inference exited with status 1" in run.last_error


def test_launcher_exiting_zero_is_success(replay_factory: Any) -> None:
    r = replay_factory()
    r.settle(RunState.STARTING)
    r.ready()
    r.say("trainer", "SUCCESS RL trainer finished!")
    r.say("orchestrator", "SUCCESS Orchestrator finished.")
    r.advance(1)
    # Finished: no stall while the launcher stops the inference server (up to 60 s in v0.4).
    r.advance(100)
    assert r.sup.state == RunState.RUNNING
    r.current(LAUNCHER).exit(0)
    r.settle(RunState.SUCCEEDED)
    assert r.events("success")


def test_a_launcher_that_never_exits_after_finishing_is_stopped(replay_factory: Any) -> None:
    r = replay_factory()
    r.settle(RunState.STARTING)
    r.ready()
    r.say("trainer", "SUCCESS RL trainer finished!")
    r.say("orchestrator", "SUCCESS Orchestrator finished.")
    r.advance(1)
    r.advance(FINISH_TIMEOUT + 5)
    r.settle(RunState.SUCCEEDED)
    assert r.stops == 1


def test_readiness_timeout_fails_the_attempt(replay_factory: Any) -> None:
    r = replay_factory(health={"ready_timeout": 30})
    r.settle(RunState.STARTING)
    r.advance(31)
    assert r.sup.state == RunState.RECOVERING
    assert "not ready after 31 s" in r.events("failure")[0].message


def test_an_adopted_launcher_gone_after_the_last_step_is_a_success(replay_factory: Any) -> None:
    """A launcher adopted from an earlier daemon is not our child: its exit status is unknowable,
    so its end is read from the logs (v0.4 counts from 0: max_steps 12 ends at `Step 11`)."""
    r = replay_factory()
    r.settle(RunState.STARTING)
    r.ready()
    r.say("trainer", "SUCCESS Step 11 | Time: 1s")
    r.advance(1)
    r.sup.components[LAUNCHER].launched = None  # as after adoption
    r.advance(1)  # its pid is gone: exit status unknown
    r.settle(RunState.SUCCEEDED)
    assert not r.events("failure")


def test_an_adopted_launcher_gone_before_the_end_is_a_failure(replay_factory: Any) -> None:
    r = replay_factory()
    r.settle(RunState.STARTING)
    r.ready()
    r.say("trainer", "SUCCESS Step 5 | Time: 1s")
    r.advance(1)
    r.sup.components[LAUNCHER].launched = None
    r.advance(1)
    r.settle(RunState.RECOVERING)
    assert "exited (status unknown" in r.events("failure")[0].message


# -- the end of training (issue 20: a successful run never ends FAILED) ---------------------------
def finish_training(r: Replay) -> None:
    r.say("trainer", "SUCCESS RL trainer finished!")
    r.say("orchestrator", "SUCCESS Orchestrator finished.")
    r.advance(1)


def test_the_inference_server_stopping_after_training_is_not_a_failure(
        replay_factory: Any) -> None:
    """prime-rl's launcher stops the inference server once trainer and orchestrator finished
    (v0.4 rl.py:804-808, main entrypoints/rl.py:403-407): the failing probe that follows is
    expected, and the launcher's exit 0 ends the run succeeded."""
    r = replay_factory()
    r.settle(RunState.STARTING)
    r.ready()
    finish_training(r)
    r.manager.post(ProbeFailed(r.run_id, r.sup.attempt, "connection refused", time.time()))
    r.advance(1)
    assert r.sup.state == RunState.RUNNING and not r.events("failure")
    assert r.events("inference_stopped_after_training")
    r.current(LAUNCHER).exit(0)
    r.settle(RunState.SUCCEEDED)
    assert not r.events("failure") and r.sup.attempt == 1


def test_a_launcher_failing_in_its_cleanup_after_training_is_a_success(
        replay_factory: Any) -> None:
    r = replay_factory()
    r.settle(RunState.STARTING)
    r.ready()
    r.current(LAUNCHER).say("SUCCESS Training finished!")  # main entrypoints/rl.py:403
    r.advance(1)
    r.current(LAUNCHER).say("ERROR Error: Inference failed with exit code -15")
    r.advance(1)
    assert r.sup.state == RunState.RUNNING and not r.events("failure")
    r.current(LAUNCHER).exit(1)
    r.settle(RunState.SUCCEEDED)
    assert not r.events("failure") and r.sup.attempt == 1
    assert "while stopping the rest" in r.events("success")[0].message


def test_the_final_checkpoint_is_never_resumed(replay_factory: Any) -> None:
    """A failure after the final checkpoint (step = max_steps = 12) was written: the next
    preflight finds it and ends the run succeeded; a resume from it is never launched (main's
    trainer would start at max_steps + 1 and never end, trainer/rl/train.py:230,266)."""
    r = replay_factory()
    r.settle(RunState.STARTING)
    r.ready()
    for step in (10, 12):
        v04_full_step(r.run_dir, step)
    r.say("trainer", "SUCCESS Step 11 | Time: 1s")
    r.advance(1)
    r.manager.post(ProbeFailed(r.run_id, r.sup.attempt, "connection refused", time.time()))
    r.advance(1)
    r.settle()
    assert r.sup.state == RunState.RECOVERING
    r.advance(5)  # the backoff
    r.settle(RunState.SUCCEEDED)
    assert [p.component for p in r.processes] == [LAUNCHER], "nothing was relaunched"
    assert len(r.store.attempts(r.run_id)) == 1
    assert "step 12, is the final one" in r.events("success")[0].message


# -- an attempt's logs, known by identity (issue 20) ---------------------------------------------
def test_a_log_the_path_named_before_the_launch_is_never_read(tmp_path: Path) -> None:
    """v0.4: the previous attempt's `trainer.stdout`, written a moment ago (its mtime is no
    proof of anything), is ignored until a new file takes its path."""
    log = tmp_path / "logs" / "trainer.stdout"
    log.parent.mkdir()
    log.write_text("SUCCESS Step 7 | Time: 1s\n")
    view = LogView(lambda: log)
    with open(log, "a") as handle:  # the old attempt's last words, after the view was made
        handle.write("SUCCESS Step 8 | Time: 1s\n")
    assert view.read_new_lines() == []
    log.unlink()  # v0.4's clean (rl.py:573-580), then its launch opens the log with "w"
    log.write_text("SUCCESS Step 6 | Time: 1s\n")
    assert view.read_new_lines() == ["SUCCESS Step 6 | Time: 1s"]
    view.close()


def test_main_logs_of_the_previous_attempt_dir_are_never_read(tmp_path: Path) -> None:
    """main: `logs/latest` names the previous attempt's directory until the new launch makes
    `attempt_<n+1>` (utils/pathing.py:14-39)."""
    logs = tmp_path / "logs"
    (logs / "attempt_1").mkdir(parents=True)
    (logs / "attempt_1" / "trainer.log").write_text("SUCCESS Step 9 | Time: 1s\n")
    (logs / "latest").symlink_to("attempt_1")

    def locate() -> Path:
        return logs / os.readlink(logs / "latest") / "trainer.log"

    view = LogView(locate)
    assert view.read_new_lines() == []
    (logs / "attempt_2").mkdir()
    (logs / "attempt_2" / "trainer.log").write_text("SUCCESS Step 5 | Time: 1s\n")
    (logs / "latest").unlink()
    (logs / "latest").symlink_to("attempt_2")
    assert view.read_new_lines() == ["SUCCESS Step 5 | Time: 1s"]


def test_a_relaunch_keeps_the_earlier_launchs_v04_logs(replay_factory: Any) -> None:
    r = replay_factory(health={"stall_timeout": 10, "first_step_grace": 100})
    r.settle(RunState.STARTING)
    r.ready()
    r.say("trainer", "SUCCESS Step 7 | Time: 1s")
    r.advance(1)
    r.current(LAUNCHER).say("Error: Trainer failed with exit code 1")
    r.advance(1)
    r.settle()
    r.advance(5)
    r.settle(RunState.STARTING)
    assert r.sup.attempt == 2
    kept = r.sup.attempt_dir_of(2) / "previous-logs" / "trainer.stdout"
    assert "Step 7" in kept.read_text()
    assert not (r.run_dir / "logs" / "trainer.stdout").exists()
    # The new attempt starts with its first-step grace (100 s), not the stall timeout (10 s)
    # counted from the old step 7.
    r.ready()
    r.advance(50)
    assert r.sup.state == RunState.RUNNING and len(r.events("failure")) == 1


# -- adoption: what happened while nobody watched (issue 21) -------------------------------------
def test_an_adopted_attempt_without_a_step_keeps_its_first_step_grace(
        replay_factory: Any) -> None:
    r = replay_factory(health={"stall_timeout": 10, "first_step_grace": 100})
    r.settle(RunState.STARTING)
    r.ready()
    r.reboot(components_alive=True)  # the daemon died before the first step
    r.ready()
    r.advance(50)  # past stall_timeout, within first_step_grace
    assert r.sup.state == RunState.RUNNING and not r.events("failure")
    r.advance(60)
    assert r.sup.state == RunState.RECOVERING
    assert "first_step_grace" in r.events("failure")[0].message


def test_a_run_that_finished_while_no_daemon_watched_is_recorded_whole(
        replay_factory: Any) -> None:
    r = replay_factory(health={"stall_timeout": 10, "first_step_grace": 100})
    r.settle(RunState.STARTING)
    r.ready()
    r.say("trainer", "SUCCESS Step 3 | Time: 1s")
    r.advance(1)
    r.sup.detach()
    # While the daemon is down, training ends.
    r.say("trainer", "SUCCESS Step 11 | Time: 1s")
    r.say("trainer", "SUCCESS RL trainer finished!")
    r.say("orchestrator", "SUCCESS Orchestrator finished.")
    r.store.update_run(r.run_id, supervisor_started=1.0)  # that daemon is gone
    manager = r._new_manager()
    manager.adopt_on_boot()
    run = r.store.get_run(r.run_id)
    assert run is not None
    assert (run.state, run.phase) == ("succeeded", "succeeded"), (run.state, run.phase)
    assert run.step == 11 and run.ended_at is not None
    last = r.store.attempts(r.run_id)[-1]
    assert last["outcome"] == "succeeded" and last["ended_at"] is not None
    assert not r.events("failure")


def test_finished_lines_an_adopted_attempt_wrote_unwatched_are_seen(replay_factory: Any) -> None:
    """Adopted while its launcher is still cleaning up (the inference server alive): the
    finished lines written while no daemon watched count, so no hang is declared."""
    r = replay_factory(health={"stall_timeout": 10, "first_step_grace": 100})
    r.settle(RunState.STARTING)
    r.ready()
    r.say("trainer", "SUCCESS Step 3 | Time: 1s")
    r.advance(1)
    r.reboot(components_alive=True)
    r.say("trainer", "SUCCESS Step 11 | Time: 1s")
    r.say("trainer", "SUCCESS RL trainer finished!")
    r.say("orchestrator", "SUCCESS Orchestrator finished.")
    r.sup._catch_up_milestones([r.run_dir / "logs" / "trainer.stdout",
                                r.run_dir / "logs" / "orchestrator.stdout"])
    r.ready()
    r.advance(60)  # far past stall_timeout
    assert not r.events("failure") and r.sup.state == RunState.RUNNING


def test_a_finished_run_leaves_the_managers_memory(replay_factory: Any) -> None:
    """Issue 21: a daemon's memory does not grow with the runs it has seen; the finished run's
    history stays in the store, and a command for it says it ended."""
    r = replay_factory()
    r.settle(RunState.STARTING)
    r.ready()
    r.current(LAUNCHER).exit(0)
    r.settle(RunState.SUCCEEDED)
    r.manager.tick(0.0)
    assert r.manager.supervisor(r.run_id) is None
    run = r.store.get_run(r.run_id)
    assert run is not None and run.state == "succeeded" and r.events("success")
    with pytest.raises(RunConflict, match="has already ended"):
        r.manager.request_stop(r.run_id)


class FakeDeathWatch:
    """The members' death watcher, reported to by hand (the real one: tests/proc)."""

    def __init__(self, on_death: Any) -> None:
        self.on_death = on_death
        self.watched: dict[str, int] = {}
        self.closed = False

    def watch(self, key: str, pid: int, create_time: float | None = None) -> bool:
        self.watched[key] = pid
        return True

    def close(self) -> None:
        self.closed = True

    def report(self, key: str, returncode: int | None, pid: int | None = None) -> None:
        self.on_death(Death(key, self.watched[key] if pid is None else pid, time.time(),
                            "pidfd", returncode))


MEMBERS = {"inference": 880_001, "trainer": 880_002, "orchestrator": 880_003}


def running_with_watched_members(replay_factory: Any) -> tuple[Replay, list[FakeDeathWatch]]:
    r = replay_factory()
    watchers: list[FakeDeathWatch] = []

    def death_watch(on_death: Any) -> FakeDeathWatch:
        watchers.append(FakeDeathWatch(on_death))
        return watchers[-1]

    r.manager.hooks.members = lambda pid: dict(MEMBERS)
    r.manager.hooks.death_watch = death_watch
    r.settle(RunState.STARTING)
    r.ready()
    r.advance(1)
    assert len(watchers) == 1 and watchers[0].watched == MEMBERS
    return r, watchers


@pytest.mark.parametrize(("member", "returncode", "lines", "fails", "said"), [
    # Its parent reaped it first: acted on at once all the same.
    ("trainer", None, {}, True, "trainer exited (seen at once by airvisor; "),
    # Still a zombie when seen: its status is known.
    ("orchestrator", 1, {}, True, "orchestrator exited with status 1 (seen at once"),
    ("trainer", -9, {}, True, "trainer killed by SIGKILL (seen at once"),
    # A normal end is the launcher's to act on: status 0, or its own "finished" line.
    ("trainer", 0, {}, False, None),
    ("trainer", None, {"trainer": "RL trainer finished!"}, False, None),
    # The launcher stops its server once training finished.
    ("inference", -15, {"trainer": "RL trainer finished!",
                        "orchestrator": "Orchestrator finished."}, False, None),
])
def test_a_members_death_is_acted_on_at_once(replay_factory: Any, member: str,
                                             returncode: int | None, lines: dict[str, str],
                                             fails: bool, said: str | None) -> None:
    r, watchers = running_with_watched_members(replay_factory)
    for source, line in lines.items():
        r.say(source, line)
    watchers[0].report(member, returncode)
    r.settle()
    failures = r.events("failure")
    if not fails:
        assert failures == [] and r.sup.state == RunState.RUNNING
        return
    assert r.sup.state == RunState.RECOVERING
    assert [f.component for f in failures] == [member]
    assert said is not None and said in failures[0].message
    seen, = r.events("member_exited")
    assert seen.data["pid"] == MEMBERS[member] and seen.data["returncode"] == returncode


def test_a_death_of_another_pid_or_an_earlier_attempt_is_not_the_members(
        replay_factory: Any) -> None:
    r, watchers = running_with_watched_members(replay_factory)
    watchers[0].report("trainer", 1, pid=12345)  # not the pid recorded for the member
    r.settle()
    assert r.events("failure") == []
    # A relaunch closes the last attempt's watcher; a late report from it is an echo.
    r.current(LAUNCHER).say("Error: Trainer failed with exit code 1")
    r.advance(1)
    r.settle()
    r.advance(60)
    r.settle(RunState.STARTING)
    assert r.sup.attempt == 2 and watchers[0].closed
    watchers[0].report("orchestrator", 1)
    r.settle()
    assert len(r.events("failure")) == 1 and r.sup.state == RunState.STARTING


def settle_until(r: Replay, done: Any) -> None:
    """Worker threads report (real time, the fake clock still) until `done()` holds; bounded
    by SETTLE_LIMIT, never a timing assertion."""
    deadline = time.monotonic() + SETTLE_LIMIT
    while not done():
        assert time.monotonic() < deadline, "not settled"
        r.manager.tick(0.02)


def test_the_launchers_later_status_line_completes_a_failure_recorded_without_it(
        replay_factory: Any) -> None:
    """Issue 29: prime-rl's launcher reaped the trainer before airvisor read its status; the
    stop waits (bounded) for the launcher's "Trainer failed with exit code N", written a second
    later, and that line gives the recorded failure its status (README: the reason names the
    exit status)."""
    r, watchers = running_with_watched_members(replay_factory)
    watchers[0].report("trainer", None)
    r.settle(RunState.RECOVERING)
    failure, = r.events("failure")
    assert "its status is the launcher's to know" in failure.message
    # v0.4 rl.py:780-786 / main entrypoints/rl.py:376-383: its main loop's line.
    r.current(LAUNCHER).say("ERROR Error: Trainer failed with exit code 3")
    settle_until(r, lambda: r.events("restart_scheduled"))
    amended, = r.events("failure_status")
    assert amended.component == "trainer" and amended.data["exit_code"] == "3"
    assert "trainer exited with status 3" in amended.data["reason"]
    run = r.run()
    assert run.last_error is None or run.last_error == amended.data["reason"]
    attempt = next(a for a in r.store.attempts(r.run_id) if a["number"] == 1)
    assert attempt["outcome"] == "failed" and attempt["reason"] == amended.data["reason"]
    restart, = r.store.restart_history(r.run_id)
    assert restart.reason == amended.data["reason"] and restart.counted


def test_a_status_line_of_another_child_leaves_the_failure_as_recorded(
        replay_factory: Any) -> None:
    r, watchers = running_with_watched_members(replay_factory)
    watchers[0].report("trainer", None)
    r.settle(RunState.RECOVERING)
    r.current(LAUNCHER).say("ERROR Error: Orchestrator failed with exit code 1")
    # (the stop waits its bound for the trainer's line, then the restart is decided)
    settle_until(r, lambda: r.events("restart_scheduled"))
    assert r.events("failure_status") == []
    attempt = next(a for a in r.store.attempts(r.run_id) if a["number"] == 1)
    assert "its status is the launcher's to know" in attempt["reason"]


def test_a_stop_asked_while_the_stop_waits_for_the_status_line_keeps_the_status(
        replay_factory: Any) -> None:
    """The sim's seed 82 (issue 29): an operator's stop arrives while the recovery's stop waits
    for the launcher's status line; the run ends stopped and its failure has the status."""
    r, watchers = running_with_watched_members(replay_factory)
    watchers[0].report("trainer", None)
    r.settle(RunState.RECOVERING)
    r.manager.request_stop(r.run_id)
    settle_until(r, lambda: r.events("stop_requested"))
    r.current(LAUNCHER).say("ERROR Error: Trainer failed with exit code 3")
    r.settle(RunState.STOPPED)
    amended, = r.events("failure_status")
    assert "trainer exited with status 3" in amended.data["reason"]
    assert r.run().last_error == amended.data["reason"]


def test_a_member_that_failed_while_no_daemon_watched_is_recorded_as_its_crash(
        replay_factory: Any) -> None:
    """The sim's "a member dead while no daemon watched" (issue 29): the trainer fails while
    the daemon is down, prime-rl's launcher says so and ends; the next daemon finds nothing
    alive. The failure is the trainer's crash with the status the launcher logged (counted),
    not a status-less boot restart."""
    r = replay_factory()
    r.settle(RunState.STARTING)
    r.ready()
    r.sup.detach()
    r.current(LAUNCHER).say("ERROR Error: Trainer failed with exit code 3")
    r.current(LAUNCHER).exit(1)
    r.reboot()
    settle_until(r, lambda: r.events("restart_scheduled"))
    failure, = r.events("failure")
    assert failure.component == "trainer"
    assert failure.message.startswith("trainer exited with status 3 while no supervisor watched")
    restart, = r.store.restart_history(r.run_id)
    assert (restart.kind, restart.counted) == ("crash", True)
    attempt = next(a for a in r.store.attempts(r.run_id) if a["number"] == 1)
    assert attempt["outcome"] == "failed" and attempt["reason"] == failure.message


def test_a_death_whose_log_names_a_full_disk_is_the_machines_even_once_it_cleared(
        replay_factory: Any) -> None:
    """The disk filled and was freed again before airvisor looked (issue 29, found by the
    sim): the trainer's last lines name the error, so its death is the machine's, uncounted."""
    r = replay_factory()
    r.settle(RunState.STARTING)
    r.ready()
    r.say("trainer", "OSError: [Errno 28] No space left on device: 'checkpoints/step_4'")
    r.current(LAUNCHER).say("ERROR Error: Trainer failed with exit code 1")
    r.advance(1)
    settle_until(r, lambda: r.events("restart_scheduled"))
    failure, = r.events("failure")
    assert failure.data["failure_kind"] == "machine" and failure.component == "trainer"
    assert "its log says 'No space left on device'" in failure.message
    restart, = r.store.restart_history(r.run_id)
    assert (restart.kind, restart.counted) == ("machine", False)
