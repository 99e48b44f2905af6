"""Real supervised runs over the demo stand-ins, with short steps and graces."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from airvisor.policy import RunState
from airvisor.proc import processes_with_marker
from airvisor.profile import Profile, load_profile
from airvisor.profile._configs import deep_merge
from airvisor.runs import RunManager
from airvisor.store import Store

from ..launchers import missing_launcher, real_launcher


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def demo_rl_config(out: Path, version: str = "0.4", **extra: Any) -> dict[str, Any]:
    """A prime-rl `rl` config in that version's dialect, as a user writes one (run dir `out`,
    v0.4; main's run dir is `out/t`)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    base: dict[str, Any] = {
        "output_dir": str(out), "max_steps": 12,
        "ckpt": {"interval": 2, "keep_last": 3},
        "inference": {"server": {"host": "127.0.0.1", "port": port}},
        "trainer": {},  # required by v0.4 RLConfig (no default)
    }
    if version == "0.4":
        base |= {"seq_len": 512, "inference_gpu_ids": [0], "trainer_gpu_ids": [1],
                 "model": {"name": "demo/tiny"},
                 # v0.4: a list, and not derived from the server's port
                 "orchestrator": {"client": {"base_url": [url]},
                                  "sampling": {"max_tokens": 128}}}
    else:
        # (a model name main's renderer map knows)
        base |= {"run": {"name": "t"}, "model": {"name": "Qwen/Qwen3-0.6B"},
                 "deployment": {"num_train_gpus": 1, "num_infer_gpus": 1},
                 "orchestrator": {"model": {"client": {"base_url": url}}}}
    return deep_merge(base, extra)


def demo_profile_dict(out: Path, *, rl: dict[str, Any] | None = None, version: str = "0.4",
                      launcher: str = "prime-rl", **extra: Any) -> dict[str, Any]:
    """An airvisor profile over prime-rl's own `rl` launcher of `version` (tests/launchers.py:
    only the programs it starts are the demo's stand-ins), or with `launcher="demo"` over the
    demo's stand-in of the launcher itself; its prime-rl config (`demo_rl_config(out, version,
    **rl)`) is written next to `out` as `<out>-rl.toml`."""
    config = out.parent / f"{out.name}-rl.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(tomli_w.dumps(demo_rl_config(out, version, **(rl or {}))))
    prime_rl: dict[str, Any] = {"version": version, "args": ["@", str(config)],
                                "workdir": str(out.parent)}
    if launcher == "prime-rl":
        missing = missing_launcher(version)
        if missing is not None:
            pytest.skip(missing)
        prime_rl["venv"] = str(real_launcher(out.parent / f"prime-rl-{version}", version))
        if version == "main":
            # main's launcher maps its GPUs from CUDA_VISIBLE_DEVICES, else NVML
            # (utils/process.py:36-44): this machine has no GPU, so name the box's two.
            prime_rl["env"] = {"CUDA_VISIBLE_DEVICES": "0,1"}
    else:
        prime_rl |= {"python": [], "command_prefix": ["{python}", "-m", "airvisor.demo",
                                                      "--prime-rl", version]}
    base: dict[str, Any] = {
        "run": {"name": "t", "demo": True, "on_existing": "replace"},
        "prime_rl": prime_rl,
        "demo": {"inference": {"startup_delay": 0.3}, "trainer": {"step_time": 0.1},
                 "orchestrator": {"step_time": 0.05}},
        "trainer": {"min_free_gib": 0},
        "health": {"ready_timeout": 20, "probe_interval": 0.5, "probe_failures": 3,
                   "stall_timeout": 3, "first_step_grace": 15},
        "checkpoint": {"size_gib": 0},
        # (immediate_first off: these tests replay the backoff's waits; its own tests turn it
        # on.)
        "restart": {"max_restarts": 3, "window": 120, "backoff_initial": 0.2,
                    "backoff_factor": 2, "backoff_max": 1, "stop_grace": 1,
                    "immediate_first": False},
        # Other developers' demo stand-ins run on this machine: never reap in these tests.
        "reaper": {"enabled": False},
    }
    return deep_merge(base, extra)


def write_profile(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(tomli_w.dumps(data))
    return path


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.store = Store(tmp_path / "state" / "airvisor.sqlite3")
        self.manager = RunManager(self.store)
        # These tests are about recovery; reaping has its own tests (other developers' stand-ins
        # run on this machine and must not be reaped here).
        self.preflights: list[str] = []

        def prepare_machine(profile: Profile, run_id: str, live: set[str], **_: Any) -> str:
            self.preflights.append(run_id)
            return "reaper skipped in engine tests"

        self.manager.hooks.prepare_machine = prepare_machine
        self.run_ids: list[str] = []

    def profile(self, *, rl: dict[str, Any] | None = None, version: str = "0.4",
                launcher: str = "prime-rl", **extra: Any) -> Profile:
        data = demo_profile_dict(self.tmp / "run", rl=rl, version=version, launcher=launcher,
                                 **extra)
        return load_profile(write_profile(self.tmp / "profile.toml", data))

    def run(self, profile: Profile, timeout: float = 90.0, **kw: Any) -> str:
        record = self.manager.submit(profile, **kw)
        self.run_ids.append(record.id)
        supervisor = self.manager.supervisor(record.id)
        assert supervisor is not None
        import time

        deadline = time.monotonic() + timeout
        while not supervisor.state.terminal and time.monotonic() < deadline:
            self.manager.tick(0.1)
        assert supervisor.state.terminal, f"run still {supervisor.state} after {timeout} s"
        return record.id

    def state(self, run_id: str) -> RunState:
        run = self.store.get_run(run_id)
        assert run is not None
        return RunState(run.state)

    def events(self, run_id: str, kind: str | None = None) -> list[Any]:
        return [e for e in self.store.events(run_id) if kind is None or e.kind == kind]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path)
    yield h
    h.manager.shutdown(stop_runs=True, timeout=20)
    # After every test no process carrying one of its runs' markers may be left alive.
    leftovers = [p for rid in h.run_ids for p in processes_with_marker(rid)]
    for proc in leftovers:
        proc.kill()
    assert not leftovers, f"processes left behind: {[p.pid for p in leftovers]}"


MakeProfile = Callable[..., Profile]
