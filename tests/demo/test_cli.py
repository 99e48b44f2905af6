"""`python -m airvisor.demo`: a bad command line gets one clear line and status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _demo(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airvisor.demo", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_unknown_component_and_flag(tmp_path: Path) -> None:
    unknown = _demo("vllm", cwd=tmp_path)
    assert unknown.returncode == 2
    assert "unknown component 'vllm'" in unknown.stderr and "inference" in unknown.stderr

    typo = _demo("orchestrator", "--ckpt.intervl", "5", cwd=tmp_path)
    assert typo.returncode == 2
    assert "did you mean --ckpt.interval?" in typo.stderr
    assert "Traceback" not in typo.stderr

    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nname = Qwen/Qwen3-0.6B\n")
    broken = _demo("trainer", "@", str(bad), cwd=tmp_path)
    assert broken.returncode == 2
    assert "bad.toml" in broken.stderr and "Traceback" not in broken.stderr


def test_help_lists_the_keys(tmp_path: Path) -> None:
    overview = _demo("--help", cwd=tmp_path)
    assert overview.returncode == 0 and "torchrun" in overview.stdout
    keys = _demo("trainer", "--help", cwd=tmp_path)
    assert keys.returncode == 0
    assert "--ckpt.resume-step" in keys.stdout and "--demo.crash-at-step" in keys.stdout
    assert _demo(cwd=tmp_path).returncode == 2


def test_prime_rl_version_is_a_global_option(tmp_path: Path) -> None:
    for command in ("inference", "trainer", "orchestrator"):
        done = _demo("--prime-rl", "0.4", command, "--help", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert _demo("--prime-rl=main", "--help", cwd=tmp_path).returncode == 0
    unknown = _demo("--prime-rl", "0.8", "trainer", cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown version '0.8'" in unknown.stderr
    unnamed = _demo("rl", "@", "rl.toml", cwd=tmp_path)
    assert unnamed.returncode == 2 and "--prime-rl 0.4|main" in unnamed.stderr


def test_demo_settings_come_from_the_environment(tmp_path: Path) -> None:
    """AIRVISOR_DEMO carries pacing and faults, since prime-rl refuses a [demo] table."""
    env_run = subprocess.run(
        [sys.executable, "-m", "airvisor.demo", "trainer"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "AIRVISOR_DEMO": '{"trainer": {"crash_at_stp": 1}}'},
    )
    assert env_run.returncode == 2
    assert "demo.crash_at_stp" in env_run.stderr and "Traceback" not in env_run.stderr
    not_json = subprocess.run(
        [sys.executable, "-m", "airvisor.demo", "orchestrator"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "AIRVISOR_DEMO": "{trainer: 1}"},
    )
    assert not_json.returncode == 2 and "AIRVISOR_DEMO: not valid JSON" in not_json.stderr
