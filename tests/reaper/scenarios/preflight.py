"""Scenario (first process of its own PID namespace): prepare_machine with reaping on, over a
fake NVML whose holders are real planted processes (their memory is released a moment after
they die, as the driver does). Prints one JSON object."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("planting", HERE.parent.parent / "proc" /
                                              "planting.py")
assert spec is not None and spec.loader is not None
planting = importlib.util.module_from_spec(spec)
sys.modules["planting"] = planting
spec.loader.exec_module(planting)


from _sandbox import private_tmp  # noqa: E402  (the scenario dir is on sys.path)

from airvisor.gpu import GIB, DeviceReading  # noqa: E402
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
from airvisor.reaper import PreflightError, prepare_machine  # noqa: E402

RELEASE_DELAY = 0.3


class ProcessBackedNVML:
    """GPU index -> {pid: bytes}; a holder's memory stays RELEASE_DELAY s after its death."""

    def __init__(self, holders: dict[int, dict[int, int]]) -> None:
        self.holders = holders
        self.died_at: dict[int, float] = {}

    def read_devices(self) -> list[DeviceReading]:
        now = time.monotonic()
        out = []
        for index, held in sorted(self.holders.items()):
            present = {}
            for pid, used in held.items():
                if not planting.pid_alive(pid):
                    self.died_at.setdefault(pid, now)
                    if now - self.died_at[pid] >= RELEASE_DELAY:
                        continue
                present[pid] = used
            used_total = sum(present.values())
            out.append(DeviceReading(index, "NVIDIA H100 80GB HBM3", f"GPU-{index}", 80 * GIB,
                                     used_total, 80 * GIB - used_total, 0,
                                     tuple(sorted(present.items()))))
        return out


def main() -> None:
    assert os.getpid() == 1, "run me with unshare --pid --fork --mount-proc"
    private_tmp()
    work = Path(tempfile.mkdtemp(prefix="airvisor-preflight-"))
    p = planting.Planter(work)
    vllm = p.plant("vllm-serve", roles=("root", "tracker", "engine", "worker"))
    os.kill(vllm.root, signal.SIGKILL)
    vllm.popen.wait()
    kept = p.plant("vllm-serve", roles=("root", "tracker", "engine", "worker"))
    bystander = p.plant("sleep")  # not a training process: never reaped
    nvml = ProcessBackedNVML({
        0: {vllm.pids["worker"]: 70 * GIB},
        1: {bystander.root: 5 * GIB},
    })
    profile = Profile(
        run=RunSection(name="t", output_dir=work / "out"),
        prime_rl=PrimeRLSection(version="0.4", args=["@", "rl.toml"]),
        gpus=GPUSection(inference=[0], trainer=[1]),
        inference=InferenceSection(port=18000),
        trainer=TrainerSection(rdzv_port=18001, min_free_gib=10),
        restart=RestartSection(stop_grace=1.0),
        reaper=ReaperSection(enabled=True, gpu_free_timeout=10.0, ports=[18000]),
    )
    events: list[str] = []
    result: dict[str, object] = {"stale": [vllm.pids[r] for r in ("tracker", "engine",
                                                                   "worker")]}
    report = prepare_machine(profile, run_id="run-new", live_run_ids=set(),
                             own_pids={kept.root}, backend=nvml,
                             log=lambda event, data: events.append(event))
    assert report.reaped is not None
    result["reaped"] = [c.pid for c in report.reaped.candidates]
    result["reasons"] = {c.pid: c.reason for c in report.reaped.candidates}
    result["waited"] = report.waited
    result["summary"] = report.summary
    result["events"] = events
    result["alive_after"] = {
        "stale": [pid for pid in result["stale"] if planting.pid_alive(pid)],  # type: ignore
        "kept": [pid for pid in kept.pids.values() if planting.pid_alive(pid)],
        "bystander": planting.pid_alive(bystander.root),
    }
    result["kept_count"] = len(kept.pids)

    # Now the bystander holds most of the trainer's GPU: it is not reapable, so the preflight
    # fails and names it.
    nvml.holders[1] = {bystander.root: 75 * GIB}
    profile = profile.model_copy(update={"reaper": ReaperSection(
        enabled=True, gpu_free_timeout=0.5, ports=[18000])})
    try:
        prepare_machine(profile, run_id="run-new", live_run_ids=set(),
                        own_pids={kept.root}, backend=nvml)
        result["second"] = "passed"
    except PreflightError as err:
        result["second"] = str(err)
    result["bystander_pid"] = bystander.root
    result["bystander_alive"] = planting.pid_alive(bystander.root)
    p.cleanup()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
