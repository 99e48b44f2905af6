"""Finding inference, trainer, orchestrator and env servers in prime-rl's launcher tree: by the
command lines each version gives them, and by the titles main sets once they run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from airvisor.box._members import TreeProcess, component_of, launcher_members, match_members


@pytest.mark.parametrize(("argv", "component"), [
    # v0.4 rl.py:613,686-692,721-746
    (["uv", "run", "inference", "@", "/tmp/i.toml"], "inference"),
    (["/venv/bin/orchestrator", "@", "/tmp/o.toml"], "orchestrator"),
    (["uv", "run", "env", "PYTHONUNBUFFERED=1", "torchrun", "--nproc-per-node=2", "-m",
      "prime_rl.trainer.rl.train", "@", "/tmp/t.toml"], "trainer"),
    # main entrypoints/rl.py
    (["env-server", "@", "/run/configs/envs/train/gsm8k.json"], "env-server"),
    # main's titles (utils/process.py set_proc_title): a retitled process's cmdline is its title
    (["PRIME-RL::Inference"], "inference"),
    (["PRIME-RL::Orchestrator"], "orchestrator"),
    (["PRIME-RL::EnvServer"], "env-server"),
    (["PRIME-RL::Trainer"], "trainer"),
    (["PRIME-RL::Trainer   "], "trainer"),  # padded
    (["PRIME-RL::Launcher"], None),  # the launcher itself is not a member
    (["VLLM::EngineCore"], None),
    # never a substring of an unrelated command line
    (["python", "/home/u/inference_notes.py"], None),
    (["grep", "orchestrator-config"], None),
])
def test_component_of(argv: list[str], component: str | None) -> None:
    assert component_of(argv) == component


def test_the_shallowest_process_of_each_component_is_the_member() -> None:
    tree = [
        TreeProcess(11, 10, ("PRIME-RL::Inference",)),
        TreeProcess(12, 11, ("VLLM::EngineCore",)),
        TreeProcess(13, 10, ("torchrun", "-m", "prime_rl.trainer.rl.train", "@", "t")),
        TreeProcess(14, 13, ("PRIME-RL::Trainer",)),
        TreeProcess(15, 13, ("PRIME-RL::Trainer",)),
        TreeProcess(16, 10, ("PRIME-RL::Orchestrator",)),
        TreeProcess(17, 10, ("PRIME-RL::EnvServer",)),
        TreeProcess(18, 10, ("tail", "-F", "orchestrator.log")),
    ]
    assert match_members(10, tree) == {"inference": 11, "trainer": 13, "orchestrator": 16,
                                       "env-server": 17}


def test_retitled_processes_are_found_in_a_real_tree() -> None:
    """Real processes that retitle themselves as main's do (setproctitle), found after the
    title is set, the way airvisor's member scan meets them on a busy box."""
    code = ("import setproctitle, sys, time; setproctitle.setproctitle(sys.argv[1]); "
            "print('titled', flush=True); time.sleep(60)")
    parent_code = (
        "import subprocess, sys, time\n"
        f"procs = [subprocess.Popen([sys.executable, '-c', {code!r}, t], stdout=subprocess.PIPE)"
        " for t in ('PRIME-RL::Inference', 'PRIME-RL::Orchestrator', 'PRIME-RL::Trainer')]\n"
        "for p in procs: p.stdout.readline()\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n")
    launcher = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE,
                                start_new_session=True)
    try:
        assert launcher.stdout is not None
        assert launcher.stdout.readline().strip() == b"ready"
        found = launcher_members(launcher.pid)
        assert set(found) == {"inference", "orchestrator", "trainer"}
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)  # the tree this test started, by its session
        launcher.wait(timeout=10)
