"""The edges of the run state machine, replayed without processes (fake launcher, prober and
stop; injected clocks): daemon death in every phase, launch errors of each kind, restart
accounting across daemon restarts, commands in every phase."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airvisor.policy import Phase, RunState
from airvisor.policy._machine_json import decode_machine
from airvisor.primerl import LAUNCHER
from airvisor.proc import ProcessIdentity
from airvisor.profile import load_profile
from airvisor.runs import RunConflict

from .conftest import demo_profile_dict, write_profile
from .test_component_mode import V04_PYTHON
from .test_supervisor_replay import SETTLE_LIMIT, Replay


class GatedReplay(Replay):
    """A stop that blocks until released: the daemon can die while a stop is under way."""

    def __init__(self, tmp_path: Path, **extra: Any) -> None:
        self.stop_gate = threading.Event()
        self.stop_gate.set()
        self.preflight_gate = threading.Event()
        self.preflight_gate.set()
        super().__init__(tmp_path, **extra)

    def _stop_tree(self, identities: list[ProcessIdentity], pgids: list[int], run_id: str,
                   grace: float) -> str:
        self.stop_gate.wait(30)
        return super()._stop_tree(identities, pgids, run_id, grace)

    def _new_manager(self) -> Any:
        manager = super()._new_manager()
        inner = manager.hooks.prepare_machine

        def gated(*args: Any) -> str:
            self.preflight_gate.wait(30)
            return inner(*args)

        manager.hooks.prepare_machine = gated
        return manager

    def crash(self) -> None:
        self.current(LAUNCHER).say("Error: Trainer failed with exit code 3")
        self.current(LAUNCHER).exit(3)

    def phase(self) -> str | None:
        return self.run().phase


def make(tmp_path: Path, **extra: Any) -> GatedReplay:
    extra.setdefault("restart", {"max_restarts": 2, "window": 600, "backoff_initial": 1,
                                 "backoff_factor": 2, "backoff_max": 10})
    return GatedReplay(tmp_path, **extra)


def settle_phase(r: GatedReplay, phase: Phase) -> None:
    """Tick until the phase is reached (a worker thread reports in real time: bounded, not
    timed)."""
    deadline = time.monotonic() + SETTLE_LIMIT
    while time.monotonic() < deadline:
        r.manager.tick(0.02)
        if r.sup.phase == phase:
            return
    raise AssertionError(f"phase is {r.sup.phase}, expected {phase}")


# -- restart accounting --------------------------------------------------------------------------
def test_the_crash_loop_limit_holds_across_daemon_restarts(tmp_path: Path) -> None:
    r = make(tmp_path)
    r.settle(RunState.STARTING)
    r.crash()
    settle_phase(r, Phase.BACKOFF)
    r.advance(1)
    r.settle(RunState.STARTING)
    # The daemon dies; the components die with it: the resume is a boot restart, not counted.
    r.reboot()
    settle_phase(r, Phase.BACKOFF)
    r.advance(1)
    r.settle(RunState.STARTING)
    assert r.sup.attempt == 3
    r.crash()
    settle_phase(r, Phase.BACKOFF)
    r.advance(2)
    r.settle(RunState.STARTING)
    r.crash()
    r.settle(RunState.FAILED)
    history = r.store.restart_history(r.run_id)
    assert [(h.kind, h.counted) for h in history] == [("crash", True), ("boot", False),
                                                       ("crash", True)]
    assert r.run().last_error.startswith("crash loop: 2 restarts within 600 s")
    assert r.run().restarts == 3
    causes = [a["cause"] for a in r.store.attempts(r.run_id)]
    assert causes == ["first", "crash", "boot", "crash"]


def test_operator_restarts_do_not_count_toward_the_limit(tmp_path: Path) -> None:
    r = make(tmp_path, restart={"max_restarts": 1, "window": 600, "backoff_initial": 1,
                                "backoff_factor": 1})
    r.settle(RunState.STARTING)
    for _ in range(2):
        r.manager.request_restart(r.run_id)
        settle_phase(r, Phase.BACKOFF)
        r.advance(1)
        r.settle(RunState.STARTING)
    r.crash()
    settle_phase(r, Phase.BACKOFF)  # one crash within max_restarts = 1: restarted
    r.advance(1)
    r.settle(RunState.STARTING)
    r.crash()
    r.settle(RunState.FAILED)
    assert [h.kind for h in r.store.restart_history(r.run_id)] == ["operator", "operator", "crash"]
    assert "crash loop: 1 restarts" in r.run().last_error


def test_restarts_off_says_so_and_success_clears_the_last_error(tmp_path: Path) -> None:
    r = make(tmp_path, restart={"max_restarts": 0})
    r.settle(RunState.STARTING)
    r.crash()
    r.settle(RunState.FAILED)
    assert r.run().last_error.startswith("restarts are off (restart.max_restarts = 0)")

    r2 = make(tmp_path / "second")
    r2.settle(RunState.STARTING)
    r2.crash()
    settle_phase(r2, Phase.BACKOFF)
    r2.advance(1)
    r2.settle(RunState.STARTING)
    r2.current(LAUNCHER).exit(0)
    r2.settle(RunState.SUCCEEDED)
    assert r2.run().last_error is None
    assert r2.events("failure")  # the failure it recovered from is still in its history


# -- daemon death in each phase ----------------------------------------------------------------
def test_daemon_death_while_stopping_finishes_the_stop(tmp_path: Path) -> None:
    r = make(tmp_path)
    r.settle(RunState.STARTING)
    r.ready()
    r.stop_gate.clear()
    r.manager.request_stop(r.run_id)
    settle_phase(r, Phase.STOPPING_STOPPED)
    assert r.phase() == "stopping.stopped"
    r.reboot()
    r.stop_gate.set()
    r.settle(RunState.STOPPED)
    assert r.preflights == 1 and r.sup.attempt == 1  # not resumed
    assert r.events("takeover")[0].data["action"] == "finish_stop"


def test_daemon_death_while_finishing_a_success_leaves_it_succeeded(tmp_path: Path) -> None:
    r = make(tmp_path)
    r.settle(RunState.STARTING)
    r.ready()
    r.say("trainer", "SUCCESS Step 11 | Time: 1s")
    r.advance(1)
    r.stop_gate.clear()
    r.current(LAUNCHER).exit(0)
    settle_phase(r, Phase.STOPPING_SUCCEEDED)
    r.reboot()
    r.stop_gate.set()
    r.settle(RunState.SUCCEEDED)
    assert r.preflights == 1 and len(r.store.attempts(r.run_id)) == 1
    assert not r.events("failure")


def test_daemon_death_while_stopping_a_failed_attempt_continues_that_recovery(
        tmp_path: Path) -> None:
    r = make(tmp_path, health={"stall_timeout": 10, "first_step_grace": 20})
    r.settle(RunState.STARTING)
    r.ready()
    r.stop_gate.clear()
    r.advance(21)  # a hang
    settle_phase(r, Phase.RECOVERY_STOPPING)
    r.reboot()
    assert r.sup.phase == Phase.RECOVERY_STOPPING  # not adopted as live
    r.stop_gate.set()
    settle_phase(r, Phase.BACKOFF)
    history = r.store.restart_history(r.run_id)
    assert [(h.kind, h.counted) for h in history] == [("hang", True)]
    r.advance(1)
    r.settle(RunState.STARTING)
    assert r.sup.attempt == 2


def test_daemon_death_during_backoff_relaunches_without_a_second_restart(
        tmp_path: Path) -> None:
    """The new daemon restores the run machine the dead one persisted: the same failure and
    restart count, and the backoff's deadline (the same moment: both daemons' clocks here are
    the one fake clock), which it waits out before it relaunches, counting nothing again."""
    r = make(tmp_path, restart={"max_restarts": 3, "window": 600, "backoff_initial": 100,
                                "backoff_max": 100})
    r.settle(RunState.STARTING)
    r.crash()
    settle_phase(r, Phase.BACKOFF)
    before = r.sup.machine
    assert before.backoff_until == r.now + 100 and before.restarts == 1
    r.reboot()
    after = r.sup.machine
    assert r.sup.phase == Phase.BACKOFF
    assert (after.failure, after.scope, after.restarts, after.counted_restarts) == (
        before.failure, before.scope, before.restarts, before.counted_restarts)
    assert after.backoff_until == pytest.approx(before.backoff_until)
    r.settle(rounds=20)  # (the fake clock stands still: the deadline is not reached)
    assert r.sup.phase == Phase.BACKOFF and r.sup.attempt == 1
    r.advance(100)
    r.settle(RunState.STARTING)
    assert r.sup.attempt == 2
    assert len(r.store.restart_history(r.run_id)) == 1
    assert r.store.attempts(r.run_id)[-1]["cause"] == "crash"


def persisted(r: GatedReplay) -> Any:
    """The run machine as the store holds it (both fake clocks read the same)."""
    run = r.run()
    assert run.machine_json is not None
    return decode_machine(run.machine_json, now=r.now, wall=r.now)


def test_every_change_of_the_machine_is_persisted_with_its_phase(tmp_path: Path) -> None:
    """What the store holds is the machine the supervisor holds, after each decision: the
    launch, the failure's stop, the backoff (its deadline, the restart), the relaunch."""
    r = make(tmp_path, restart={"max_restarts": 3, "window": 600, "backoff_initial": 5,
                                "backoff_max": 5})
    r.settle(RunState.STARTING)
    assert persisted(r) == r.sup.machine and r.phase() == "starting"
    r.stop_gate.clear()
    r.crash()
    settle_phase(r, Phase.RECOVERY_STOPPING)
    assert persisted(r) == r.sup.machine and r.sup.machine.failure is not None
    r.stop_gate.set()
    settle_phase(r, Phase.BACKOFF)
    machine = persisted(r)
    assert machine == r.sup.machine and r.phase() == "recovering.backoff"
    assert machine.backoff_until == r.now + 5 and machine.restarts == 1
    r.advance(5)
    r.settle(RunState.STARTING)
    assert persisted(r) == r.sup.machine and r.sup.machine.failure is None


