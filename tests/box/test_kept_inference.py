"""Recovery that keeps the inference server (issues 22 and 30), over real processes: the engine
runs the split (the inference server as its own supervised process, prime-rl's own `rl` of both
versions without [inference] for the rest; tests/launchers.py), and a trainer or orchestrator
failure relaunches only the rest against the kept server, with a filesystem or an NCCL weight
broadcast (the stand-ins' group: airvisor/demo/_broadcast.py). The kept server serves the resume
step's weights before any new rollout: the stand-in server records the policy step that served
each completion.

Every wait is for a condition (bounded by BOUND, a bound on a stuck run, never a timing
claim)."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest

from airvisor.box._supervisor import RunSupervisor
from airvisor.demo._weights import INIT_BROADCASTER, UPDATE_WEIGHTS, fetch_calls, fetch_served
from airvisor.policy import RunState
from airvisor.proc import processes_with_marker
from airvisor.profile import Profile
from airvisor.runs import RunManager
from airvisor.stacks._capture import read_capture

from .conftest import Harness

BOUND = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def profile_of(h: Harness, version: str, broadcast: str = "filesystem",
               **extra: Any) -> Profile:
    rl: dict[str, Any] = {"max_steps": 1000, "weight_broadcast": {"type": broadcast}}
    if broadcast == "nccl" and version == "main":
        # main's shared [weight_broadcast] names the group's port (configs/rl.py:466-480); v0.4's
        # takes only the type and its trainer and orchestrator use 29501 (rl.py:404-414).
        rl["weight_broadcast"]["port"] = free_port()
    # A first step on a box loaded by other runs' processes can take longer than the harness's
    # 15 s (both the stand-ins and prime-rl's launcher import pydantic first): a bound, not a
    # timing claim.
    extra.setdefault("health", {"first_step_grace": 60})
    return h.profile(version=version, rl=rl, **extra)


def resume_and_start(h: Harness, run_id: str, number: int) -> tuple[int, float]:
    row = next(a for a in h.store.attempts(run_id) if a["number"] == number)
    return int(row["resume_step"]), float(row["started_at"])


def assert_served_from_the_resume_step(h: Harness, root: str, version: str, resume: int,
                                       began: float) -> None:
    """No completion of the new attempt was generated with a policy newer than the resume
    step's, and the first was generated with the resume step's own: the kept server still
    held the failed attempt's newer policy, so only the relaunched orchestrator's sync before
    its first rollout makes this hold (v0.4 orchestrator.py:248-263; main orchestrator.py:
    332-350). Later ones may be newer, but never newer than what the new attempt's trainer
    can have produced by the step they are for (v0.4 v{N} after step N-1 is trained; main
    v{N} after step N)."""
    served = [s for s in fetch_served(root) if s.at >= began and s.step is not None]
    assert served, "no completion of the new attempt was served"
    first = served[0]
    assert first.weight_step == resume, served[:3]
    newest = (lambda step: step) if version == "0.4" else (lambda step: step - 1)
    for one in served:
        assert one.step is not None
        assert resume <= one.weight_step <= max(resume, newest(one.step)), one


def start(h: Harness, profile: Profile) -> tuple[str, RunSupervisor]:
    record = h.manager.submit(profile)
    h.run_ids.append(record.id)
    supervisor = h.manager.supervisor(record.id)
    assert isinstance(supervisor, RunSupervisor)
    return record.id, supervisor


def drive(h: Harness, what: str, check: Callable[[], Any], manager: RunManager | None = None
          ) -> Any:
    manager = manager or h.manager
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        manager.tick(0.1)
        value = check()
        if value:
            return value
    raise AssertionError(f"no {what} within {BOUND:g} s")


def server(h: Harness, run_id: str, attempt: int | None = None) -> tuple[int, float]:
    comp = next(c for c in h.store.components(run_id, attempt) if c.name == "inference")
    assert comp.pid is not None and comp.create_time is not None
    return comp.pid, comp.create_time


def details(h: Harness, run_id: str, number: int) -> dict[str, Any]:
    row = next(a for a in h.store.attempts(run_id) if a["number"] == number)
    return dict(row["details"])


def running_attempt(h: Harness, sup: RunSupervisor, number: int, step: int = 0) -> bool:
    return (sup.attempt == number and sup.state == RunState.RUNNING
            and (sup.step or 0) >= step)


def stop_and_check_nothing_left(h: Harness, run_id: str, sup: RunSupervisor) -> None:
    h.manager.request_stop(run_id)
    drive(h, "stopped run", lambda: sup.state.terminal)
    assert sup.state == RunState.STOPPED
    assert processes_with_marker(run_id) == []


def root_of(profile: Profile, sup: RunSupervisor) -> str:
    port = sup.profile.inference.port
    assert port is not None
    return f"http://127.0.0.1:{port}"


@pytest.fixture(params=["0.4", "main"])
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("fault", ["trainer_crash", "orchestrator_crash"])
def test_the_server_is_kept_across_a_failure_of_the_rest(harness: Harness, version: str,
                                                         fault: str) -> None:
    demo = ({"trainer": {"crash_at_step": 5, "exit_code": 3}} if fault == "trainer_crash"
            else {"orchestrator": {"crash_at_step": 6}})
    profile = profile_of(harness, version, demo=demo)
    run_id, sup = start(harness, profile)
    drive(harness, "the first attempt running", lambda: running_attempt(harness, sup, 1))
    assert details(harness, run_id, 1)["split"] is True
    kept = server(harness, run_id, 1)
    root = root_of(profile, sup)
    drive(harness, "the second attempt running", lambda: running_attempt(harness, sup, 2))
    # The same process (pid and start time), recorded as the second attempt's member too.
    assert server(harness, run_id, 2) == kept
    assert psutil.Process(kept[0]).create_time() == kept[1]
    second = details(harness, run_id, 2)
    assert second["scope"] == "keep_inference" and second["scope_reason"] == "kept"
    assert second["inference_kept_from"] == 1
    failed = "trainer" if fault == "trainer_crash" else "orchestrator"
    scope_events = harness.events(run_id, "recovery_scope")
    assert scope_events[0].data["scope"] == "keep_inference"
    assert scope_events[0].component == failed
    started = [e.component for e in harness.events(run_id, "component_started")]
    assert started == ["inference", "launcher", "launcher"]  # no second server
    # The relaunched orchestrator's first weight update reached the kept server: the resumed
    # step's weights (v0.4 orchestrator.py:248-263; main orchestrator.py:332-350).
    resume = next(a["resume_step"] for a in harness.store.attempts(run_id) if a["number"] == 2)
    began = next(a["started_at"] for a in harness.store.attempts(run_id) if a["number"] == 2)

    def first_update() -> Any:
        return next((c for c in fetch_calls(root) if c.route == UPDATE_WEIGHTS
                     and c.at >= began), None)

    update = drive(harness, "the relaunched orchestrator's weight update", first_update)
    assert update.weight_dir is not None and f"step_{resume}" in update.weight_dir
    drive(harness, "the second attempt past its first steps",
          lambda: running_attempt(harness, sup, 2, step=resume + 3))
    assert_served_from_the_resume_step(harness, root, version, resume, began)
    stop_and_check_nothing_left(harness, run_id, sup)


def test_nccl_a_trainer_crash_keeps_the_server_and_re_forms_the_group(harness: Harness,
                                                                     version: str) -> None:
    """NCCL broadcast, prime-rl's own launcher of both versions: the relaunched orchestrator
    posts /init_broadcaster to the kept server again, its worker joins the new trainer's group,
    and the resume step's policy is what serves the first new rollout."""
    profile = profile_of(harness, version, "nccl",
                         demo={"trainer": {"crash_at_step": 6, "exit_code": 3}})
    run_id, sup = start(harness, profile)
    drive(harness, "the first attempt running", lambda: running_attempt(harness, sup, 1))
    assert details(harness, run_id, 1)["split"] is True
    kept = server(harness, run_id, 1)
    root = root_of(profile, sup)
    drive(harness, "the second attempt running", lambda: running_attempt(harness, sup, 2))
    second = details(harness, run_id, 2)
    assert second["scope"] == "keep_inference" and second["scope_reason"] == "kept", second
    assert server(harness, run_id, 2) == kept
    resume, began = resume_and_start(harness, run_id, 2)
    drive(harness, "the second attempt past its first steps",
          lambda: running_attempt(harness, sup, 2, step=resume + 3))
    groups = [c for c in fetch_calls(root) if c.route == INIT_BROADCASTER]
    assert len(groups) == 2 and groups[0].client != groups[1].client  # one per orchestrator
    assert groups[1].at >= began
    assert_served_from_the_resume_step(harness, root, version, resume, began)
    stop_and_check_nothing_left(harness, run_id, sup)


