"""The `rl` launcher stand-in, per prime-rl version, end to end (real processes on loopback).

What each run writes is judged by airvisor's layout table (airvisor/primerl/_layout.py), the way
the supervisor will judge a real run's directory.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest
import tomli_w

from airvisor.policy import choose_resume_step
from airvisor.primerl._layout import RunLayout, layout_for
from airvisor.profile._configs import deep_merge

if TYPE_CHECKING:
    from airvisor_test_standins import Standin, Standins

VERSIONS = ("0.4", "main")
PACE = {"trainer": {"step_time": 0.05}, "orchestrator": {"step_time": 0.05}}
STEP_LINE = re.compile(r"SUCCESS Step (\d+) \|")


def write_rl_config(
    standins: Standins, version: str, *, max_steps: int, interval: int = 2, **extra: Any
) -> Path:
    """A user's rl.toml in that version's dialect, with the inference server on a free port."""
    port = standins.free_port()
    url = f"http://127.0.0.1:{port}/v1"
    config: dict[str, Any] = {
        "output_dir": "outputs",
        "max_steps": max_steps,
        "model": {"name": "Qwen/Qwen3-0.6B"},  # main's renderer map knows it
        "ckpt": {"interval": interval},
        "inference": {"server": {"host": "127.0.0.1", "port": port}},
        "trainer": {},  # v0.4's RLConfig requires the table
    }
    if version == "0.4":
        config |= {"inference_gpu_ids": [0], "trainer_gpu_ids": [1, 2]}
        config["orchestrator"] = {"client": {"base_url": [url]}}
    else:
        config |= {"run": {"name": "demo"},
                   "deployment": {"num_train_gpus": 2, "num_infer_gpus": 1}}
        config["orchestrator"] = {"model": {"client": {"base_url": url}}}
    config = deep_merge(config, extra)
    path = Path(standins.root) / f"rl-{version}.toml"
    path.write_text(tomli_w.dumps(config))
    return path


def layout_of(standins: Standins, version: str) -> RunLayout:
    out = standins.root / "outputs"
    facts = {"output_dir": str(out)} if version == "0.4" else {
        "output_dir": str(out), "run_dir": str(out / "demo")}
    return layout_for(version, facts)


def steps_in(path: Path | None) -> list[int]:
    assert path is not None and path.is_file(), f"no log at {path}"
    text = re.sub(r"\x1b\[[0-9;]*m", "", path.read_text(errors="replace"))
    return [int(m) for m in STEP_LINE.findall(text)]


def finish(launcher: Standin, code: int = 0) -> str:
    assert launcher.wait(timeout=90) == code, launcher.plain_log()[-4000:]
    return str(launcher.plain_log())


@pytest.mark.parametrize("version", VERSIONS)
def test_fresh_run_then_resume_at_an_explicit_step(standins: Standins, version: str) -> None:
    config = write_rl_config(standins, version, max_steps=6)
    log = finish(standins.start_rl(version, ["@", str(config)], demo=PACE))
    layout = layout_of(standins, version)
    finished = "RL training finished!" if version == "0.4" else "Training finished!"
    assert finished in log
    base = layout.step_base
    assert steps_in(layout.log_file("trainer")) == list(range(base, 6 + base))
    assert steps_in(layout.log_file("orchestrator")) == list(range(base, 6 + base))
    trainer_log = layout.log_file("trainer").read_text()  # type: ignore[union-attr]
    assert "Starting training loop" in trainer_log and "RL trainer finished!" in trainer_log
    assert "Orchestrator finished." in layout.log_file("orchestrator").read_text()  # type: ignore[union-attr]
    # Both versions' final checkpoint is step max_steps; every interval step is complete.
    scan = layout.scan()
    assert [s for s, halves in sorted(scan.items()) if halves.complete] == [2, 4, 6]
    if version == "0.4":
        assert layout.metrics_file() is None
        assert not list((standins.root / "outputs").rglob("metrics.jsonl"))
        # v0.4: the orchestrator half is under run_default, the trainer's under output_dir.
        assert (standins.root / "outputs/run_default/checkpoints/step_4/orchestrator/buffer/"
                "rollout_buffer.jsonl").is_file()
        assert not (standins.root / "outputs/logs/rl.log").exists()  # clean=true removed it
    else:
        rows = layout.metrics_file().read_text().splitlines()  # type: ignore[union-attr]
        assert len(rows) == 12  # one row per step per component
        assert (standins.root / "outputs/demo/configs/trainer.json").is_file()

    resume = layout.resume_flags(4)
    log = finish(standins.start_rl(version, ["@", str(config), *resume, "--max-steps", "8"],
                                   demo=PACE, label="resumed"))
    first = layout.first_step(4)
    assert first == (4 if version == "0.4" else 5)
    assert steps_in(layout.log_file("trainer"))[0] == first
    assert steps_in(layout.log_file("orchestrator"))[0] == first
    assert steps_in(layout.log_file("trainer"))[-1] == 8 - 1 + base
    if version == "main":
        assert layout.log_file("trainer") == (
            standins.root / "outputs/demo/logs/attempt_2/trainer.log")
        assert "Resuming from step 4, cleaning future rollouts and broadcasts" in log
    assert choose_resume_step(layout.scan()).step == 8


@pytest.mark.parametrize("version", VERSIONS)
def test_a_crash_fails_the_launcher_and_stops_its_children(
    standins: Standins, version: str
) -> None:
    config = write_rl_config(standins, version, max_steps=20)
    demo = {**PACE, "trainer": {"step_time": 0.05, "crash_at_step": 3, "exit_code": 3}}
    launcher = standins.start_rl(version, ["@", str(config)], demo=demo)
    standins.wait_until(
        lambda: len(_tree(launcher.pid)) >= 4 or launcher.process.poll() is not None,
        "the launcher's children",
    )
    log = finish(launcher, 1)
    # rl.py:546,782-786 / entrypoints/rl.py monitor_process and the monitor loop
    assert "Error: Trainer failed with exit code 3" in log
    assert "Terminating all processes..." in log
    standins.wait_until(lambda: not _ours(standins.root), "the children to be gone")
    # The fault fired once: a resumed attempt gets past step 3.
    layout = layout_of(standins, version)
    choice = choose_resume_step(layout.scan())
    assert choice.step == 2
    log = finish(standins.start_rl(
        version, ["@", str(config), *layout.resume_flags(2), "--max-steps", "5"],
        demo=demo, label="resumed"))
    assert steps_in(layout.log_file("trainer"))[0] == layout.first_step(2)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_half_written_checkpoint_is_judged_incomplete(standins: Standins, version: str) -> None:
    # v0.4: progress.pt is written in place before the buffer -- the orchestrator dies between.
    # main: the trainer's DCP save dies before .metadata.
    component = "orchestrator" if version == "0.4" else "trainer"
    demo = {**PACE, component: {"step_time": 0.05, "half_checkpoint_at_step": 4}}
    config = write_rl_config(standins, version, max_steps=8)
    log = finish(standins.start_rl(version, ["@", str(config)], demo=demo), 1)
    assert f"Error: {component.capitalize()} failed with exit code 1" in log
    layout = layout_of(standins, version)
    status = layout.checkpoint_status(4)
    assert not status.complete
    if version == "0.4":
        assert (layout.orchestrator_half(4) / "progress.pt").is_file()  # present, proves nothing
        assert any("buffer" in reason for reason in status.missing)
    else:
        assert layout.trainer_half(4).is_dir()
        assert status.missing == ("trainer half has no .metadata (DCP save unfinished)",)
    choice = choose_resume_step(layout.scan())
    assert choice.step == 2
    assert 4 in dict(choice.skipped)
    finish(standins.start_rl(
        version, ["@", str(config), *layout.resume_flags(2)], demo=demo, label="resumed"))
    assert steps_in(layout.log_file("trainer"))[0] == layout.first_step(2)
    assert layout.checkpoint_status(8).complete


def test_main_refuses_a_used_run_dir_without_resume_or_clean(standins: Standins) -> None:
    config = write_rl_config(standins, "main", max_steps=2)
    finish(standins.start_rl("main", ["@", str(config)], demo=PACE))
    log = finish(standins.start_rl("main", ["@", str(config)], demo=PACE, label="again"), 1)
    assert "already contains artifacts from a previous run" in log
    assert not (standins.root / "outputs/demo/logs/attempt_2").exists()  # nothing started
    finish(standins.start_rl("main", ["@", str(config), "--clean"], demo=PACE, label="clean"))
    assert (standins.root / "outputs/demo/logs/attempt_1").is_dir()  # a clean run starts over
    assert not (standins.root / "outputs/demo/logs/attempt_2").exists()


def prime_rl_python(version: str) -> str | None:
    """An interpreter with that version's prime-rl config classes (scripts/setup.d builds
    /opt/airvisor-test/primerl-{v0.4,main}); AIRVISOR_DEMO_PRIMERL_PYTHON_0_4 / _MAIN override."""
    key = "AIRVISOR_DEMO_PRIMERL_PYTHON_" + ("0_4" if version == "0.4" else "MAIN")
    venv = "primerl-v0.4" if version == "0.4" else "primerl-main"
    default = Path("/opt/airvisor-test") / venv / "bin" / "python"
    return os.environ.get(key) or (str(default) if default.exists() else None)


@pytest.mark.parametrize("version", VERSIONS)
def test_prime_rl_resolves_the_config_and_refuses_what_it_refuses(
    standins: Standins, version: str
) -> None:
    python = prime_rl_python(version)
    if python is None:
        pytest.skip(f"no interpreter with prime-rl {version}'s config classes")
    env = {"AIRVISOR_DEMO_PRIMERL_PYTHON": python}
    good = write_rl_config(standins, version, max_steps=2)
    log = finish(standins.start_rl(version, ["@", str(good)], demo=PACE, env=env))
    assert "Config read by prime-rl" in log
    # `keep` is not a checkpoint key in either version (both call it keep_last), and prime-rl
    # forbids extra keys.
    bad = write_rl_config(standins, version, max_steps=2, ckpt={"interval": 2, "keep": 2},
                          output_dir="refused")
    log = finish(standins.start_rl(version, ["@", str(bad)], demo=PACE, env=env,
                                   label="refused"), 1)
    assert "prime-rl refused the config" in log and "keep" in log
    assert not (standins.root / "refused").exists()  # refused before anything was written


def _tree(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _ours(cwd: Path) -> list[int]:
    """Live processes running in the test's directory: the launcher's children all do."""
    found = []
    for process in psutil.process_iter(["pid", "status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE or process.pid == os.getpid():
            continue
        try:
            if Path(process.cwd()) == cwd:
                found.append(process.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_the_shipped_main_demo_config_is_valid_for_prime_rl_main(tmp_path: Path) -> None:
    python = prime_rl_python("main")
    if python is None:
        pytest.skip("no interpreter with prime-rl main's config classes")
    config = Path(__file__).resolve().parents[2] / "configs" / "demo" / "rl-main.toml"
    script = Path(__file__).resolve().parents[2] / "airvisor" / "primerl" / "resolve_config.py"
    done = subprocess.run([python, str(script), "--version", "main", "--", "@", str(config)],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    facts = json.loads(done.stdout)["facts"]
    assert facts["run_dir"].endswith("outputs/demo-main/demo")
    assert facts["ckpt_interval"] == 5


def test_main_starts_an_env_server_per_source_and_the_orchestrator_waits(
    standins: Standins,
) -> None:
    base = standins.free_port()
    source = {"name": "gsm8k", "env": {"taskset": {"id": "gsm8k"}}}
    config = write_rl_config(
        standins, "main", max_steps=2,
        orchestrator={"env_server_base_port": base, "train": {"source": [source]}},
    )
    log = finish(standins.start_rl("main", ["@", str(config)], demo=PACE))
    assert f"Starting train env server gsm8k at tcp://127.0.0.1:{base}" in log
    layout = layout_of(standins, "main")
    env_log = layout.env_server_log("train", "gsm8k")
    assert env_log is not None and f"listening at tcp://127.0.0.1:{base}" in env_log.read_text()
    orchestrator_log = layout.log_file("orchestrator").read_text()  # type: ignore[union-attr]
    assert f"Connecting to train env server gsm8k at tcp://127.0.0.1:{base}" in orchestrator_log
    assert (standins.root / "outputs/demo/configs/envs/train/gsm8k.json").is_file()


@pytest.mark.parametrize("version", VERSIONS)
def test_sigterm_to_the_launcher(standins: Standins, version: str) -> None:
    """v0.4's rl installs no SIGTERM handler: it dies and its children run on (why airvisor
    kills the whole tree). main's handler terminates the children first (entrypoints/rl.py:
    184-190)."""
    config = write_rl_config(standins, version, max_steps=1000)
    launcher = standins.start_rl(version, ["@", str(config)], demo=PACE)
    layout = layout_of(standins, version)
    def two_steps() -> bool:
        log = layout.log_file("trainer")
        return log is not None and log.is_file() and len(steps_in(log)) >= 2

    standins.wait_until(two_steps, "two trainer steps")
    children = [p.pid for p in _tree(launcher.pid)]
    launcher.process.send_signal(signal.SIGTERM)
    if version == "0.4":
        assert launcher.wait() == -signal.SIGTERM
        time.sleep(1.0)
        assert any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in children)  # orphans; the fixture kills the group
    else:
        assert launcher.wait(timeout=90) == 1
        assert "Received SIGTERM, terminating all processes..." in launcher.plain_log()
        standins.wait_until(lambda: not _ours(standins.root), "the children to be gone")