def test_a_persisted_machine_that_does_not_read_is_said_and_the_history_takes_over(
        tmp_path: Path) -> None:
    """A blob this airvisor cannot read (here: another format version) is said as a run
    event, and the run is taken over as a run an older airvisor wrote is: from its recorded
    recovery and restart history (the backoff's deadline unknown: it relaunches at once)."""
    r = make(tmp_path)
    r.settle(RunState.STARTING)
    r.crash()
    settle_phase(r, Phase.BACKOFF)
    r.store.update_run(r.run_id, machine_json='{"version": 99, "machine": {}}')
    r.reboot()
    (said,) = r.events("machine_unreadable")
    assert "format version 99" in said.message and "recorded history" in said.message
    assert r.sup.machine.restarts == 1  # (from the restart history)
    r.settle(RunState.STARTING)
    assert r.sup.attempt == 2
    assert len(r.store.restart_history(r.run_id)) == 1


def test_daemon_death_during_a_recovery_preflight_relaunches(tmp_path: Path) -> None:
    r = make(tmp_path)
    r.settle(RunState.STARTING)
    r.crash()
    settle_phase(r, Phase.BACKOFF)
    r.preflight_gate.clear()
    r.advance(1)
    settle_phase(r, Phase.PREFLIGHT)
    r.reboot()
    r.preflight_gate.set()
    r.settle(RunState.STARTING)
    assert r.sup.attempt == 2
    assert len(r.store.restart_history(r.run_id)) == 1


