"""The events -> notification mapping, over event sequences as the engine records them."""

from __future__ import annotations

from typing import Any

from airvisor.gpu import GPUInfo, GPUProcess, format_memory_shortfall
from airvisor.notify import decide, parse_holders
from airvisor.store import EventRecord, RunRecord

GIB = 1024 ** 3


def run_record(**kw: Any) -> RunRecord:
    base: dict[str, Any] = dict(
        id="r1", name="demo", profile_path=None, profile={}, run_dir="/tmp/x", state="running",
        attempt=2, step=7, last_progress_at=None, resume_step=4, last_error=None, restarts=1,
        gpus=[], supervisor_pid=1, supervisor_started=None, created_at=0.0, updated_at=0.0,
        ended_at=None)
    base.update(kw)
    return RunRecord(**base)


class History:
    def __init__(self) -> None:
        self.events: list[EventRecord] = []

    def add(self, kind: str, message: str, **data: Any) -> EventRecord:
        event = EventRecord(len(self.events) + 1, "r1", float(len(self.events)), kind, None,
                            message, data)
        self.events.append(event)
        return event

    def decide_last(self, run: RunRecord) -> Any:
        return decide(self.events[-1], self.events[:-1], run)

    def first_attempt(self) -> None:
        self.add("submitted", "run r1 accepted")
        self.add("state", "run preflight")
        self.add("attempt", "attempt 1: no checkpoint", attempt=1, resume_step=None)
        self.add("state", "run starting")
        self.add("state", "run running")


def test_crash_then_resume_is_one_recovered_with_reason_and_step() -> None:
    h = History()
    h.first_attempt()
    assert h.decide_last(run_record()) is None  # the first start is no recovery
    h.add("failure", "trainer exited with status 1", attempt=1)
    assert h.decide_last(run_record()) is None
    for kind, message in [("state", "run recovering"), ("stopped_components", "stopped"),
                          ("restart_scheduled", "restarting in 0.5 s"), ("state", "run preflight"),
                          ("attempt", "attempt 2: resuming from step 4"),
                          ("state", "run starting"), ("milestone", "trainer: x")]:
        if kind == "attempt":
            h.add(kind, message, attempt=2, resume_step=4)
        else:
            h.add(kind, message)
        assert h.decide_last(run_record()) is None
    h.add("state", "run running")
    n = h.decide_last(run_record())
    assert n is not None and n.kind == "recovered"
    assert (n.reason, n.resume_step, n.attempt) == ("trainer exited with status 1", 4, 2)
    assert "recovered" in n.title and "step 4" in n.title and "status 1" in n.title
    assert n.key == f"r1:{h.events[-1].id}:recovered"


def test_a_restart_a_person_asked_for_is_no_recovery() -> None:
    h = History()
    h.first_attempt()
    h.add("restart_requested", "restart requested")
    h.add("failure", "restart requested", attempt=1)
    h.add("attempt", "attempt 2", attempt=2, resume_step=2)
    h.add("state", "run running")
    assert h.decide_last(run_record()) is None


def test_stall_is_stalled_and_the_end_states_are_reported() -> None:
    h = History()
    h.first_attempt()
    h.add("failure", "hung: step 5 has not advanced for 3 s (health.stall_timeout)", attempt=1)
    assert h.decide_last(run_record()) is None  # said once the stacks are taken
    verdict = "trainer rank 0: sleeping in inject_faults_before_step (airvisor/demo/_steps.py:140)"
    h.add("stacks", f"stacks before the stall kill: {verdict}", attempt=1, verdicts=[verdict])
    n = h.decide_last(run_record())
    assert n is not None and n.kind == "stalled" and n.reason.startswith("hung: step 5")
    assert n.stacks == [verdict] and n.attempt == 1
    h.add("stopped_components", "components stopped: 3 exited on SIGTERM")
    assert h.decide_last(run_record()) is None  # once per hang

    h.add("gave_up", "crash loop: 0 restarts within 120 s (restart.max_restarts = 0)")
    h.add("state", "run failed")
    failed = h.decide_last(run_record(state="failed", last_error="crash loop: ...; last failure: "
                                      "hung: step 5"))
    assert failed is not None and failed.kind == "failed"
    assert "gave up" in failed.title and "hung: step 5" in failed.reason

    h.add("state", "run succeeded")
    done = h.decide_last(run_record(state="succeeded", step=12))
    assert done is not None and done.kind == "succeeded" and "step 12" in done.title


def test_a_hang_without_stacks_is_reported_when_its_processes_are_stopped() -> None:
    h = History()
    h.first_attempt()
    h.add("failure", "hung: no training step within health.first_step_grace = 15 s", attempt=1)
    h.add("stopped_components", "components stopped: 3 exited on SIGTERM")
    n = h.decide_last(run_record())
    assert n is not None and n.kind == "stalled" and n.stacks == []
    # A crash's stop is no stall.
    h.add("attempt", "attempt 2", attempt=2, resume_step=None)
    h.add("failure", "trainer exited with status 1", attempt=2)
    h.add("stopped_components", "components stopped: 3 exited on SIGTERM")
    assert h.decide_last(run_record()) is None


