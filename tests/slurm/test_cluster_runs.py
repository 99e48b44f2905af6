"""Slurm mode against the real test cluster (tests/slurm/_cluster.py: Debian's Slurm 22.05).

The job script is prime-rl main's own, from its `rl --dry-run`; the job runs airvisor's
stand-ins where the template places prime-rl's components (the PROJECT_DIR's `uv run X` is the
stand-in X, tests/slurm/_support.py make_project), and airvisor's node check on every node.

prime-rl's templates allocate GPUs (`#SBATCH --exclusive --gres=gpu:N`); the test cluster's
nodes declare 8 GPUs by gres (no devices: nothing here uses them), so the script runs unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from airvisor.core import Command
from airvisor.policy import Phase, RunState
from airvisor.profile import Profile
from airvisor.runs import RunManager
from airvisor.slurm import CommandSlurm, render_job_script
from airvisor.slurmctl._client import SlurmClient
from airvisor.store import Store

from ._support import Driver, make_project, primerl_main_python, slurm_profile

FAST = {"inference": {"startup_delay": 0.2}, "trainer": {"step_time": 0.6},
        "orchestrator": {"step_time": 0.3}}


@pytest.fixture(scope="module")
def primerl_main(tmp_path_factory: pytest.TempPathFactory) -> str:
    return primerl_main_python(tmp_path_factory.mktemp("check"))


@pytest.fixture
def cluster_env(slurm_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    # The node check runs with the interpreter every node has at the same path.
    monkeypatch.setenv("AIRVISOR_SLURM_PYTHON", str(slurm_cluster.python))
    yield slurm_cluster


def start_run(cluster: Any, primerl: str, name: str, *, partition: str = "local",
              demo: dict[str, Any] | None = None, rl: dict[str, Any] | None = None,
              **extra: Any) -> Driver:
    base = cluster.tmp_shared(name)
    project = make_project(base / "project", str(cluster.python))
    config = {"slurm": {"project_dir": str(project), "partition": partition,
                        "cleanup_grace_period": 0}, **(rl or {})}
    profile: Profile = slurm_profile(base, python=[primerl], rl=config,
                                     demo=demo or FAST, **extra)
    driver = Driver(Store(base / "state" / "airvisor.sqlite3"), profile,
                    slurm=CommandSlurm(), render=render_job_script, real_time=True)
    driver.sup.begin()
    return driver


def attempts(d: Driver) -> list[dict[str, Any]]:
    return d.store.attempts(d.run_id)


def assert_last_attempt_succeeded(d: Driver) -> dict[str, Any]:
    last = attempts(d)[-1]
    assert last["outcome"] == "succeeded", attempts(d)
    return last


def no_job_processes(cluster: Any, nodes: list[str], marker: str) -> list[str]:
    return [f"{node}: {line}" for node in nodes for line in cluster.node_processes(node)
            if marker in line and "airvisor.demo" in line]


def test_clean_run_to_the_end(cluster_env: Any, primerl_main: str) -> None:
    d = start_run(cluster_env, primerl_main, "clean")
    d.pump(lambda: d.sup.finished.is_set(), timeout=150)
    assert d.sup.state == RunState.SUCCEEDED, d.messages("failure")
    run = d.store.get_run(d.run_id)
    assert run is not None and run.step == 6
    (attempt,) = attempts(d)
    job = attempt["details"]["job_id"]
    assert run.details["slurm_job_id"] == job
    assert run.details["slurm_nodes"] == cluster_env.partitions["local"]
    assert cluster_env.job_state(job) == "COMPLETED"  # prime-rl's `rl` ended the job itself
    (check,) = d.messages("node_check")
    assert check.startswith(f"node {cluster_env.host_node}: ")


def test_component_crash_resubmits_from_newest_complete_checkpoint(
        cluster_env: Any, primerl_main: str) -> None:
    demo = {**FAST, "trainer": {"step_time": 0.6, "crash_at_step": 4}}
    d = start_run(cluster_env, primerl_main, "crash", demo=demo)
    d.pump(lambda: d.sup.finished.is_set(), timeout=200)
    assert d.sup.state == RunState.SUCCEEDED, d.messages("failure")
    # What airvisor guarantees, not how many jobs Slurm needed: the first attempt failed as
    # injected, the next one resumed from the newest complete checkpoint, the last succeeded.
    # (An extra attempt, e.g. a job Slurm could not start, is allowed.)
    first, second, *_ = attempts(d)
    assert_last_attempt_succeeded(d)
    assert cluster_env.job_state(first["details"]["job_id"]) == "FAILED"
    assert first["outcome"] == "failed" and "trainer exited with status" in first["reason"]
    assert second["resume_step"] == 2 and second["cause"] == "crash"  # ckpt.interval = 2
    assert second["details"]["job_id"] != first["details"]["job_id"]
    restart = d.store.restart_history(d.run_id)[0]
    assert restart.kind == "crash" and restart.counted


def test_stall_cancels_and_resubmits(cluster_env: Any, primerl_main: str) -> None:
    demo = {**FAST, "trainer": {"step_time": 0.6, "hang_at_step": 4}}
    d = start_run(cluster_env, primerl_main, "stall", demo=demo,
                  health={"stall_timeout": 6, "first_step_grace": 60})
    d.pump(lambda: d.sup.finished.is_set(), timeout=200)
    assert d.sup.state == RunState.SUCCEEDED, d.messages("failure")
    first, second, *_ = attempts(d)  # an extra attempt is allowed (see the crash test)
    assert_last_attempt_succeeded(d)
    assert cluster_env.job_state(first["details"]["job_id"]) == "CANCELLED"  # airvisor's scancel
    assert "hung: step" in first["reason"] and second["cause"] == "hang"
    assert second["resume_step"] == 2


MULTI_NODE = {"deployment": {"type": "multi_node", "num_train_nodes": 1, "num_infer_nodes": 1,
                              "gpus_per_node": 1}}


def test_multi_node_run_to_the_end_cancels_the_serving_inference_node(
        slurm_multi: Any, cluster_env: Any, primerl_main: str) -> None:
    # With the orchestrator on the trainer's node (the default), the template's `wait -n` there
    # ends the trainer as soon as the orchestrator is done, which under filesystem broadcast is
    # before the trainer's last steps: the orchestrator runs on the inference node here. The
    # run succeeds when trainer and orchestrator finished, cancelling what still serves.
    deployment = {**MULTI_NODE["deployment"], "orchestrator_on_inference": True}
    d = start_run(cluster_env, primerl_main, "multi-end", partition="multi",
                  rl={"max_steps": 4, "deployment": deployment})
    d.pump(lambda: d.sup.finished.is_set(), timeout=180)
    assert d.sup.state == RunState.SUCCEEDED, d.messages("failure")
    run = d.store.get_run(d.run_id)
    assert run is not None and run.step == 4
    (attempt,) = attempts(d)
    assert sorted(attempt["details"]["nodes"]) == sorted(cluster_env.partitions["multi"])
    assert cluster_env.job_state(attempt["details"]["job_id"]) in ("COMPLETED", "CANCELLED")
    assert d.messages("success")


def test_stop_cancels_the_job_and_leaves_nothing_on_any_node(
        slurm_multi: Any, cluster_env: Any, primerl_main: str) -> None:
    # prime-rl's multi-node template: inference (+ router) on the first node, trainer and
    # orchestrator on the second.
    demo = {**FAST, "trainer": {"step_time": 0.6}}
    d = start_run(cluster_env, primerl_main, "stop", partition="multi", demo=demo,
                  rl={"max_steps": 100, **MULTI_NODE})
    d.pump(lambda: (d.sup.step or 0) >= 2, timeout=150)
    nodes = list(d.sup.job.nodes) if d.sup.job else []
    assert sorted(nodes) == sorted(cluster_env.partitions["multi"])
    assert {m.split(":")[0].removeprefix("node ") for m in d.messages("node_check")} \
        == set(nodes)
    d.sup.handle(Command(d.run_id, "stop"))
    d.pump(lambda: d.sup.finished.is_set(), timeout=90)
    assert d.sup.state == RunState.STOPPED
    job = attempts(d)[0]["details"]["job_id"]
    assert cluster_env.job_state(job) == "CANCELLED"
    deadline = time.monotonic() + 30
    left = no_job_processes(cluster_env, nodes, "--prime-rl main")
    while left and time.monotonic() < deadline:
        time.sleep(1)
        left = no_job_processes(cluster_env, nodes, "--prime-rl main")
    assert left == []


def test_a_killed_node_fails_the_job_and_it_is_resubmitted_without_it(
        slurm_multi: Any, cluster_env: Any, primerl_main: str) -> None:
    demo = {**FAST, "trainer": {"step_time": 1.0}}
    d = start_run(cluster_env, primerl_main, "nodekill", partition="multi", demo=demo,
                  rl={"max_steps": 8})
    d.pump(lambda: (d.sup.step or 0) >= 3, timeout=150)
    assert d.sup.job is not None
    (victim,) = d.sup.job.nodes
    cluster_env.kill_node(victim)
    d.pump(lambda: d.sup.finished.is_set(), timeout=270)
    assert d.sup.state == RunState.SUCCEEDED, d.messages("failure")
    first, *later = attempts(d)
    assert later, "the killed node's job was not followed by another attempt"
    # Slurm records the killed job NODE_FAIL or FAILED depending on which it noticed first
    # (the node's timeout or srun losing it); airvisor blames the node when Slurm says the
    # node failed (tests/slurm/test_states.py covers that rule on both states).
    state = cluster_env.job_state(first["details"]["job_id"])
    assert state in ("NODE_FAIL", "FAILED") and first["outcome"] == "failed"
    if state == "NODE_FAIL":
        assert first["details"]["blamed"] == [victim]
    # The node stays dead, so the attempt that succeeded ran elsewhere.
    last = assert_last_attempt_succeeded(d)
    assert victim not in last["details"]["nodes"]


def test_a_restarted_daemon_reattaches_to_the_job_by_id(cluster_env: Any,
                                                         primerl_main: str) -> None:
    demo = {**FAST, "trainer": {"step_time": 0.8}}
    d = start_run(cluster_env, primerl_main, "reattach", demo=demo)
    d.pump(lambda: (d.sup.step or 0) >= 2, timeout=150)
    d.sup.detach()  # the daemon dies; the job keeps running
    time.sleep(2)
    run = d.store.get_run(d.run_id)
    assert run is not None
    again = Driver(d.store, d.sup.profile, slurm=CommandSlurm(), render=render_job_script,
                   run_id=d.run_id, create=False, real_time=True)
    again.sup.reattach(run)
    assert again.sup.job_id == run.details["slurm_job_id"]
    again.pump(lambda: again.sup.finished.is_set(), timeout=150)
    assert again.sup.state == RunState.SUCCEEDED and len(attempts(d)) == 1
    assert "reattached" in again.kinds()


class SubmitTimes(CommandSlurm):
    """The real Slurm commands, noting this process's monotonic clock at each sbatch."""

    def __init__(self) -> None:
        super().__init__()
        self.submitted_at: list[float] = []

    def submit(self, *args: Any, **kwargs: Any) -> str:
        self.submitted_at.append(time.monotonic())
        return super().submit(*args, **kwargs)


