"""SlurmRunSupervisor replayed against a fake Slurm: the test plays the job's states and the
files the job writes on the shared filesystem, and advances the clock by hand."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airvisor.core import Command
from airvisor.policy import Phase, RunState
from airvisor.profile import Profile
from airvisor.runs import RunManager
from airvisor.store import Store

from ._support import Driver, FakeRender, FakeSlurm, full_step, slurm_profile, write_log

STEP = "\x1b[32mSUCCESS\x1b[0m Step {} | Time: 0.10s"


@pytest.fixture
def profile(tmp_path: Path) -> Profile:
    return slurm_profile(tmp_path)


def run_dir(profile: Profile) -> Path:
    assert profile.resolved is not None
    return Path(profile.resolved["run_dir"])


def start(tmp_path: Path, profile: Profile, slurm: FakeSlurm,
          render: FakeRender | None = None) -> Driver:
    driver = Driver(Store(tmp_path / "state" / "airvisor.sqlite3"), profile, slurm=slurm,
                    render=render)
    driver.sup.begin()
    driver.pump(lambda: driver.sup.state == RunState.STARTING)
    return driver


def test_a_clean_run_records_job_nodes_and_state_and_succeeds(tmp_path: Path,
                                                              profile: Profile) -> None:
    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    job = slurm.last
    assert d.store.get_run(d.run_id).details["slurm_job_id"] == job  # type: ignore[union-attr]
    d.pump(lambda: d.sup.job is not None and d.sup.job.state == "PENDING")
    assert d.sup.state == RunState.STARTING  # queued: no stall is counted
    slurm.set(job, "RUNNING", ["node1", "node2"])
    d.pump(lambda: d.sup.state == RunState.RUNNING)
    write_log(run_dir(profile), 1, "trainer", STEP.format(1), STEP.format(2))
    d.pump(lambda: d.sup.step == 2)
    slurm.set(job, "COMPLETED", ["node1", "node2"])  # single-node template: `rl` exits 0
    d.pump(lambda: d.sup.finished.is_set())
    assert d.sup.state == RunState.SUCCEEDED
    run = d.store.get_run(d.run_id)
    assert run is not None and run.state == "succeeded"
    assert run.details["slurm_nodes"] == ["node1", "node2"]
    assert run.details["slurm_state"].startswith("COMPLETED")
    (attempt,) = d.store.attempts(d.run_id)
    assert attempt["cause"] == "first" and attempt["details"]["job_id"] == job
    assert attempt["details"]["nodes"] == ["node1", "node2"] and attempt["outcome"] == "succeeded"
    assert slurm.cancelled == []  # ended by itself: nothing to cancel


def test_training_finished_but_inference_nodes_keep_the_job_alive_is_cancelled(
        tmp_path: Path, profile: Profile) -> None:
    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    slurm.set(slurm.last, "RUNNING")
    d.pump(lambda: d.sup.state == RunState.RUNNING)
    write_log(run_dir(profile), 1, "trainer", STEP.format(6), "RL trainer finished!")
    write_log(run_dir(profile), 1, "orchestrator", "Orchestrator finished.")
    d.pump(lambda: d.sup.finished.is_set())
    assert d.sup.state == RunState.SUCCEEDED and slurm.cancelled == [slurm.last]


def test_a_failed_job_is_resubmitted_from_the_newest_complete_checkpoint(
        tmp_path: Path, profile: Profile) -> None:
    slurm, render = FakeSlurm(), FakeRender()
    d = start(tmp_path, profile, slurm, render)
    first = slurm.last
    slurm.set(first, "RUNNING")
    d.pump(lambda: d.sup.state == RunState.RUNNING)
    write_log(run_dir(profile), 1, "trainer", STEP.format(1), STEP.format(2), STEP.format(3))
    full_step(run_dir(profile), 2)
    (run_dir(profile) / f"job_{first}.log").write_text(
        "ERROR Trainer failed with exit code 1\n")
    slurm.set(first, "FAILED", code=1)
    d.pump(lambda: len(slurm.submissions) == 2 and d.sup.state == RunState.STARTING)
    assert render.resume_steps == [None, 2]
    attempts = d.store.attempts(d.run_id)
    assert [a["details"]["job_id"] for a in attempts] == [first, slurm.last]
    assert attempts[0]["outcome"] == "failed"
    assert "trainer exited with status 1" in attempts[0]["reason"]
    assert attempts[1]["cause"] == "crash" and attempts[1]["resume_step"] == 2
    (restart,) = d.store.restart_history(d.run_id)
    assert restart.kind == "crash" and restart.counted and restart.attempt == 1
    assert d.store.get_run(d.run_id).details["slurm_job_id"] == slurm.last  # type: ignore


def test_a_stall_cancels_the_job_and_resubmits(tmp_path: Path, profile: Profile) -> None:
    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    first = slurm.last
    slurm.set(first, "RUNNING")
    d.pump(lambda: d.sup.state == RunState.RUNNING)
    write_log(run_dir(profile), 1, "orchestrator", STEP.format(1), STEP.format(2))
    write_log(run_dir(profile), 1, "trainer", STEP.format(1))
    d.pump(lambda: d.sup.step == 1)
    d.pump(lambda: len(slurm.submissions) == 2, advance=2.0)  # 30 s stall_timeout
    assert slurm.cancelled == [first]
    (failure,) = d.messages("failure")
    # The trainer's own last step, the orchestrator's beside it (issue 31), as on the box.
    assert failure.startswith("hung: step 1 has not advanced for ")
    assert failure.endswith(" s (health.stall_timeout = 30); orchestrator: step 2")
    assert [e.component for e in d.store.events(d.run_id) if e.kind == "failure"] == ["trainer"]
    (restart,) = d.store.restart_history(d.run_id)
    assert restart.kind == "hang" and restart.counted
    # Where it cannot look, it says so (issue 23): the job's processes are on the nodes.
    (stacks,) = d.messages("stacks")
    assert "stacks not taken" in stacks and f"srun --jobid {first}" in stacks


def test_the_queue_wait_is_not_a_stall(tmp_path: Path, profile: Profile) -> None:
    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    start_time = d.now  # 200 s of fake time in the queue (first_step_grace is 60 s)
    d.pump(lambda: d.now >= start_time + 200, advance=4.0)
    assert d.sup.state == RunState.STARTING and len(slurm.submissions) == 1


def test_a_node_that_failed_twice_is_excluded(tmp_path: Path, profile: Profile) -> None:
    slurm = FakeSlurm()
    slurm.nodes = {"node1": "down*", "node2": "idle"}
    d = start(tmp_path, profile, slurm)
    for n in (1, 2):
        slurm.set(slurm.last, "RUNNING", ["node1", "node2"])
        d.pump(lambda: d.sup.state == RunState.RUNNING)
        slurm.set(slurm.last, "NODE_FAIL", ["node1", "node2"])
        d.pump(lambda n=n: len(d.store.attempts(d.run_id)) == n + 1)  # type: ignore[misc]
    assert [s.options for s in slurm.submissions] == [[], [], ["--exclude=node1"]]
    attempts = d.store.attempts(d.run_id)
    assert attempts[0]["details"]["blamed"] == ["node1"]
    assert attempts[2]["details"]["exclude"] == ["node1"]
    assert "blamed node(s): node1" in attempts[1]["reason"]


def test_a_crash_loop_gives_up(tmp_path: Path, profile: Profile) -> None:
    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    for n in range(1, 5):
        slurm.set(slurm.last, "FAILED", code=1)
        d.pump(lambda n=n: len(slurm.submissions) == n + 1 or d.sup.finished.is_set())  # type: ignore[misc]
    assert d.sup.state == RunState.FAILED and len(slurm.submissions) == 4
    assert "crash loop: 3 restarts" in (d.store.get_run(d.run_id).last_error or "")  # type: ignore


def test_stop_cancels_the_job(tmp_path: Path, profile: Profile) -> None:
    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    slurm.set(slurm.last, "RUNNING")
    d.pump(lambda: d.sup.state == RunState.RUNNING)
    d.sup.handle(Command(d.run_id, "stop"))
    d.pump(lambda: d.sup.finished.is_set())
    assert d.sup.state == RunState.STOPPED and slurm.cancelled == [slurm.last]
    assert d.store.attempts(d.run_id)[0]["outcome"] == "stopped"


def test_a_refused_first_submission_fails_the_run(tmp_path: Path, profile: Profile) -> None:
    slurm = FakeSlurm(fail_submit="sbatch --parsable failed (exit 1): invalid partition")
    d = Driver(Store(tmp_path / "s.sqlite3"), profile, slurm=slurm)
    d.sup.begin()
    d.pump(lambda: d.sup.finished.is_set())
    assert d.sup.state == RunState.FAILED
    assert "invalid partition" in (d.store.get_run(d.run_id).last_error or "")  # type: ignore


def test_node_check_reports_land_in_the_history_and_a_failed_one_blames_its_node(
        tmp_path: Path, profile: Profile) -> None:
    import json

    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    slurm.set(slurm.last, "RUNNING", ["node1", "node2"])
    d.pump(lambda: d.sup.state == RunState.RUNNING)
    reports = d.sup.files.report_dir
    assert reports is not None
    (reports / "node1.json").write_text(json.dumps(
        {"host": "node1", "ok": True, "summary": "reaped 1 process(es); no GPUs to check"}))
    (reports / "node2.json").write_text(json.dumps(
        {"host": "node2", "ok": False, "summary": "preflight failed: GPU 0 memory held"}))
    d.pump(lambda: len(d.messages("node_check")) == 1 and
           len(d.messages("node_check_failed")) == 1)
    slurm.set(slurm.last, "FAILED", ["node1", "node2"], code=1)
    d.pump(lambda: len(d.store.attempts(d.run_id)) == 2)
    assert d.store.attempts(d.run_id)[0]["details"]["blamed"] == ["node2"]


def test_reattach_to_a_running_job_and_to_one_that_ended(tmp_path: Path,
                                                         profile: Profile) -> None:
    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    job = slurm.last
    slurm.set(job, "RUNNING")
    d.pump(lambda: d.sup.state == RunState.RUNNING)
    write_log(run_dir(profile), 1, "trainer", STEP.format(1), STEP.format(2))
    d.pump(lambda: d.sup.step == 2)
    d.sup.detach()  # the daemon goes away; the job does not
    write_log(run_dir(profile), 1, "trainer", STEP.format(3))
    run = d.store.get_run(d.run_id)
    assert run is not None
    again = Driver(d.store, profile, slurm=slurm, run_id=d.run_id, create=False)
    again.sup.reattach(run)
    assert again.sup.job_id == job and again.sup.state == RunState.RUNNING
    again.pump(lambda: again.sup.step == 3)  # the lines written meanwhile are read
    again.sup.detach()
    # The job ended while no daemon watched: the next one acts on how it ended.
    write_log(run_dir(profile), 1, "trainer", "RL trainer finished!")
    write_log(run_dir(profile), 1, "orchestrator", "Orchestrator finished.")
    slurm.set(job, "COMPLETED")
    run = d.store.get_run(d.run_id)
    assert run is not None
    third = Driver(d.store, profile, slurm=slurm, run_id=d.run_id, create=False)
    third.sup.reattach(run)
    third.pump(lambda: third.sup.finished.is_set())
    assert third.sup.state == RunState.SUCCEEDED and len(slurm.submissions) == 1


def test_an_operator_restart_cancels_and_resubmits_uncounted(tmp_path: Path,
                                                             profile: Profile) -> None:
    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    first = slurm.last
    slurm.set(first, "RUNNING")
    d.pump(lambda: d.sup.state == RunState.RUNNING)
    d.sup.handle(Command(d.run_id, "restart"))
    d.pump(lambda: len(d.store.attempts(d.run_id)) == 2)
    assert slurm.cancelled == [first]
    (restart,) = d.store.restart_history(d.run_id)
    assert restart.kind == "operator" and not restart.counted
    assert d.store.attempts(d.run_id)[1]["cause"] == "operator"


class FlakySlurm(FakeSlurm):
    """slurmctld does not answer for a while."""

    down = True

    def job(self, job_id: str) -> Any:
        from airvisor.slurm import SlurmError

        if self.down:
            raise SlurmError("scontrol show job failed (exit 1): Unable to contact slurm "
                             "controller (connect failure)")
        return super().job(job_id)


def test_an_unreachable_controller_is_reported_never_taken_for_a_failed_job(
        tmp_path: Path, profile: Profile) -> None:
    slurm = FlakySlurm()
    d = start(tmp_path, profile, slurm)
    slurm.set(slurm.last, "RUNNING")
    d.pump(lambda: len(d.messages("slurm_unreachable")) == 1)
    assert d.sup.state == RunState.STARTING and len(slurm.submissions) == 1
    slurm.down = False
    d.pump(lambda: d.sup.state == RunState.RUNNING)


def test_a_daemon_that_died_while_stopping_finishes_the_stop(tmp_path: Path,
                                                            profile: Profile) -> None:
    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    slurm.set(slurm.last, "RUNNING")
    d.pump(lambda: d.sup.state == RunState.RUNNING)
    d.sup.handle(Command(d.run_id, "stop"))
    d.sup.detach()  # dies before the cancel task reports
    slurm.jobs[slurm.last] = slurm.jobs[slurm.last].__class__(job_id=slurm.last,
                                                              state="RUNNING")
    run = d.store.get_run(d.run_id)
    assert run is not None and run.state == "stopping"
    again = Driver(d.store, profile, slurm=slurm, run_id=d.run_id, create=False)
    again.sup.reattach(run)
    again.pump(lambda: again.sup.finished.is_set())
    assert again.sup.state == RunState.STOPPED and slurm.cancelled.count(slurm.last) == 2


@dataclass
class ClockedSlurm(FakeSlurm):
    """FakeSlurm that notes the supervisor's clock at each submission (`clock`: set by the
    test to the clock of the supervisor that submits)."""

    clock: Callable[[], float] = lambda: 0.0
    submitted_at: list[float] = field(default_factory=list)

    def submit(self, script: Path, *, options: Sequence[str], env: Mapping[str, str],
               cwd: Path) -> str:
        self.submitted_at.append(self.clock())
        return super().submit(script, options=options, env=env, cwd=cwd)


def test_the_phase_is_persisted_and_a_daemon_dead_in_backoff_waits_out_its_deadline(
        tmp_path: Path, profile: Profile) -> None:
    """The Slurm supervisor runs on the same run machine as one box: a daemon that died while
    backing off leaves the machine persisted with the backoff's deadline; the next daemon, on
    clocks unrelated to the dead one's (its monotonic clock restarted, its wall clock 25 s
    later), waits out the rest of it (the same wall moment, on its own clock), then submits
    the next job, its restart counted once (issue 29 item 1: the same outcome and restart
    count as without the daemon's death). The clocks are the test's: an order, not a timing."""
    # A backoff to die in: the first restart waits too (restart.immediate_first off).
    profile = slurm_profile(tmp_path, restart={"immediate_first": False, "backoff_initial": 60,
                                                "backoff_max": 60})
    slurm = ClockedSlurm()
    wall_offset = 1_700_000_000.0
    d = Driver(Store(tmp_path / "state" / "airvisor.sqlite3"), profile, slurm=slurm,
               wall_offset=wall_offset)
    slurm.clock = lambda: d.now
    d.sup.begin()
    d.pump(lambda: d.sup.state == RunState.STARTING)
    slurm.set(slurm.last, "FAILED", code=1)
    d.pump(lambda: d.sup.phase == Phase.BACKOFF)
    before = d.sup.machine
    assert before.backoff_until is not None and before.restarts == 1
    deadline_wall = before.backoff_until + wall_offset  # (the dead daemon's wall = now + offset)
    run = d.store.get_run(d.run_id)
    assert run is not None and run.phase == "recovering.backoff" and run.state == "recovering"
    assert run.machine_json is not None
    assert json.loads(run.machine_json)["machine"]["backoff_until"] == \
        pytest.approx(deadline_wall)
    d.sup.detach()

    later = wall_offset + (d.now - 1000.0) + 25.0  # (a new Driver's clock starts at 1000)
    again = Driver(d.store, profile, slurm=slurm, run_id=d.run_id, create=False,
                   wall_offset=later)
    slurm.clock = lambda: again.now
    again.sup.reattach(run)
    assert again.sup.phase == Phase.BACKOFF  # waiting out the rest, not submitting at once
    until = again.sup.machine.backoff_until
    assert until is not None and until > again.now
    # The same wall moment, on the new daemon's monotonic clock.
    assert until + later == pytest.approx(deadline_wall)
    assert again.sup.machine.failure == before.failure
    assert (again.sup.machine.restarts, again.sup.machine.counted_restarts) == \
        (before.restarts, before.counted_restarts)
    again.pump(lambda: again.now >= until - 1.0, advance=0.5)
    assert len(slurm.submissions) == 1  # nothing submitted before the deadline
    # (the second attempt is recorded when the supervisor handles the submission's report)
    again.pump(lambda: len(d.store.attempts(d.run_id)) == 2, advance=0.5)
    assert len(slurm.submissions) == 2 and slurm.submitted_at[-1] >= until
    assert [(r.kind, r.counted) for r in d.store.restart_history(d.run_id)] == [("crash", True)]
    assert again.sup.machine.restarts == 1
    assert d.store.attempts(d.run_id)[-1]["cause"] == "crash"


def dead_in_a_backoff(tmp_path: Path, slurm: FakeSlurm) -> tuple[Driver, Profile, Any]:
    """A run whose job failed, backing off 60 s, and its daemon dead there: the driver of the
    dead daemon (its clock stopped), the profile, the run as the store has it. The dead
    daemon's wall clock is DEAD_WALL + (its `now` - 1000)."""
    profile = slurm_profile(tmp_path, restart={"immediate_first": False, "backoff_initial": 60,
                                                "backoff_max": 60})
    d = Driver(Store(tmp_path / "state" / "airvisor.sqlite3"), profile, slurm=slurm,
               wall_offset=DEAD_WALL)
    d.sup.begin()
    d.pump(lambda: d.sup.state == RunState.STARTING)
    slurm.set(slurm.last, "FAILED", code=1)
    d.pump(lambda: d.sup.phase == Phase.BACKOFF)
    run = d.store.get_run(d.run_id)
    assert run is not None
    d.sup.detach()
    return d, profile, run


DEAD_WALL = 1_700_000_000.0


def test_a_stop_in_the_backoff_a_new_daemon_waits_out_ends_the_run_stopped(
        tmp_path: Path, profile: Profile) -> None:
    """A daemon dies in the backoff; the next one takes over and waits out the rest; a stop
    asked then ends the run stopped at once: no job submitted after the failed one, the
    failed attempt's outcome and its one counted restart as they were."""
    slurm = FakeSlurm()
    d, profile, run = dead_in_a_backoff(tmp_path, slurm)
    again = Driver(d.store, profile, slurm=slurm, run_id=d.run_id, create=False,
                   wall_offset=DEAD_WALL + d.now - 1000.0 + 10.0)
    again.sup.reattach(run)
    assert again.sup.phase == Phase.BACKOFF  # waiting out the rest
    until = again.sup.machine.backoff_until
    assert until is not None
    again.pump(lambda: again.now >= 1010.0, advance=0.5)  # some of it
    again.sup.handle(Command(d.run_id, "stop"))
    again.pump(lambda: again.sup.finished.is_set(), advance=0.5)
    assert again.sup.state == RunState.STOPPED
    assert again.now < until  # ended in the backoff, not after waiting it out
    assert len(slurm.submissions) == 1  # nothing submitted after the failed job
    assert [a["outcome"] for a in d.store.attempts(d.run_id)] == ["failed"]
    assert [(r.kind, r.counted) for r in d.store.restart_history(d.run_id)] == [("crash", True)]
    final = d.store.get_run(d.run_id)
    assert final is not None and final.state == "stopped"


def test_a_daemon_dead_in_backoff_past_its_deadline_submits_at_once(
        tmp_path: Path, profile: Profile) -> None:
    """The persisted deadline has passed when the next daemon takes over (it was down longer
    than the backoff): it submits the next job at once, its restart counted once."""
    slurm = FakeSlurm()
    d, profile, run = dead_in_a_backoff(tmp_path, slurm)
    # The new daemon's wall clock is 61 s past the dead one's: the deadline has passed.
    again = Driver(d.store, profile, slurm=slurm, run_id=d.run_id, create=False,
                   wall_offset=DEAD_WALL + d.now - 1000.0 + 61.0)
    again.sup.reattach(run)
    assert again.sup.phase == Phase.PREFLIGHT  # submitting now
    again.pump(lambda: len(d.store.attempts(d.run_id)) == 2)
    assert len(slurm.submissions) == 2
    assert [(r.kind, r.counted) for r in d.store.restart_history(d.run_id)] == [("crash", True)]


def test_a_daemon_dead_while_ending_a_failed_job_finishes_that_recovery(
        tmp_path: Path, profile: Profile) -> None:
    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    slurm.set(slurm.last, "RUNNING")
    d.pump(lambda: d.sup.state == RunState.RUNNING)
    write_log(run_dir(profile), 1, "trainer", STEP.format(1))
    d.pump(lambda: d.sup.step == 1)
    d.pump(lambda: d.sup.phase == Phase.RECOVERY_STOPPING, advance=2.0)  # a stall
    d.sup.detach()  # dies before the cancel reports
    run = d.store.get_run(d.run_id)
    assert run is not None and run.phase == "recovering.stopping"
    again = Driver(d.store, profile, slurm=slurm, run_id=d.run_id, create=False)
    again.sup.reattach(run)
    again.pump(lambda: len(slurm.submissions) == 2)
    assert [(r.kind, r.counted) for r in d.store.restart_history(d.run_id)] == [("hang", True)]


def test_a_stop_while_submitting_cancels_what_was_submitted(tmp_path: Path,
                                                           profile: Profile) -> None:
    slurm = FakeSlurm()
    d = Driver(Store(tmp_path / "state" / "airvisor.sqlite3"), profile, slurm=slurm)
    d.sup.begin()  # the submit task is running
    d.sup.handle(Command(d.run_id, "stop"))
    assert d.sup.phase == Phase.STOPPING_STOPPED
    d.pump(lambda: d.sup.finished.is_set())
    assert d.sup.state == RunState.STOPPED and slurm.cancelled == [slurm.last]


def test_an_exception_in_a_handler_never_leaves_the_run_wedged(tmp_path: Path,
                                                                profile: Profile) -> None:
    """Issue 29: an exception in `_on_submitted` (here the store's first write about the new
    job) left the run in PREFLIGHT for ever: the manager's guard found no internal-error path
    for Slurm. The core's `on_internal_error` fails the attempt (its submitted job cancelled)
    and the restart policy resubmits."""
    slurm = FakeSlurm()
    d = Driver(Store(tmp_path / "state" / "airvisor.sqlite3"), profile, slurm=slurm)
    manager = RunManager(d.store)
    write = d.store.merge_attempt_details
    broken: list[bool] = []

    def first_write_fails(*args: Any, **kwargs: Any) -> None:
        if not broken:
            broken.append(True)
            raise RuntimeError("the store's disk hiccupped")
        write(*args, **kwargs)

    d.store.merge_attempt_details = first_write_fails  # type: ignore[method-assign]
    handle = d.sup.handle
    # Dispatched through the manager's guard, as the daemon does.
    d.sup.handle = lambda event: manager._guard(  # type: ignore[method-assign]
        d.sup, lambda: handle(event))
    d.sup.begin()
    d.pump(lambda: len(slurm.submissions) == 2 and d.sup.state == RunState.STARTING)
    first = slurm.submissions[0].job_id
    assert slurm.cancelled == [first]  # the job submitted before the error is not left behind
    assert d.messages("internal_error") == [
        "internal error: RuntimeError: the store's disk hiccupped"]
    (failure,) = d.messages("failure")
    assert "the store's disk hiccupped" in failure
    (restart,) = d.store.restart_history(d.run_id)
    assert restart.kind == "crash" and restart.counted


def test_a_job_cancelled_outside_airvisor_is_a_failure_and_resubmitted(
        tmp_path: Path, profile: Profile) -> None:
    """Issue 29: what a cancelled job does. Cancelled by someone else (scancel, an admin) while
    its attempt runs: a failure of the attempt that says so, recovered like any crash (the
    run's own stop cancels through airvisor: test_stop_cancels_the_job)."""
    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    first = slurm.last
    slurm.set(first, "RUNNING")
    d.pump(lambda: d.sup.state == RunState.RUNNING)
    slurm.set(first, "CANCELLED")
    d.pump(lambda: len(slurm.submissions) == 2 and d.sup.state == RunState.STARTING)
    (failure,) = d.messages("failure")
    assert f"job {first} was cancelled outside airvisor" in failure
    assert slurm.cancelled == []  # it had ended: nothing to cancel
    (restart,) = d.store.restart_history(d.run_id)
    assert restart.kind == "crash" and restart.counted
    assert d.store.attempts(d.run_id)[0]["outcome"] == "failed"


def test_a_job_that_ends_while_airvisor_cancels_it_ends_the_run_stopped(
        tmp_path: Path, profile: Profile) -> None:
    """The job ends (here: cancelled) while the run's own stop is cancelling it: the stop's
    cancel reports the end; the run ends stopped, never taken for a failure."""
    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    slurm.set(slurm.last, "RUNNING")
    d.pump(lambda: d.sup.state == RunState.RUNNING)
    slurm.set(slurm.last, "CANCELLED")
    d.sup.handle(Command(d.run_id, "stop"))
    d.pump(lambda: d.sup.finished.is_set())
    assert d.sup.state == RunState.STOPPED and d.messages("failure") == []
    assert d.store.attempts(d.run_id)[0]["outcome"] == "stopped"


def test_stopping_a_healthy_job_after_a_failed_one_ends_its_attempt_stopped(
        tmp_path: Path, profile: Profile) -> None:
    """The failure of attempt 1 is over once attempt 2's job is submitted (issue 29's run
    machine: AttemptBegins, as the box decides before its launch): a stop of that healthy
    job ends attempt 2 "stopped", and the run stopped, not with attempt 1's failure."""
    slurm = FakeSlurm()
    d = start(tmp_path, profile, slurm)
    first = slurm.last
    slurm.set(first, "RUNNING")
    d.pump(lambda: d.sup.state == RunState.RUNNING)
    run_dir(profile).mkdir(parents=True, exist_ok=True)
    (run_dir(profile) / f"job_{first}.log").write_text("ERROR Trainer failed with exit code 1\n")
    slurm.set(first, "FAILED", code=1)
    d.pump(lambda: len(slurm.submissions) == 2 and d.sup.state == RunState.STARTING)
    slurm.set(slurm.last, "RUNNING")
    d.pump(lambda: d.sup.state == RunState.RUNNING and d.sup.attempt == 2)
    d.sup.handle(Command(d.run_id, "stop"))
    d.pump(lambda: d.sup.finished.is_set())
    assert d.sup.state == RunState.STOPPED and slurm.cancelled == [slurm.last]
    attempts = d.store.attempts(d.run_id)
    assert [a["outcome"] for a in attempts] == ["failed", "stopped"]
    assert "trainer exited with status 1" in attempts[0]["reason"]
    assert attempts[1]["reason"] is None