def test_nccl_a_server_stuck_in_a_receive_is_not_kept(harness: Harness, version: str) -> None:
    """The trainer dies in the middle of a broadcast: the server's worker waits in its receive
    for ever, /health still answers, its engine does not (main /liveness, v0.4 a completion):
    the recovery stops it and starts everything, and the new server serves the resume step."""
    profile = profile_of(harness, version, "nccl",
                         demo={"trainer": {"crash_mid_broadcast_at_step": 5, "exit_code": 3}})
    run_id, sup = start(harness, profile)
    drive(harness, "the first attempt running", lambda: running_attempt(harness, sup, 1))
    stuck = server(harness, run_id, 1)
    drive(harness, "the second attempt running", lambda: running_attempt(harness, sup, 2))
    second = details(harness, run_id, 2)
    assert second["scope"] == "full", second
    assert second["scope_reason"] == "inference_unresponsive", second
    assert "engine does not answer in time" in second["scope_detail"]
    assert server(harness, run_id, 2) != stuck
    assert not psutil.pid_exists(stuck[0]) or psutil.Process(stuck[0]).create_time() != stuck[1]
    resume, began = resume_and_start(harness, run_id, 2)
    drive(harness, "the second attempt past its first steps",
          lambda: running_attempt(harness, sup, 2, step=resume + 2))
    assert_served_from_the_resume_step(harness, root_of(profile, sup), version, resume, began)
    stop_and_check_nothing_left(harness, run_id, sup)


