"""Shared set-up of the reaper scenarios (each runs as pid 1 of its own PID + mount namespace)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
_STASH = Path("/run/airvisor-scenario-tmp")


def _under_tmp(path: Path) -> bool:
    try:
        path.resolve().relative_to("/tmp")
    except ValueError:
        return False
    return True


def private_tmp(size: str = "256m") -> None:
    """Private /tmp and /dev/shm for this mount namespace: nothing written there (work dirs,
    torchrun's and vLLM's leftovers) outlives the scenario or touches anyone else's.

    What the scenario itself runs from (the checkout, its virtual environment, PYTHONPATH) may
    live under /tmp (a CI clone often does): those directories are bound back in, so the fresh
    tmpfs hides everything else but not them.
    """
    keep = {REPO_ROOT, Path(sys.prefix), Path(sys.executable).parent}
    keep.update(Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    # The vLLM CPU venv (real vLLM, torchrun) may have been built under /tmp too.
    if os.environ.get("AIRVISOR_VLLM_VENV"):
        keep.add(Path(os.environ["AIRVISOR_VLLM_VENV"]))
    keep = {p.resolve() for p in keep if p.exists() and _under_tmp(p)}
    if keep:
        _STASH.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", "/tmp", str(_STASH)], check=True)
    for target in ("/tmp", "/dev/shm"):
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", target],
                       check=True)
    # Outer directories first, so a nested one is bound inside its parent's bind.
    for path in sorted(keep, key=lambda p: len(p.parts)):
        relative = path.relative_to("/tmp")
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", str(_STASH / relative), str(path)], check=True)
