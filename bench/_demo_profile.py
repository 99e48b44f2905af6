"""The demo stand-ins as a profile for the benchmarks: a prime-rl v0.4 config written as a user
writes one, and the airvisor profile that runs it (reaper off: other stand-ins may run here)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import tomli_w


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_demo_profile(directory: Path, *, name: str, max_steps: int, step_time: float,
                       ckpt_interval: int = 5, keep_last: int = 3,
                       **sections: dict[str, Any]) -> Path:
    """Write `<name>-rl.toml` (prime-rl v0.4) and `<name>.toml` (the profile) into `directory`;
    the run directory is `directory/run`. Extra profile sections (health, restart, ...) merge in.
    """
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    rl = {
        "output_dir": str(directory / "run"), "max_steps": max_steps, "seq_len": 2048,
        "inference_gpu_ids": [0], "trainer_gpu_ids": [1],
        "ckpt": {"interval": ckpt_interval, "keep_last": keep_last},
        "model": {"name": "demo/tiny"}, "inference": {"server": {"port": port}},
        "trainer": {},
        "orchestrator": {"client": {"base_url": [f"http://127.0.0.1:{port}/v1"]},
                         "sampling": {"max_tokens": 512}},
    }
    config = directory / f"{name}-rl.toml"
    config.write_text(tomli_w.dumps(rl))
    profile: dict[str, Any] = {
        "run": {"name": name, "demo": True, "on_existing": "replace"},
        "prime_rl": {"version": "0.4", "python": [], "args": ["@", str(config)],
                     "command_prefix": ["{python}", "-m", "airvisor.demo", "--prime-rl", "0.4"],
                     "workdir": str(directory)},
        "demo": {"inference": {"startup_delay": 1.0}, "trainer": {"step_time": step_time},
                 "orchestrator": {"step_time": step_time / 2}},
        "trainer": {"min_free_gib": 0},
        "reaper": {"enabled": False},
    }
    for section, values in sections.items():
        profile.setdefault(section, {}).update(values)
    path = directory / f"{name}.toml"
    path.write_text(tomli_w.dumps(profile))
    return path
