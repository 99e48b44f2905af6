"""prepare_machine's GPU checks against a fake NVML (the reaping half runs in the sandboxed
scenario tests of tests/reaper, where discovery sees only planted processes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airvisor.gpu import GIB, DeviceReading, GPUUnavailable
from airvisor.profile._schema import (
    GPUSection,
    InferenceSection,
    PrimeRLSection,
    Profile,
    ReaperSection,
    RunSection,
    TrainerSection,
)
from airvisor.reaper import (
    PreflightError,
    inference_memory_share,
    memory_requirements,
    prepare_machine,
)


def profile(tmp_path: Path, **sections: Any) -> Profile:
    base: dict[str, Any] = {
        "run": RunSection(name="t", output_dir=tmp_path / "out"),
        "prime_rl": PrimeRLSection(version="0.4", args=["@", "rl.toml"]),
        # Reaping is off here: these tests are about GPUs and must not look for stale
        # processes on a shared machine.
        "reaper": ReaperSection(enabled=False, gpu_free_timeout=4.0, ports=[]),
        "inference": InferenceSection(port=1),
        "trainer": TrainerSection(rdzv_port=1, min_free_gib=10),
    }
    base.update(sections)
    return Profile(**base)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeNVML:
    def __init__(self, clock: Clock, used: dict[int, int], frees_at: float | None) -> None:
        self.clock, self.used, self.frees_at = clock, used, frees_at
        self.reads = 0

    def read_devices(self) -> list[DeviceReading]:
        self.reads += 1
        freed = self.frees_at is not None and self.clock() >= self.frees_at
        out = []
        for index, used in sorted(self.used.items()):
            used = 0 if freed else used
            holders = () if freed or not used else ((3_999_999, used),)
            out.append(DeviceReading(index, "NVIDIA H100 80GB HBM3", f"GPU-{index}", 80 * GIB,
                                     used, 80 * GIB - used, 5, holders))
        return out


class ExplodingNVML:
    def read_devices(self) -> list[DeviceReading]:
        raise AssertionError("NVML must not be touched for a profile without GPUs")


class NoDriver:
    def read_devices(self) -> list[DeviceReading]:
        raise GPUUnavailable("No NVIDIA driver is available on this machine (NVML could not "
                             "be loaded).")


def test_a_profile_without_gpus_never_touches_nvml(tmp_path: Path) -> None:
    report = prepare_machine(profile(tmp_path), run_id="r", live_run_ids=set(),
                             backend=ExplodingNVML())
    assert report.requirements == {} and "no GPUs" in report.summary


def test_requirements_follow_the_profile(tmp_path: Path) -> None:
    p = profile(tmp_path, gpus=GPUSection(inference=[0], trainer=[1]))
    needs, who = memory_requirements(p, {0: 80 * GIB, 1: 80 * GIB})
    assert needs == {0: int(0.9 * 80 * GIB), 1: 10 * GIB}
    assert "inference" in who[0] and "trainer" in who[1]
    shared = profile(tmp_path, gpus=GPUSection(inference=[0], trainer=[0],
                                                inference_memory_share=0.5))
    needs, who = memory_requirements(shared, {0: 80 * GIB})
    assert needs == {0: 40 * GIB + 10 * GIB} and "+" in who[0]


def test_inference_share_from_the_profile_else_vllms_default(tmp_path: Path) -> None:
    # airvisor.primerl fills gpus.inference_memory_share from prime-rl's resolved config.
    shared = profile(tmp_path, gpus=GPUSection(inference=[0], trainer=[1],
                                                inference_memory_share=0.6))
    assert inference_memory_share(shared) == 0.6
    assert inference_memory_share(profile(tmp_path)) == 0.9


def test_memory_freed_after_a_delay_passes(tmp_path: Path) -> None:
    clock = Clock()
    nvml = FakeNVML(clock, {0: 30 * GIB, 1: 0}, frees_at=2.0)
    p = profile(tmp_path, gpus=GPUSection(inference=[0], trainer=[1]))
    report = prepare_machine(p, run_id="r", live_run_ids=set(), backend=nvml, clock=clock,
                             sleep=clock.sleep)
    assert 2.0 <= report.waited <= 2.6
    assert report.requirements[0] == int(0.9 * 80 * GIB)
    assert "GPU memory ok" in report.summary


def test_memory_never_freed_fails_with_a_table_of_holders(tmp_path: Path) -> None:
    clock = Clock()
    nvml = FakeNVML(clock, {0: 30 * GIB, 1: 75 * GIB}, frees_at=None)
    p = profile(tmp_path, gpus=GPUSection(inference=[0], trainer=[1]))
    with pytest.raises(PreflightError) as caught:
        prepare_machine(p, run_id="r", live_run_ids=set(), backend=nvml, clock=clock,
                        sleep=clock.sleep)
    message = str(caught.value)
    assert clock.now == pytest.approx(4.0)  # reaper.gpu_free_timeout
    assert "GPU 0" in message and "GPU 1" in message
    assert "3999999" in message and "(exited)" in message
    # Each holder gets the real next step: this one is no training process airvisor knows.
    assert "next step: not a training process airvisor knows" in message
    assert "airvisor reap` lists stale ones" not in message
    assert "trainer (trainer.min_free_gib = 10)" in message


def test_a_gpu_the_machine_lacks_is_named(tmp_path: Path) -> None:
    clock = Clock()
    nvml = FakeNVML(clock, {0: 0}, frees_at=None)
    p = profile(tmp_path, gpus=GPUSection(inference=[0], trainer=[2]))
    with pytest.raises(PreflightError) as caught:
        prepare_machine(p, run_id="r", live_run_ids=set(), backend=nvml)
    assert "GPU 2" in str(caught.value) and "[gpus]" in str(caught.value)


def test_no_driver_is_a_clear_preflight_error(tmp_path: Path) -> None:
    p = profile(tmp_path, gpus=GPUSection(inference=[0]))
    with pytest.raises(PreflightError) as caught:
        prepare_machine(p, run_id="r", live_run_ids=set(), backend=NoDriver())
    text = str(caught.value)
    assert text.startswith("The profile uses GPU 0, but no NVIDIA driver")
    assert "\n" not in text


def test_a_port_the_run_itself_holds_is_no_warning(tmp_path: Path) -> None:
    """A kept inference server (the run's own pid, handed in as `own_pids`) listens on the
    profile's port: the relaunch's preflight says nothing of it; anyone else's is warned of."""
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-c", "import socket, sys, time\n"
         f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen()\n"
         "print('up', flush=True); time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "up"
        p = profile(tmp_path, gpus=GPUSection(), reaper=ReaperSection(enabled=False,
                                                                       ports=[port]))
        theirs = prepare_machine(p, run_id="r", live_run_ids=[])
        assert [(b.port, b.pid) for b in theirs.busy_ports] == [(port, server.pid)]
        ours = prepare_machine(p, run_id="r", live_run_ids=[], own_pids={server.pid})
        assert ours.busy_ports == []
    finally:
        server.kill()
        server.wait()
