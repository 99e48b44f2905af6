"""`airvisor gpus` on this driverless machine: one clear sentence, exit status 1."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airvisor.gpu import GPUUnavailable, PynvmlBackend


def test_gpus_without_a_driver_is_one_sentence() -> None:
    try:
        PynvmlBackend().read_devices()
    except GPUUnavailable:
        pass
    else:
        pytest.skip("this machine has an NVIDIA driver")
    done = subprocess.run([sys.executable, "-m", "airvisor", "gpus"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "driver" in lines[0] and "Traceback" not in done.stderr