def test_a_daemon_dead_in_the_backoff_waits_out_its_deadline_then_resubmits(
        cluster_env: Any, primerl_main: str) -> None:
    """A job fails, the run backs off (20 s), the daemon dies in the backoff; the next one
    (its wall clock 8 s ahead of the dead one's, injected: only about 12 s of the backoff are
    left) restores the persisted machine, waits out the rest of the backoff (sbatch runs no
    earlier than the deadline on its own clock: an order, not a timing), and the resubmitted
    job resumes from the newest complete checkpoint and succeeds, the restart counted once
    (issue 29 item 1)."""
    demo = {**FAST, "trainer": {"step_time": 0.6, "crash_at_step": 4}}
    d = start_run(cluster_env, primerl_main, "backoff-takeover", demo=demo,
                  restart={"immediate_first": False, "backoff_initial": 20, "backoff_max": 20})
    d.pump(lambda: d.sup.phase == Phase.BACKOFF, timeout=150)
    d.sup.detach()  # the daemon dies in the backoff
    run = d.store.get_run(d.run_id)
    assert run is not None and run.phase == "recovering.backoff"
    slurm = SubmitTimes()
    client: SlurmClient = slurm
    again = Driver(d.store, d.sup.profile, slurm=client, render=render_job_script,
                   run_id=d.run_id, create=False, real_time=True, wall_offset=8.0)
    again.sup.reattach(run)
    assert again.sup.phase == Phase.BACKOFF  # not resubmitted at once
    until = again.sup.machine.backoff_until
    assert until is not None and until > time.monotonic()
    again.pump(lambda: again.sup.finished.is_set(), timeout=200)
    assert again.sup.state == RunState.SUCCEEDED, d.messages("failure")
    assert slurm.submitted_at and slurm.submitted_at[0] >= until
    first, second, *_ = attempts(d)  # an extra attempt is allowed (see the crash test)
    assert_last_attempt_succeeded(d)
    assert first["outcome"] == "failed" and second["cause"] == "crash"
    assert second["resume_step"] == 2
    history = d.store.restart_history(d.run_id)
    assert (history[0].kind, history[0].counted) == ("crash", True)
    assert len(history) == len(attempts(d)) - 1  # one restart per later attempt: none again
    assert "reattached" in again.kinds()


