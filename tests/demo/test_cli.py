"""`python -m airvisor.demo`: a bad command line gets one clear line and status 2."""

from __future__ import annotations

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