def test_the_server_is_kept_across_a_trainer_hang(harness: Harness, version: str) -> None:
    profile = profile_of(harness, version, demo={"trainer": {"hang_at_step": 5}})
    run_id, sup = start(harness, profile)
    drive(harness, "the first attempt running", lambda: running_attempt(harness, sup, 1))
    kept = server(harness, run_id, 1)
    drive(harness, "the second attempt training",
          lambda: running_attempt(harness, sup, 2, step=6))
    assert server(harness, run_id, 2) == kept
    assert details(harness, run_id, 2)["scope"] == "keep_inference"
    assert harness.events(run_id, "failure")[0].data["failure_kind"] == "hang"
    stop_and_check_nothing_left(harness, run_id, sup)


def test_an_inference_crash_restarts_everything(harness: Harness, version: str) -> None:
    profile = profile_of(harness, version)
    run_id, sup = start(harness, profile)
    drive(harness, "a step", lambda: running_attempt(harness, sup, 1, step=2))
    first = server(harness, run_id, 1)
    os.kill(first[0], signal.SIGKILL)
    drive(harness, "the second attempt running", lambda: running_attempt(harness, sup, 2))
    assert server(harness, run_id, 2) != first
    second = details(harness, run_id, 2)
    assert second["scope"] == "full" and second["scope_reason"] == "inference_failed"
    stop_and_check_nothing_left(harness, run_id, sup)


def trainer_pid(sup: RunSupervisor) -> int | None:
    return sup.members.get("trainer")


def test_a_second_failure_within_the_window_restarts_everything(harness: Harness,
                                                                version: str) -> None:
    profile = profile_of(harness, version)
    run_id, sup = start(harness, profile)
    for attempt in (1, 2):
        drive(harness, f"attempt {attempt} training with its trainer found",
              lambda attempt=attempt: running_attempt(harness, sup, attempt, step=2)  # type: ignore[misc]
              and trainer_pid(sup))
        pid = trainer_pid(sup)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
    drive(harness, "the third attempt running", lambda: running_attempt(harness, sup, 3))
    kept = server(harness, run_id, 1)
    assert server(harness, run_id, 2) == kept
    assert details(harness, run_id, 2)["scope"] == "keep_inference"
    third = details(harness, run_id, 3)
    assert third["scope"] == "full" and third["scope_reason"] == "repeated"
    assert server(harness, run_id, 3) != kept
    stop_and_check_nothing_left(harness, run_id, sup)