def test_the_engine_supervises_a_slurm_profile_and_a_new_daemon_reattaches(
        cluster_env: Any, primerl_main: str) -> None:
    """Through the engine as the daemon runs it: RunManager makes the Slurm supervisor for a
    [slurm] profile; the daemon goes away mid-job (the job runs on); the next daemon's boot
    takeover re-attaches to the job by its recorded id and sees the run to its end, no resubmit."""
    base = cluster_env.tmp_shared("engine")
    project = make_project(base / "project", str(cluster_env.python))
    config = {"slurm": {"project_dir": str(project), "partition": "local",
                        "cleanup_grace_period": 0}}
    profile: Profile = slurm_profile(base, python=[primerl_main], rl=config,
                                     demo={**FAST, "trainer": {"step_time": 0.8}})
    store = Store(base / "state" / "airvisor.sqlite3")
    first = RunManager(store)
    run_id = first.submit(profile).id
    assert type(first.supervisor(run_id)).__name__ == "SlurmRunSupervisor"

    def run() -> Any:
        record = store.get_run(run_id)
        assert record is not None
        return record

    deadline = time.monotonic() + 150
    while (run().step or 0) < 2:
        assert time.monotonic() < deadline, run()
        first.tick(0.1)
    job_id = run().details["slurm_job_id"]
    first.shutdown(stop_runs=False)  # the daemon goes away; the job keeps running
    store.update_run(run_id, supervisor_started=1.0)  # that process is gone
    second = RunManager(store)
    assert second.adopt_on_boot() == [run_id]
    supervisor = second.supervisor(run_id)
    assert supervisor is not None
    deadline = time.monotonic() + 150
    while not supervisor.state.terminal:
        assert time.monotonic() < deadline, run()
        second.tick(0.1)
    assert supervisor.state == RunState.SUCCEEDED, run().last_error
    assert [a["details"]["job_id"] for a in store.attempts(run_id)] == [job_id]
    kinds = [e.kind for e in store.events(run_id)]
    assert "reattached" in kinds and "failure" not in kinds