def test_daemon_death_before_the_first_launch_begins_the_run(tmp_path: Path) -> None:
    r = make(tmp_path)
    r.preflight_gate.clear()
    r.settle(RunState.PREFLIGHT)
    r.reboot()
    r.preflight_gate.set()
    r.settle(RunState.STARTING)
    assert r.sup.attempt == 1
    assert r.store.attempts(r.run_id)[0]["cause"] == "first"
    assert not r.store.restart_history(r.run_id)


def test_a_live_running_attempt_is_adopted_without_a_restart(tmp_path: Path) -> None:
    r = make(tmp_path)
    r.settle(RunState.STARTING)
    r.ready()
    r.say("trainer", "SUCCESS Step 3 | Time: 1s")
    r.advance(1)
    r.reboot(components_alive=True)
    assert r.sup.phase == Phase.RUNNING
    assert r.sup.step == 3
    assert len(r.processes) == 1 and r.preflights == 1
    assert r.events("takeover")[0].data["action"] == "adopt"


def test_a_starting_attempt_in_component_mode_is_adopted_with_its_launch_rebuilt(
        tmp_path: Path) -> None:
    """The daemon dies while inference loads: the adopted attempt still has to start the
    orchestrator once inference is ready, so its launch is resolved again (by prime-rl)."""
    assert V04_PYTHON.exists(), "scripts/setup_primerl_venvs.sh builds the prime-rl v0.4 venv"
    r = make(tmp_path, prime_rl={"mode": "components", "python": [str(V04_PYTHON)]})
    r.settle(RunState.STARTING)
    assert sorted(p.component for p in r.processes) == ["inference", "trainer"]
    r.reboot(components_alive=True)
    assert r.sup.phase == Phase.STARTING
    for _ in range(300):  # prime-rl resolves the attempt again on a worker (a second or so)
        r.manager.tick(0.02)
        if "orchestrator" in r.sup._specs:
            break
    r.ready()
    assert [p.component for p in r.processes][-1] == "orchestrator"
    assert r.sup.phase == Phase.RUNNING


# -- launch and preparation errors ---------------------------------------------------------------
def test_spawn_errors_are_failures_with_their_reason(tmp_path: Path) -> None:
    r = make(tmp_path, restart={"max_restarts": 1, "window": 600, "backoff_initial": 5})
    r.launch_error = FileNotFoundError(2, "No such file or directory", "/opt/prime-rl/bin/rl")
    settle_phase(r, Phase.BACKOFF)
    assert "launch failed: No such file or directory (/opt/prime-rl/bin/rl)" in \
        r.run().last_error
    r.launch_error = PermissionError(13, "Permission denied", "/opt/prime-rl/bin/rl")
    r.advance(5)
    r.settle(RunState.FAILED)
    assert "Permission denied" in r.run().last_error
    assert r.run().last_error.startswith("crash loop")