def test_restart_scope_all_restarts_everything(harness: Harness) -> None:
    profile = profile_of(harness, "0.4", demo={"trainer": {"crash_at_step": 5}},
                         restart={"scope": "all"})
    run_id, sup = start(harness, profile)
    drive(harness, "the second attempt running", lambda: running_attempt(harness, sup, 2))
    assert details(harness, run_id, 1)["split"] is False
    second = details(harness, run_id, 2)
    assert second["scope"] == "full" and second["scope_reason"] == "setting_all"
    assert [e.component for e in harness.events(run_id, "component_started")] == [
        "launcher", "launcher"]
    stop_and_check_nothing_left(harness, run_id, sup)


def new_daemon(h: Harness, run_id: str, meanwhile: Callable[[], object] = lambda: None
               ) -> tuple[RunManager, RunSupervisor]:
    """The daemon dies (SIGKILL: nothing stopped or recorded), `meanwhile` happens while no
    daemon watches, and a new one adopts."""
    h.manager.shutdown(stop_runs=False)
    h.store.update_run(run_id, supervisor_started=1.0)  # that supervisor is gone
    meanwhile()
    manager = RunManager(h.store)
    manager.hooks.prepare_machine = h.manager.hooks.prepare_machine
    h.manager = manager
    assert manager.adopt_on_boot() == [run_id]
    sup = manager.supervisor(run_id)
    assert isinstance(sup, RunSupervisor)
    return manager, sup


@pytest.mark.parametrize("when", ["after", "during"])
def test_a_new_daemon_adopts_the_kept_server(harness: Harness, when: str,
                                             version: str) -> None:
    """`after`: the daemon dies once the rest runs again against the kept server: the next
    adopts both. `during`: it dies while the rest is stopped (the backoff, made long): the next
    relaunches the rest against the same server."""
    backoff = 0.2 if when == "after" else 30.0
    profile = profile_of(harness, version, demo={"trainer": {"crash_at_step": 5}},
                         restart={"backoff_initial": backoff, "backoff_max": backoff})
    run_id, sup = start(harness, profile)
    drive(harness, "the first attempt running", lambda: running_attempt(harness, sup, 1))
    kept = server(harness, run_id, 1)
    if when == "after":
        drive(harness, "the second attempt running", lambda: running_attempt(harness, sup, 2))
    else:
        drive(harness, "the backoff", lambda: sup.state == RunState.RECOVERING
              and "stop" not in sup._tasks and sup.machine.backoff_until is not None)
    _, sup = new_daemon(harness, run_id)
    drive(harness, "the second attempt training",
          lambda: running_attempt(harness, sup, 2, step=6))
    assert server(harness, run_id, 2) == kept
    assert psutil.Process(kept[0]).create_time() == kept[1]
    assert details(harness, run_id, 2)["scope"] == "keep_inference"
    stop_and_check_nothing_left(harness, run_id, sup)


# -- the rest stops at once while the server's health is probed (issue 22, item 4) ------------
def training_with_trainer(h: Harness, version: str = "0.4"
                          ) -> tuple[str, RunSupervisor, tuple[int, float], int]:
    """A split run in its first attempt, training, with its trainer found: (run id, supervisor,
    the server's (pid, start time), the trainer's pid)."""
    run_id, sup = start(h, profile_of(h, version))
    drive(h, "attempt 1 training with its trainer found",
          lambda: running_attempt(h, sup, 1, step=2) and trainer_pid(sup))
    trainer = trainer_pid(sup)
    assert trainer is not None
    return run_id, sup, server(h, run_id, 1), trainer


def kinds_in_order(h: Harness, run_id: str, wanted: set[str]) -> list[tuple[str, Any]]:
    return [(e.kind, e) for e in h.store.events(run_id) if e.kind in wanted]