def test_gpu_memory_held_by_others_names_the_holders() -> None:
    gpus = [GPUInfo(index=1, name="H100", uuid="GPU-1", total_bytes=80 * GIB,
                    used_bytes=70 * GIB, free_bytes=10 * GIB, utilization=0,
                    processes=(GPUProcess(4242, 60 * GIB, "alice", "python train_other.py"),
                               GPUProcess(4343, 10 * GIB, "bob", "vllm serve"),))]
    message = "preflight failed: " + format_memory_shortfall(gpus, {1: 40 * GIB},
                                                             {1: "trainer"}, 60.0)
    holders = parse_holders(message)
    assert holders == [
        {"gpu": 1, "pid": 4242, "user": "alice", "memory": "60.0 GiB",
         "command": "python train_other.py"},
        {"gpu": 1, "pid": 4343, "user": "bob", "memory": "10.0 GiB", "command": "vllm serve"},
    ]
    h = History()
    h.first_attempt()
    h.add("failure", message, attempt=1)
    n = h.decide_last(run_record())
    assert n is not None and n.kind == "gpu_wait" and n.holders == holders
    assert "pid 4242 (alice, 60.0 GiB on GPU 1)" in n.title


def test_a_wait_for_gpu_memory_is_told_when_it_starts_and_only_once() -> None:
    gpus = [GPUInfo(index=1, name="H100", uuid="GPU-1", total_bytes=80 * GIB,
                    used_bytes=70 * GIB, free_bytes=10 * GIB, utilization=0,
                    processes=(GPUProcess(4242, 60 * GIB, "alice", "python train_other.py"),))]
    waiting = format_memory_shortfall(gpus, {1: 40 * GIB}, {1: "trainer"}, 0.0)
    h = History()
    h.first_attempt()
    h.add("gpu_wait", waiting)
    n = h.decide_last(run_record())
    assert n is not None and n.kind == "gpu_wait" and n.holders[0]["pid"] == 4242
    # The preflight then gives up: the same wait, not a second notification.
    h.add("failure", "preflight failed: " + format_memory_shortfall(
        gpus, {1: 40 * GIB}, {1: "trainer"}, 60.0), attempt=1)
    assert h.decide_last(run_record()) is None


def test_errored_rollouts_warn_quietly_and_the_limit_needs_a_person() -> None:
    """The warnings of errored rollouts are events only; the limit in a row is the
    `needs_person` notification with the environment's reason, then the failed run is
    `failed` as any."""
    from airvisor.box._rollouts import event_of
    from airvisor.policy._rollouts import EpisodeRecord, RolloutTally, tally_rollouts

    h = History()
    h.first_attempt()
    reason = "reset failed: c-0 has no Python to evaluate with"
    errored = [EpisodeRecord(ok=False, error=reason, task="blotto")] * 3
    _, notices = tally_rollouts(RolloutTally(), errored, limit=3, now=0.0)
    decided = []
    for notice in notices:
        kind, message, data = event_of(notice)
        h.add(kind, message, **data)
        decided.append(h.decide_last(run_record()))
    assert decided[0] is None  # the warning (rollout_errors) is not a notification
    person = decided[1]
    assert person is not None and person.kind == "needs_person"
    assert person.reason == reason
    assert person.title.startswith("run demo needs a person: 3 errored rollouts in a row")
    h.add("state", "run stopping")
    h.add("stopped_components", "components stopped")
    assert h.decide_last(run_record()) is None
    h.add("state", "run failed")
    failed = h.decide_last(run_record(state="failed", last_error=f"needs a person: {reason}"))
    assert failed is not None and failed.kind == "failed"


def test_a_stall_notification_leads_with_the_line_across_the_ranks() -> None:
    """Issue 31 item 5: which ranks wait where and which one is elsewhere comes first."""
    h = History()
    h.first_attempt()
    h.add("failure", "hung: step 5 has not advanced for 3 s (health.stall_timeout)", attempt=1)
    verdicts = ["trainer rank 0: waiting on the GPU in synchronize after all_reduce",
                "trainer rank 1: sleeping in stop_calling_all_reduce (train.py:22)"]
    across = ("trainer rank 0 waiting on the GPU in synchronize after all_reduce; rank 1 is "
              "elsewhere (the odd one out): sleeping in stop_calling_all_reduce (train.py:22)")
    h.add("stacks", "stacks before the stall kill", attempt=1, verdicts=verdicts,
          summary=across)
    n = h.decide_last(run_record())
    assert n is not None and n.kind == "stalled"
    assert n.stacks == [across, *verdicts]
