"""Scenario (first process of its own PID namespace): a preflight on a host where a Slurm job's
training processes run. Three `vllm serve` stand-ins hold memory on the profile's GPUs: one in a
job Slurm says is RUNNING (SLURM_JOB_ID in its environment; its retitled engine and worker show
none), one in a job that has COMPLETED, one outside Slurm. A fake Slurm adapter answers for the
jobs (the real cluster is tested in tests/slurm). Prints one JSON object."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("planting", HERE.parent.parent / "proc" /
                                              "planting.py")
assert spec is not None and spec.loader is not None
planting = importlib.util.module_from_spec(spec)
sys.modules["planting"] = planting
spec.loader.exec_module(planting)


from _sandbox import private_tmp  # noqa: E402  (the scenario dir is on sys.path)
from preflight import ProcessBackedNVML  # noqa: E402

from airvisor.gpu import GIB  # noqa: E402
from airvisor.profile._schema import (  # noqa: E402
    GPUSection,
    InferenceSection,
    PrimeRLSection,
    Profile,
    ReaperSection,
    RestartSection,
    RunSection,
    TrainerSection,
)
from airvisor.reaper import prepare_machine  # noqa: E402
from airvisor.slurm import JobInfo  # noqa: E402

RUNNING_JOB, ENDED_JOB = "4242", "4243"
ROLES = ("root", "tracker", "engine", "worker")


class FakeSlurm:
    """Answers `scontrol show job` as the adapter would, and records what was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def job(self, job_id: str) -> JobInfo:
        self.asked.append(job_id)
        state = {RUNNING_JOB: "RUNNING", ENDED_JOB: "COMPLETED"}.get(job_id, "GONE")
        return JobInfo(job_id=job_id, state=state)


def main() -> None:
    assert os.getpid() == 1, "run me with unshare --pid --fork --mount-proc"
    private_tmp()
    work = Path(tempfile.mkdtemp(prefix="airvisor-slurm-preflight-"))
    p = planting.Planter(work)
    in_job = p.plant("vllm-serve", roles=ROLES, env={"SLURM_JOB_ID": RUNNING_JOB})
    ended = p.plant("vllm-serve", roles=ROLES, env={"SLURM_JOB_ID": ENDED_JOB})
    loose = p.plant("vllm-serve", roles=ROLES)
    nvml = ProcessBackedNVML({
        0: {in_job.pids["worker"]: 30 * GIB},
        1: {ended.pids["worker"]: 30 * GIB, loose.pids["worker"]: 30 * GIB},
    })
    profile = Profile(
        run=RunSection(name="t", output_dir=work / "out"),
        prime_rl=PrimeRLSection(version="0.4", args=["@", "rl.toml"]),
        gpus=GPUSection(inference=[], trainer=[0, 1]),
        inference=InferenceSection(port=18000),
        trainer=TrainerSection(rdzv_port=18001, min_free_gib=5),
        restart=RestartSection(stop_grace=1.0),
        reaper=ReaperSection(enabled=True, gpu_free_timeout=10.0),
    )
    events: list[tuple[str, dict[str, Any]]] = []
    slurm = FakeSlurm()
    report = prepare_machine(profile, run_id="run-new", live_run_ids=set(), backend=nvml,
                             log=lambda kind, data: events.append((kind, data)), slurm=slurm)
    result: dict[str, Any] = {
        "asked": sorted(set(slurm.asked)),
        "in_job": in_job.pids, "ended": ended.pids, "loose": loose.pids,
        "alive": {name: {role: planting.pid_alive(pid) for role, pid in planted.pids.items()}
                  for name, planted in (("in_job", in_job), ("ended", ended),
                                        ("loose", loose))},
        "processes_events": [data for kind, data in events if kind == "reaper.processes"],
        "summary": report.summary,
    }
    p.cleanup()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