def test_an_unhealthy_server_is_stopped_after_the_rest(harness: Harness) -> None:
    """The trainer dies while the kept server does not answer (SIGSTOPped: its tree alive, its
    /health silent): the failure is recorded and the rest's stop begun before the probe's
    verdict; the verdict (unhealthy) then stops the server too, and everything restarts."""
    run_id, sup, first, trainer = training_with_trainer(harness)
    os.kill(first[0], signal.SIGSTOP)
    os.kill(trainer, signal.SIGKILL)
    drive(harness, "the second attempt running", lambda: running_attempt(harness, sup, 2))
    wanted = {"failure", "recovery_scope_probe", "recovery_scope", "stopped_components"}
    order = [kind for kind, _ in kinds_in_order(harness, run_id, wanted)]
    # The failure is recorded and the rest's stop begun without waiting for the verdict (the
    # probe waits out the HTTP timeouts of a silent server); the rest's stop and the verdict
    # may end in either order; the server's own stop follows the verdict.
    assert order[:2] == ["failure", "recovery_scope_probe"]
    assert sorted(order[2:]) == ["recovery_scope", "stopped_components", "stopped_components"]
    assert order[-1] == "stopped_components"
    verdict = harness.events(run_id, "recovery_scope")[0].data
    assert verdict["scope"] == "full" and verdict["scope_reason"] == "inference_unhealthy"
    second = details(harness, run_id, 2)
    assert second["scope"] == "full" and second["scope_reason"] == "inference_unhealthy"
    assert server(harness, run_id, 2) != first
    assert not psutil.pid_exists(first[0]) or psutil.Process(first[0]).create_time() != first[1]
    stop_and_check_nothing_left(harness, run_id, sup)


def test_a_stop_asked_while_the_rest_stops_stops_the_server_too(harness: Harness) -> None:
    """A stop that arrives while only the rest is being stopped (a kept-scope recovery): the
    kept server goes too, and the run ends stopped with nothing left. The rest's stop is held
    (a gate in the stop hook) until the stop request has been handled."""
    entered, release = threading.Event(), threading.Event()
    real_stop_tree = harness.manager.hooks.stop_tree

    def gated_stop_tree(*args: Any, **kwargs: Any) -> str:
        if kwargs.get("sweep") is False:  # the rest's stop (the kept server spared)
            entered.set()
            release.wait(BOUND)
        return str(real_stop_tree(*args, **kwargs))

    harness.manager.hooks.stop_tree = gated_stop_tree
    run_id, sup, kept, trainer = training_with_trainer(harness)
    os.kill(trainer, signal.SIGKILL)
    drive(harness, "the rest's stop", entered.is_set)
    harness.manager.request_stop(run_id)
    drive(harness, "the stop request handled", lambda: sup.state == RunState.STOPPING)
    release.set()
    drive(harness, "stopped run", lambda: sup.state.terminal)
    assert sup.state == RunState.STOPPED
    assert not psutil.pid_exists(kept[0]) or psutil.Process(kept[0]).create_time() != kept[1]
    assert processes_with_marker(run_id) == []
    assert len(harness.events(run_id, "stopped_components")) == 2


def test_a_hang_whose_kept_server_is_unhealthy_takes_its_stacks_once(harness: Harness) -> None:
    """Issue 29: a hang during a kept-server recovery whose server turns out unhealthy (here
    SIGSTOPped: its /health silent, so the orchestrator gets nothing and training stalls).
    The rest's stop looks at the stacks first; the server's own stop after the verdict must
    not look again: that second look, of the server alone, overwrote the hang's capture."""
    run_id, sup, first, trainer = training_with_trainer(harness)
    os.kill(first[0], signal.SIGSTOP)
    drive(harness, "the second attempt running", lambda: running_attempt(harness, sup, 2))
    failure = harness.events(run_id, "failure")[0]
    assert failure.data["failure_kind"] == "hang"
    verdict = harness.events(run_id, "recovery_scope")[0].data
    assert verdict["scope"] == "full" and verdict["scope_reason"] == "inference_unhealthy"
    assert len(harness.events(run_id, "stopped_components")) == 2  # the rest, then the server
    looks = [e for e in harness.events(run_id, "stacks") if e.data["attempt"] == 1]
    assert len(looks) == 1, [e.message for e in looks]
    capture = read_capture(sup.attempt_dir_of(1))
    assert capture is not None
    # The one capture is the hang's: of the attempt's processes at the hang, the trainer's too.
    assert trainer in [p.target.pid for p in capture.processes]
    stop_and_check_nothing_left(harness, run_id, sup)