def test_a_failed_first_preflight_ends_the_run_and_a_later_one_is_retried(
        tmp_path: Path) -> None:
    r = make(tmp_path)
    r.preflight_error = RuntimeError("GPU 0 has 3.1 GiB free, needs 40")
    r.settle(RunState.FAILED)
    assert r.run().last_error == "preflight failed: GPU 0 has 3.1 GiB free, needs 40"

    r2 = make(tmp_path / "second")
    r2.settle(RunState.STARTING)
    r2.crash()
    r2.preflight_error = RuntimeError("disk full")
    settle_phase(r2, Phase.BACKOFF)
    r2.advance(1)
    settle_phase(r2, Phase.BACKOFF)  # the preflight failed: a crash, retried by the policy
    r2.preflight_error = None
    r2.advance(2)
    r2.settle(RunState.STARTING)
    assert r2.sup.attempt == 2
    assert r2.store.attempts(r2.run_id)[0]["reason"].startswith("trainer exited")


def test_an_internal_error_fails_the_attempt_instead_of_wedging_the_run(tmp_path: Path) -> None:
    r = make(tmp_path)
    r.settle(RunState.STARTING)
    r.ready()

    def broken(pid: int) -> dict[str, int]:
        raise KeyError("orchestrator")

    r.manager.hooks.members = broken
    r.advance(3)
    r.settle()
    assert r.events("internal_error")
    assert r.sup.phase == Phase.BACKOFF
    assert r.run().last_error.startswith("internal error: KeyError")


# -- commands in every phase ---------------------------------------------------------------------
def test_stop_during_preflight_undoes_it_and_launches_nothing(tmp_path: Path) -> None:
    r = make(tmp_path)
    r.preflight_gate.clear()
    r.settle(RunState.PREFLIGHT)
    r.manager.request_stop(r.run_id)
    settle_phase(r, Phase.STOPPING_STOPPED)
    r.preflight_gate.set()
    r.settle(RunState.STOPPED)
    assert not r.processes and r.stops == 1


def test_stop_during_backoff_ends_stopped(tmp_path: Path) -> None:
    r = make(tmp_path, restart={"max_restarts": 3, "window": 600, "backoff_initial": 100})
    r.settle(RunState.STARTING)
    r.crash()
    settle_phase(r, Phase.BACKOFF)
    r.manager.request_stop(r.run_id)
    r.settle(RunState.STOPPED)
    assert r.sup.attempt == 1


def test_stop_while_stopping_a_failed_attempt_ends_stopped(tmp_path: Path) -> None:
    r = make(tmp_path)
    r.settle(RunState.STARTING)
    r.stop_gate.clear()
    r.crash()
    settle_phase(r, Phase.RECOVERY_STOPPING)
    r.manager.request_stop(r.run_id)
    settle_phase(r, Phase.STOPPING_STOPPED)
    r.stop_gate.set()
    r.settle(RunState.STOPPED)
    assert not r.store.restart_history(r.run_id)


def test_restart_during_backoff_relaunches_now(tmp_path: Path) -> None:
    r = make(tmp_path, restart={"max_restarts": 3, "window": 600, "backoff_initial": 100})
    r.settle(RunState.STARTING)
    r.crash()
    settle_phase(r, Phase.BACKOFF)
    r.manager.request_restart(r.run_id)
    r.settle(RunState.STARTING)
    assert r.sup.attempt == 2
    assert r.events("restart_now")


# -- conflicts with live runs ----------------------------------------------------------------------
def test_a_second_run_on_a_live_runs_rendezvous_or_inference_port_is_refused(
        tmp_path: Path) -> None:
    r = make(tmp_path, trainer={"min_free_gib": 0, "rdzv_port": 29555})
    r.settle(RunState.STARTING)
    other_gpus = {"inference_gpu_ids": [2], "trainer_gpu_ids": [3]}
    second = demo_profile_dict(tmp_path / "run2", rl=other_gpus,
                               trainer={"min_free_gib": 0, "rdzv_port": 29555})
    profile = load_profile(write_profile(tmp_path / "p2.toml", second))
    with pytest.raises(RunConflict, match=r"listens on port 29555, this run's trainer's "
                                          r"torchrun rendezvous port \(\[trainer\] rdzv_port\)"):
        r.manager.submit(profile)
    port = r.sup.profile.inference.port
    assert port is not None
    third = demo_profile_dict(tmp_path / "run3", rl={**other_gpus,
                                                     "inference": {"server": {"port": port}}})
    profile = load_profile(write_profile(tmp_path / "p3.toml", third))
    with pytest.raises(RunConflict, match=f"listens on port {port}, this run's inference"):
        r.manager.submit(profile)
