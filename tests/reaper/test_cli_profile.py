"""`airvisor processes --profile P` and `airvisor reap --profile P` judge with the profile as
`check` and `start` resolve it (prime-rl's config read through `prepare_run`): a `vllm serve`
on the port of the profile's prime-rl config is in the run's way, not "not ours"; and the hint
to run again keeps the flags the user gave. Real processes, the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

LISTENER = textwrap.dedent("""
    import socket, sys, time, setproctitle
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    setproctitle.setproctitle(f"vllm serve /models/tiny --port {port}")
    print(port, flush=True)
    time.sleep(600)
""")


@pytest.fixture
def server() -> Iterator[tuple[int, int]]:
    """(pid, port) of a process titled `vllm serve` that listens on a free port."""
    popen = subprocess.Popen([sys.executable, "-c", LISTENER], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        assert popen.stdout is not None
        port = int(popen.stdout.readline())
        yield popen.pid, port
    finally:
        popen.kill()
        popen.wait()


def write_profile(directory: Path, port: int) -> Path:
    (directory / "rl.toml").write_text(textwrap.dedent(f"""
        inference_gpu_ids = [0]
        trainer_gpu_ids = [1]
        max_steps = 5
        output_dir = "outputs/t"

        [model]
        name = "Qwen/Qwen3-0.6B"

        [inference.server]
        port = {port}
    """))
    profile = directory / "p.toml"
    profile.write_text(textwrap.dedent("""
        [run]
        name = "t"
        demo = true

        [prime_rl]
        version = "0.4"
        command_prefix = ["{python}", "-m", "airvisor.demo", "--prime-rl", "0.4"]
        python = []
        args = ["@", "rl.toml"]
    """))
    return profile


def airvisor(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIRVISOR_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run([sys.executable, "-m", "airvisor", *args], capture_output=True,
                          text=True, env=env, stdin=subprocess.DEVNULL, timeout=120)


def test_processes_with_a_profile_knows_the_port_of_its_prime_rl_config(
        tmp_path: Path, server: tuple[int, int]) -> None:
    pid, port = server
    profile = write_profile(tmp_path, port)
    done = airvisor(tmp_path, "processes", "--profile", str(profile), "--pid", str(pid),
                    "--json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    [candidate] = [c for c in listed["candidates"] if c["pid"] == pid]
    assert f"listens on port {port}, which the profile needs" in candidate["reason"]
    assert candidate["owner"] == "nobody (not started by airvisor)"
    # Without the profile the same server is somebody else's, left alone.
    done = airvisor(tmp_path, "processes", "--pid", str(pid), "--json")
    listed = json.loads(done.stdout)
    assert [c["pid"] for c in listed["candidates"]] == []
    assert [c["pid"] for c in listed["kept"]] == [pid]


def test_reap_without_a_terminal_hints_the_same_command(
        tmp_path: Path, server: tuple[int, int]) -> None:
    pid, port = server
    profile = write_profile(tmp_path, port)
    done = airvisor(tmp_path, "reap", "--profile", str(profile), "--set", "run.name=x y",
                    "--pid", str(pid), "--grace", "2")
    assert done.returncode == 1
    assert (f"`airvisor reap --profile {profile} --set 'run.name=x y' --pid {pid} --grace 2 "
            f"--yes`") in done.stderr
    assert os.path.exists(f"/proc/{pid}")  # asked nobody, stopped nothing
