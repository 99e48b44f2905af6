"""Other owners' live work is never stale: a process in a live Slurm job (its job id in the
environment, or its cgroup under slurmd's) or in another supervisor's cgroup (a container
runtime's) belongs to that job: listed as such, stopped only with --all. Every process a
preflight stops or leaves is reported with its pid, command line, owner and reason."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from airvisor.proc._facts import ProcessFacts, cgroup_supervisor, slurm_job_of
from airvisor.proc._marker import Marker
from airvisor.reaper import ReapContext, classify, slurm_job_claims

ROOT = 0
CONTEXT = ReapContext(live_run_ids=frozenset({"live-run"}), own_uid=ROOT,
                      profile_gpus=frozenset({0}), now=1000.0)
VLLM = ("vllm", "serve", "/models/tiny", "--port", "8000")


def facts(**overrides: Any) -> ProcessFacts:
    base = ProcessFacts(pid=500, ppid=1, create_time=900.0, uid=ROOT, username="root", exe="",
                        argv=VLLM, comm="vllm", status="sleeping", pgid=500, marker=None,
                        ancestors=(1,))
    return replace(base, **overrides)


@pytest.mark.parametrize(("job", "phase", "own_job", "claimed"), [
    (None, None, None, None),
    ("12", "running", None, "Slurm job 12 (running per Slurm)"),
    ("12", "queued", None, "Slurm job 12 (queued per Slurm)"),
    ("12", "ending", None, "Slurm job 12 (ending per Slurm)"),
    # Slurm cannot be asked (no commands, slurmctld down) or was not: nothing shows it ended.
    ("12", "unknown", None, "Slurm job 12 (Slurm could not say whether it still runs)"),
    ("12", None, None, "Slurm job 12 (Slurm could not say whether it still runs)"),
    # An ended job no longer owns its leftovers.
    ("12", "ended", None, None),
    # The caller's own allocation claims nothing: judged by the airvisor run as elsewhere.
    ("12", "running", "12", None),
    ("12", "running", "13", "Slurm job 12 (running per Slurm)"),
])
def test_slurm_job_claims(job: str | None, phase: str | None, own_job: str | None,
                          claimed: str | None) -> None:
    assert slurm_job_claims(job, phase, own_job) == claimed


@pytest.mark.parametrize(("environ", "cgroup", "job"), [
    (b"PATH=/bin\0SLURM_JOB_ID=42\0HOME=/root\0", "/user.slice", "42"),
    (b"", None, None),
    (b"SLURM_JOBID=43\0", None, "43"),
    (b"PATH=/bin\0", "/system.slice/slurmstepd.scope/job_77/step_0/user/task_0", "77"),
    (b"", "/slurm/uid_1000/job_78/step_batch/task_0", "78"),
    (b"SLURM_JOB_ID=\0", None, None),
    (b"MY_SLURM_JOB_ID=9\0", None, None),
    (b"PATH=/bin\0", "/user.slice/user-0.slice/session-3.scope", None),
])
def test_slurm_job_of_a_process(environ: bytes, cgroup: str | None, job: str | None) -> None:
    assert slurm_job_of(environ, cgroup) == job


@pytest.mark.parametrize(("argv", "job"), [
    (("slurmstepd:", "[12.batch]"), "12"),
    (("slurmstepd:", "[12.0]"), "12"),
    (("slurmstepd:", "[12.extern]"), "12"),
    (("slurmstepd:", "[12]"), "12"),
    (("slurmstepd:", "[x.batch]"), None),
    (("/usr/sbin/slurmstepd",), None),
    (("vim", "slurmstepd:", "[12.batch]"), None),
])
def test_slurmstepd_names_its_job(argv: tuple[str, ...], job: str | None) -> None:
    """A job step's processes descend from `slurmstepd: [<job>.<step>]`: a retitled task whose
    environment setproctitle wiped is still found in its job through it."""
    assert slurm_job_of(b"", None, argv) == job


@pytest.mark.parametrize(("cgroup", "supervisor"), [
    ("/system.slice/docker-0123456789abcdef0123456789.scope", "Docker container 0123456789ab"),
    ("/docker/0123456789abcdef0123456789", "Docker container 0123456789ab"),
    ("/machine.slice/libpod-abcdefabcdef0123.scope/container", "Podman container abcdefabcdef"),
    ("/kubepods.slice/kubepods-burstable.slice/pod1.slice", "a Kubernetes pod"),
    ("/user.slice/user-0.slice/session-3.scope", None),
    ("/airvisor/sv-0123/run-x/attempt-1/inference", None),
    (None, None),
])
def test_other_supervisors_cgroups(cgroup: str | None, supervisor: str | None) -> None:
    assert cgroup_supervisor(cgroup) == supervisor


IN_THE_WAY = {"gpu_memory": {0: 30 << 30}}


@pytest.mark.parametrize(("overrides", "context", "stale", "owner", "said"), [
    # In the profile's way, outside Slurm: stale.
    (IN_THE_WAY, {}, True, "nobody (not started by airvisor)", "which the profile needs"),
    # The same in a running job: the job's, left alone.
    ({**IN_THE_WAY, "slurm_job": "12"}, {"slurm_jobs": {"12": "running"}}, False,
     "Slurm job 12 (running per Slurm)", "live work of Slurm job 12"),
    # ... unless --all.
    ({**IN_THE_WAY, "slurm_job": "12"},
     {"slurm_jobs": {"12": "running"}, "reap_unowned": True}, True,
     "Slurm job 12 (running per Slurm)", "stopped because of --all"),
    # A job Slurm says ended owns nothing any more.
    ({**IN_THE_WAY, "slurm_job": "12"}, {"slurm_jobs": {"12": "ended"}}, True,
     "nobody (not started by airvisor)", "which the profile needs"),
    # A job Slurm could not be asked about keeps its processes.
    ({**IN_THE_WAY, "slurm_job": "12"}, {}, False,
     "Slurm job 12 (Slurm could not say whether it still runs)", "live work of Slurm job 12"),
    # A dead airvisor run's process inside a running job: the job's, not ours to stop.
    ({"slurm_job": "12", "marker": Marker("dead-run", "inference")},
     {"slurm_jobs": {"12": "running"}}, False, "Slurm job 12 (running per Slurm)",
     "live work of Slurm job 12"),
    # ... inside the caller's own allocation it is judged by its run: stale.
    ({"slurm_job": "12", "marker": Marker("dead-run", "inference")},
     {"slurm_jobs": {"12": "running"}, "own_slurm_job": "12"}, True,
     "airvisor run dead-run (inference)", "which is not live"),
    # In a container runtime's cgroup (not the caller's own): that supervisor's.
    ({**IN_THE_WAY, "supervisor_cgroup": "Docker container 0123456789ab",
      "cgroup": "/system.slice/docker-0123456789ab.scope"}, {}, False,
     "Docker container 0123456789ab (cgroup /system.slice/docker-0123456789ab.scope)",
     "live work of Docker container"),
    ({**IN_THE_WAY, "supervisor_cgroup": "Docker container 0123456789ab"},
     {"own_supervisor_cgroup": "Docker container 0123456789ab"}, True,
     "nobody (not started by airvisor)", "which the profile needs"),
])
def test_other_owners_work_is_never_stale(overrides: dict[str, Any], context: dict[str, Any],
                                          stale: bool, owner: str, said: str) -> None:
    verdict = classify(facts(**overrides), replace(CONTEXT, **context))
    assert verdict is not None
    assert verdict.stale is stale
    assert verdict.owner == owner
    assert said in f"{verdict.reason} {verdict.blocked_by}"


def test_live_runs_stay_unlisted_in_any_job() -> None:
    live = facts(slurm_job="12", marker=Marker("live-run", "inference"))
    assert classify(live, replace(CONTEXT, slurm_jobs={"12": "ended"})) is None


def test_preflight_leaves_a_running_jobs_processes_and_records_every_process(
        scenario: Any) -> None:
    result = scenario("slurm_preflight")
    # Slurm (the fake adapter) was asked about both jobs.
    assert result["asked"] == ["4242", "4243"]
    # The running job's whole tree survives, though its worker holds the profile's GPU 0 and
    # its retitled engine and worker show no SLURM_JOB_ID of their own.
    assert all(result["alive"]["in_job"].values())
    # The ended job's and the loose server's trees (in the way on GPU 1) were stopped.
    assert not any(result["alive"]["ended"].values())
    assert not any(result["alive"]["loose"].values())
    # One event lists every process stopped or left: pid, command line, owner, reason.
    [event] = result["processes_events"]
    by_pid = {p["pid"]: p for p in event["processes"]}
    for role, pid in result["in_job"].items():
        if role == "tracker":
            continue  # a generic helper, listed only with its stale relative
        entry = by_pid[pid]
        assert entry["action"] == "left"
        assert entry["owner"] == "Slurm job 4242 (running per Slurm)"
        assert "live work of Slurm job 4242" in entry["why_left"]
        assert entry["command"]
    for pid in (result["ended"]["worker"], result["loose"]["worker"]):
        entry = by_pid[pid]
        assert entry["action"] in ("stopped", "killed")
        assert "holds memory on GPU 1" in entry["reason"]
        assert entry["command"] == "VLLM::Worker"
    assert f"pid {result['in_job']['worker']}" in event["message"]
    assert "Slurm job 4242" in event["message"]


def test_the_engines_preflight_records_each_process_in_the_runs_events(
        scenario: Any, tmp_path: Any) -> None:
    result = scenario("preflight_event", env={"AIRVISOR_STATE_DIR": str(tmp_path / "state")})
    dead, nobodys = result["pids"]["dead"], result["pids"]["nobodys"]
    assert result["alive"] == {"dead": False, "nobodys": True}
    [event] = result["events"]
    by_pid = {p["pid"]: p for p in event["data"]["processes"]}
    stopped = by_pid[dead]
    assert stopped["action"] in ("stopped", "killed")
    assert stopped["owner"] == "airvisor run r-dead"
    assert "which is not live" in stopped["reason"] and "sleep" in stopped["command"]
    left = by_pid[nobodys]
    assert left["action"] == "left" and left["owner"] == "nobody (not started by airvisor)"
    assert "not ours" in left["why_left"] and left["command"].startswith("vllm serve")
    assert f"pid {dead}" in event["message"] and f"pid {nobodys}" in event["message"]
    # Who reaped, and the record in the stopped run's own events (issue 33 item 3).
    assert event["data"]["by"]["what"] == "the preflight of run r-new"
    assert event["data"]["by"]["uid"] == result["uid"]
    assert event["data"]["recorded"] == ["recorded in run r-dead's events (state dir "
                                         f"{tmp_path / 'state'})"]
    [theirs] = result["dead_events"]
    assert [p["pid"] for p in theirs["data"]["processes"]] == [dead]
    assert theirs["data"]["by"]["what"] == "the preflight of run r-new"
    assert "(reap: the preflight of run r-new, run by user" in theirs["message"]
