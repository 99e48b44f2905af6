"""Host side of the adapter drivers: run a driver under a test venv's python (one verifiers
version each, envs/air_mlgym/scripts/make_test_venvs.sh) and return what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

DRIVERS = Path(__file__).resolve().parent
PACKAGE_ROOT = Path(__file__).resolve().parents[3] / "envs" / "air_mlgym"
VENVS = {
    "vf03": Path(os.environ.get("AIR_MLGYM_VENV_VF03", "/opt/airvisor-test/venv-vf03")),
    "vf04": Path(os.environ.get("AIR_MLGYM_VENV_VF04", "/opt/airvisor-test/venv-vf04")),
}


def venv_python(kind: str) -> Path:
    python = VENVS[kind] / "bin" / "python"
    if not python.exists():
        reason = (
            f"{kind} test venv missing at {VENVS[kind]}: run "
            "envs/air_mlgym/scripts/make_test_venvs.sh (or set AIR_MLGYM_VENV_"
            f"{kind.upper()})"
        )
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    return python


def drive(kind: str, tmp_path: Path, config: dict[str, Any]) -> dict[str, Any]:
    python = venv_python(kind)
    config_path = tmp_path / f"{kind}.json"
    out_path = tmp_path / f"{kind}-out.json"
    config_path.write_text(json.dumps(config))
    env = dict(os.environ)
    # verifiers' v1 chat harness runs its program with uv, which the venv provides.
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    # This checkout's package, whatever checkout the venv's editable install points at.
    env["PYTHONPATH"] = str(PACKAGE_ROOT)
    done = subprocess.run(
        [str(python), str(DRIVERS / f"drive_{kind}.py"), str(config_path), str(out_path)],
        cwd=tmp_path,  # nothing may depend on the cwd
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(out_path.read_text())
    return result
